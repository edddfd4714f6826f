package delivery

import (
	"cmp"
	"hash/fnv"
	"slices"

	"github.com/hookbridge/hookbridge/internal/store"
)

// assign returns the endpoints instance self reads among members (self
// has endpoints configured). Every instance computes the same answer
// from the same list: each endpoint any member has goes (those fewer
// members have first, then by name) to the member having it that ranks
// it highest (a hash of member and
// endpoint) among those below their share (every endpoint over every
// member, rounded up), or to the highest-ranked member having it when
// all are at their share. So the shares are even, a member that joins or
// leaves moves little more than its own share (the consumer side's rule
// for partitions), and an endpoint only some instances have (a rolling
// change of the configuration) goes to one of those. A member not in the
// list yet (its first beat is not listed) counts itself.
func assign(members []store.DeliveryInstance, self string, endpoints []string) []string {
	if !slices.ContainsFunc(members, func(m store.DeliveryInstance) bool { return m.ID == self }) {
		members = append(slices.Clone(members), store.DeliveryInstance{ID: self, Endpoints: endpoints})
	}
	has := map[string][]string{} // endpoint -> members having it
	for _, m := range members {
		if m.ID == self {
			m.Endpoints = endpoints // this instance's own list is the current one
		}
		for _, e := range m.Endpoints {
			if !slices.Contains(has[e], m.ID) {
				has[e] = append(has[e], m.ID)
			}
		}
	}
	names := make([]string, 0, len(has))
	for e := range has {
		names = append(names, e)
	}
	// The endpoints fewer members have go first, so those members keep
	// room in their share for them.
	slices.SortFunc(names, func(a, b string) int { return cmp.Or(cmp.Compare(len(has[a]), len(has[b])), cmp.Compare(a, b)) })
	share := (len(names) + len(members) - 1) / len(members)
	load := make(map[string]int, len(members))
	var out []string
	for _, name := range names {
		ranked := slices.Clone(has[name])
		slices.SortFunc(ranked, func(a, b string) int {
			return cmp.Or(cmp.Compare(rank(b, name), rank(a, name)), cmp.Compare(a, b))
		})
		pick := ranked[0]
		for _, m := range ranked {
			if load[m] < share {
				pick = m
				break
			}
		}
		load[pick]++
		if pick == self {
			out = append(out, name)
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
