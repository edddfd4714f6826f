package delivery

import (
	"fmt"
	"slices"
	"testing"

	"github.com/hookbridge/hookbridge/internal/store"
)

// Every instance computes the same assignment: each endpoint goes to
// exactly one instance, the shares are even, and an endpoint only some
// instances have goes to one of those.
func TestAssignSpreadsEndpoints(t *testing.T) {
	var all []string
	for i := range 10 {
		all = append(all, fmt.Sprintf("e%02d", i))
	}
	members := []store.DeliveryInstance{{ID: "x", Endpoints: all}, {ID: "y", Endpoints: all}, {ID: "z", Endpoints: append(slices.Clone(all), "only-z")}}
	owner := map[string]string{}
	for _, m := range members {
		got := assign(members, m.ID, m.Endpoints)
		if len(got) > 4 { // ceil(11 / 3)
			t.Errorf("%s reads %d endpoints, more than its share", m.ID, len(got))
		}
		for _, e := range got {
			if prev, ok := owner[e]; ok {
				t.Errorf("%s assigned to %s and %s", e, prev, m.ID)
			}
			owner[e] = m.ID
		}
	}
	if len(owner) != 11 || owner["only-z"] != "z" {
		t.Fatalf("owners %v: want all 11 endpoints assigned, only-z to z", owner)
	}
	// An instance not listed yet counts itself.
	if got := assign(nil, "x", all); len(got) != 10 {
		t.Fatalf("alone, x reads %v", got)
	}
}
