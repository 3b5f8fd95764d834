package server

import (
	"sync"
	"testing"
	"time"

	"github.com/anoptic/broadside/netcode/wire"
	"github.com/prometheus/client_golang/prometheus"
)

// fakeClock is a Config.Now that moves only when told, and counts its
// calls.
type fakeClock struct {
	mu    sync.Mutex
	now   time.Time
	calls int
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func (c *fakeClock) callCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls
}

func histogramSum(t *testing.T, reg *prometheus.Registry, name string) (sum float64, count uint64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			h := mf.GetMetric()[0].GetHistogram()
			return h.GetSampleSum(), h.GetSampleCount()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0, 0
}

// TestAckDelayStartsAtArrival: the server's command_stored histogram
// measures from the moment a command arrives, including the time it waits
// for an append worker, not from the moment its append starts. One worker,
// two commands: the second waits behind the first while the clock moves 10s.
func TestAckDelayStartsAtArrival(t *testing.T) {
	clock := &fakeClock{now: time.Now()}
	hl := newHeldLog()
	hl.hold()
	reg := prometheus.NewRegistry()
	ts := startServerWith(t, Config{Limits: IntakeLimits{Rate: 1000, Burst: 100}, Durability: Durable, Log: hl,
		MaxAppending: 1, Now: clock.Now, Registry: reg})
	t.Cleanup(hl.unhold)
	c, err := ts.dial(t, ts.token(t, "ada", 7, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	base := clock.callCount() // the handshake's calls are over once Welcome is in
	sendN(t, c, 2)
	waitFor(t, "the first append", func() bool { return hl.count() == 1 })
	waitFor(t, "both commands read", func() bool { return clock.callCount() >= base+2 })
	clock.advance(10 * time.Second)
	hl.unhold()
	for seq, st := range results(t, c, 2) {
		if st != wire.AckDurable {
			t.Fatalf("command %d: %v", seq, st)
		}
	}
	sum, n := histogramSum(t, reg, "broadside_server_command_stored_seconds")
	if n != 2 || sum < 19.9 {
		t.Fatalf("ack delay histogram: %d observations summing to %.3fs, want 2 of 10s each (arrival to stored)", n, sum)
	}
}

// TestRateLimitSeesArrivalTimes: a player sending at half its rate limit
// is never refused, even while the log holds every append for seconds. (The
// server used to stop reading a player's stream while the log was slow,
// then judge a backlog that arrived over seconds as one burst: bots at
// 30/s were refused under --rate 60.)
func TestRateLimitSeesArrivalTimes(t *testing.T) {
	hl := newHeldLog()
	hl.hold()
	ts := startServerWith(t, Config{Limits: IntakeLimits{Rate: 10, Burst: 5}, Durability: Durable, Log: hl, MaxAppending: 1})
	t.Cleanup(hl.unhold)
	c, err := ts.dial(t, ts.token(t, "ada", 7, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const n = 12
	for i := range n {
		if _, err := c.Send(wire.GameCommand{Kind: wire.CommandRudder, Value: int32(i)}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond) // 5/s, half the limit
	}
	hl.unhold()
	limited := 0
	for _, st := range results(t, c, n) {
		if st == wire.AckRateLimited {
			limited++
		}
	}
	if limited > 0 {
		t.Fatalf("%d of %d commands sent at half the rate limit were refused as rate-limited", limited, n)
	}
}
