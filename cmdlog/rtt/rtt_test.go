package rtt

import "testing"

func TestTimeoutFollowsSamples(t *testing.T) {
	var e Estimator
	if got := e.Timeout(50); got != 50 {
		t.Fatalf("no samples: timeout %d, want the floor 50", got)
	}
	// A steady 10-tick RTT: the deviation decays and the timeout falls
	// towards the RTT, never under the floor.
	for range 64 {
		e.Observe(10)
	}
	if got := e.Timeout(1); got < 10 || got > 13 {
		t.Fatalf("steady 10-tick samples: timeout %d, want 10..13 (the integer deviation stops at 3)", got)
	}
	if got := e.Timeout(40); got != 40 {
		t.Fatalf("floor 40 above the estimate: timeout %d", got)
	}
	// A jump to 100 ticks raises the timeout past the new RTT's smoothed
	// value at once (the deviation term).
	e.Observe(100)
	if got := e.Timeout(1); got <= 21 {
		t.Fatalf("after a 100-tick sample: timeout %d, want above 21", got)
	}
	// Zero and negative samples count as one tick.
	var z Estimator
	z.Observe(0)
	z.Observe(-5)
	if got := z.Timeout(0); got != 3 {
		t.Fatalf("samples clamped to 1: timeout %d, want 3", got)
	}
}
