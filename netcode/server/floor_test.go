package server

import "testing"

// TestSessionFloor: the floor is the lowest command neither stored nor
// refused, counting from the first one the connection received, never
// above the command it goes with; a failed append keeps it down.
func TestSessionFloor(t *testing.T) {
	var f sessionFloor
	steps := []struct {
		seq     uint64
		refused bool
		stored  []uint64 // settled before this command arrives
		want    uint64
	}{
		{seq: 7, want: 7},                // a resumed session: 1..6 have results
		{seq: 8, want: 7},                // 7 in flight
		{seq: 9, refused: true, want: 7}, // rate-limited: settled
		{seq: 10, stored: []uint64{7}, want: 8},
		{seq: 11, stored: []uint64{8, 10}, want: 11}, // 9 refused, 10 stored: the hole closes
		{seq: 12, want: 11},                          // 11's append failed: it stays open
	}
	for i, s := range steps {
		for _, st := range s.stored {
			f.stored(st)
		}
		if got := f.receive(s.seq, s.refused); !s.refused && got != s.want {
			t.Fatalf("step %d (seq %d): floor %d, want %d", i, s.seq, got, s.want)
		}
	}
	f.mu.Lock()
	if got := f.floorLocked(100); got != 11 {
		t.Fatalf("floor %d after a failed append, want 11", got)
	}
	f.mu.Unlock()
}
