package dedup

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/anoptic/broadside/cmdlog/msg"
)

func TestAddAndMarks(t *testing.T) {
	tb := NewTable()
	steps := []struct {
		client, seq uint64
		added       bool
	}{
		{1, 1, true}, {1, 1, false}, {1, 3, true}, {1, 5, true}, {1, 3, false},
		{2, 2, true}, {1, 2, true}, {1, 4, true}, {1, 4, false}, {2, 1, true},
	}
	for _, s := range steps {
		if got := tb.Add(msg.RecordID{Client: s.client, Seq: s.seq}); got != s.added {
			t.Fatalf("Add(%d, %d) = %v, want %v", s.client, s.seq, got, s.added)
		}
	}
	want := []msg.ClientMark{{Client: 1, Mark: 5, Above: []uint64{}}, {Client: 2, Mark: 2, Above: []uint64{}}}
	if got := tb.Marks(); !marksEqual(got, want) {
		t.Fatalf("Marks = %+v, want %+v", got, want)
	}
	tb.Add(msg.RecordID{Client: 2, Seq: 9})
	tb.Add(msg.RecordID{Client: 2, Seq: 7})
	want[1].Above = []uint64{7, 9}
	if got := tb.Marks(); !marksEqual(got, want) {
		t.Fatalf("Marks = %+v, want %+v", got, want)
	}
}

// TestRandomOrderMatchesSet adds shuffled, repeated ids and checks every
// answer against a set, and that a table rebuilt from its marks answers
// the same.
func TestRandomOrderMatchesSet(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 50 {
		tb := NewTable()
		seen := map[msg.RecordID]bool{}
		var ids []msg.RecordID
		for c := uint64(1); c <= 3; c++ {
			for s := uint64(1); s <= 40; s++ {
				ids = append(ids, msg.RecordID{Client: c, Seq: s})
			}
		}
		ids = append(ids, ids[:60]...)
		rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
		half := len(ids) / 2
		for k, id := range ids {
			if k == half {
				tb = FromMarks(tb.Marks())
			}
			if got, want := tb.Add(id), !seen[id]; got != want {
				t.Fatalf("round %d: Add(%v) = %v, want %v", round, id, got, want)
			}
			seen[id] = true
		}
		for _, m := range tb.Marks() {
			if m.Mark != 40 || len(m.Above) != 0 {
				t.Fatalf("round %d: every id added, but %+v", round, m)
			}
		}
	}
}

func marksEqual(a, b []msg.ClientMark) bool {
	return slices.EqualFunc(a, b, func(x, y msg.ClientMark) bool {
		return x.Client == y.Client && x.Mark == y.Mark && slices.Equal(x.Above, y.Above)
	})
}
