package lineage

import (
	"slices"
	"strings"
	"testing"
)

func TestAffectedWithin(t *testing.T) {
	ix := handHistory(t)
	entities := func(r *AffectedResult) []EntityID {
		var es []EntityID
		for _, in := range r.Entities {
			es = append(es, in.Entity)
		}
		return es
	}
	// Position 3 is input to tick 2: 2 ticks after it is through tick 4.
	r, err := ix.AffectedWithin(3, 0, 2)
	if err != nil || r.Through != 4 || !slices.Equal(entities(r), []EntityID{s1, b1, b2, s2}) {
		t.Fatalf("--ticks 2: %v %+v", err, r)
	}
	// --until wins over --ticks.
	if r, err = ix.AffectedWithin(3, 7, 1); err != nil || r.Through != 7 || len(r.Entities) != 6 {
		t.Fatalf("--until 7: %v %+v", err, r)
	}
	// Neither: to the end.
	if r, err = ix.AffectedWithin(3, 0, 0); err != nil || r.Through != 7 {
		t.Fatalf("to the end: %v %+v", err, r)
	}
	if _, err := ix.AffectedWithin(100, 0, 5); err == nil || err.Error() != "no record at position 100 in the lineage store" {
		t.Fatalf("an unknown position with --ticks: %v", err)
	}
	if _, err := ix.AffectedWithin(100, 9, 0); err == nil || !strings.Contains(err.Error(), "was applied to no entity") {
		t.Fatalf("an unknown position with --until: %v", err)
	}
}
