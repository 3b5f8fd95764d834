package snapshot

import "testing"

// TestSchedulerBacksOffAfterLostChains: when captures are taken and then
// not stored (a failing store), the scheduler does not capture the whole
// state again at every tick: the k-th lost chain in a row makes the next
// full capture wait 2^k ticks (at most 16). Once a chain holds, a later
// loss starts again from 2 ticks.
func TestSchedulerBacksOffAfterLostChains(t *testing.T) {
	s := NewScheduler(Policy{})
	var gaps []uint64
	last := uint64(0)
	tick := uint64(1)
	for ; len(gaps) < 8; tick++ {
		needFull := true // every capture so far failed to store
		if s.chain {
			s.Broken() // the writer reports the loss at the next decision
		}
		take, full := s.Decide(tick, 100, needFull)
		if !take {
			continue
		}
		if !full {
			t.Fatalf("tick %d: a capture without a chain must be full", tick)
		}
		if last > 0 {
			gaps = append(gaps, tick-last)
		}
		last = tick
		s.Taken(tick, true, 1000)
	}
	want := []uint64{2, 4, 8, 16, 16, 16, 16, 16}
	for i := range want {
		if gaps[i] != want[i] {
			t.Fatalf("gaps between full captures while every store fails: %v, want %v", gaps, want)
		}
	}
	// The next capture is stored and the chain holds for 8 ticks, so the
	// count of losses starts again: after a loss the recapture is at
	// once (the last capture is more than 2 ticks old), and if that one
	// is lost too, the next waits 4 ticks.
	for tick < last+16 {
		tick++
	}
	if take, _ := s.Decide(tick, 100, true); !take {
		t.Fatal("no capture after the longest wait")
	}
	s.Taken(tick, true, 1000)
	stored := tick
	for tick < stored+8 {
		tick++
		s.Decide(tick, 0, false)
	}
	s.Broken()
	tick++
	if take, _ := s.Decide(tick, 100, true); !take {
		t.Fatalf("no capture at once after a loss following a stored chain (lost=%d)", s.lost)
	}
	s.Taken(tick, true, 1000)
	s.Broken()
	for i := uint64(1); i <= 4; i++ {
		take, _ := s.Decide(tick+i, 100, true)
		if take != (i == 4) {
			t.Fatalf("%d ticks after the second loss in a row: capture %v, want one only at 4 (lost=%d)", i, take, s.lost)
		}
	}
}
