package client

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestBackoff checks the reconnection backoff: doubling from MinBackoff,
// bounded by MaxBackoff, jittered to between half and all of the step, and
// reproducible from the generator's seed.
func TestBackoff(t *testing.T) {
	r := Reconnect{Attempts: 1, MinBackoff: 10 * time.Millisecond, MaxBackoff: 80 * time.Millisecond, Rand: rand.New(rand.NewPCG(1, 2))}
	r.defaults(5)
	again := r
	again.Rand = rand.New(rand.NewPCG(1, 2))
	for i, step := range []time.Duration{10, 20, 40, 80, 80, 80, 80} {
		step *= time.Millisecond
		d := r.Backoff(i)
		if d < step/2 || d > step {
			t.Fatalf("attempt %d: backoff %v outside [%v, %v]", i, d, step/2, step)
		}
		if d2 := again.Backoff(i); d2 != d {
			t.Fatalf("attempt %d: %v then %v from the same seed", i, d, d2)
		}
	}
	var z Reconnect
	z.defaults(9)
	if z.MinBackoff != 50*time.Millisecond || z.MaxBackoff != 2*time.Second || z.Rand == nil {
		t.Fatalf("defaults %+v", z)
	}
}
