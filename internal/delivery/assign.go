package delivery

import (
	"cmp"
	"hash/fnv"
	"slices"
)

// assign returns the endpoints of names that member reads among members.
// Every instance computes the same answer from the same list: each
// endpoint goes to the member that ranks it highest (a hash of member and
// endpoint) among those below their share, ceil(endpoints / members), so
// the shares are even and a member that joins or leaves moves little
// more than its own share (the consumer side's rule for partitions). A
// member not in the list yet (its first beat is not listed) counts
// itself.
func assign(members []string, member string, names []string) []string {
	if !slices.Contains(members, member) {
		members = append(slices.Clone(members), member)
	}
	share := (len(names) + len(members) - 1) / len(members)
	load := make(map[string]int, len(members))
	var out []string
	for _, name := range names {
		ranked := slices.Clone(members)
		slices.SortFunc(ranked, func(a, b string) int {
			return cmp.Or(cmp.Compare(rank(b, name), rank(a, name)), cmp.Compare(a, b))
		})
		for _, m := range ranked {
			if load[m] < share {
				load[m]++
				if m == member {
					out = append(out, name)
				}
				break
			}
		}
	}
	return out
}

// rank is how much member wants endpoint name.
func rank(member, name string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(member + "/" + name)) // never fails
	return h.Sum64()
}
