package replay_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/anoptic/broadside/cmdlog"
	"github.com/anoptic/broadside/cmdlog/coord"
	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/cmdlog/node"
	"github.com/anoptic/broadside/cmdlog/shard"
	"github.com/anoptic/broadside/cmdlog/shardstore"
	"github.com/anoptic/broadside/netcode/wire"
	"github.com/anoptic/broadside/replay"
)

// startCluster starts an in-process cmdlog cluster (3 replicas, 2 shards).
func startCluster(t *testing.T) *cmdlog.LocalCluster {
	t.Helper()
	lc, err := cmdlog.StartLocal(context.Background(), cmdlog.LocalConfig{
		Coordinator: coord.NewMemory(),
		Network:     node.NewLocalNet(),
		NewStorage:  func(msg.NodeID) (shard.Storage, error) { return shardstore.NewMemory(), nil },
		Timing:      node.Timing{Tick: 2 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lc.Close)
	return lc
}

// readLog reads every entry of the log up to its tail.
func readLog(t *testing.T, l replay.TickLog) []msg.Entry {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tail, err := l.CheckTail(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []msg.Entry
	for from := uint64(1); from <= tail; {
		es, err := l.Read(ctx, from, int(tail-from+1))
		if err != nil {
			t.Fatalf("read %d: %v", from, err)
		}
		for _, e := range es {
			if e.Pos <= tail {
				out = append(out, e)
			}
		}
		from = es[len(es)-1].Pos + 1
	}
	return out
}

// checkTicks checks that the log holds TICK(1..n) exactly once each, in
// order, and returns n.
func checkTicks(t *testing.T, entries []msg.Entry) uint64 {
	t.Helper()
	var last uint64
	for _, e := range entries {
		env, err := wire.DecodeEnvelope(e.Record.Data)
		if err != nil || env.Kind != wire.EnvelopeTick {
			continue
		}
		if env.Tick != last+1 {
			t.Fatalf("TICK(%d) at position %d follows TICK(%d)", env.Tick, e.Pos, last)
		}
		if e.Record.ID != (msg.RecordID{Client: replay.TickerClientID(9), Seq: env.Tick}) {
			t.Fatalf("TICK(%d) has id %v", env.Tick, e.Record.ID)
		}
		last = env.Tick
	}
	return last
}

// raceTickers runs two tickers of world 9 at once, stops one, then starts a
// third that finds where to continue from the log, and checks that every
// tick is in the log exactly once and in order.
func raceTickers(t *testing.T, l replay.TickLog) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := func(ctx context.Context) (stop func() error) {
		tk, err := replay.NewTicker(replay.TickerConfig{World: 9, Log: l, Rate: 400})
		if err != nil {
			t.Fatal(err)
		}
		ctx, c := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- tk.Run(ctx) }()
		return func() error {
			c()
			if err := <-done; !errors.Is(err, context.Canceled) {
				return err
			}
			return nil
		}
	}
	a, b := start(ctx), start(ctx)
	time.Sleep(150 * time.Millisecond)
	if err := a(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	last, err := replay.FindLastTick(ctx, l, 9)
	if err != nil || last == 0 {
		t.Fatalf("last tick %d: %v", last, err)
	}
	c := start(ctx) // a restarted ticker
	time.Sleep(150 * time.Millisecond)
	if err := b(); err != nil {
		t.Fatal(err)
	}
	if err := c(); err != nil {
		t.Fatal(err)
	}
	n := checkTicks(t, readLog(t, l))
	if n <= last {
		t.Fatalf("ticks stopped at %d after the restart (was %d)", n, last)
	}
	t.Logf("%d ticks, %d before the restart", n, last)
}

func TestTickerExactlyOnceMemLog(t *testing.T) {
	l := replay.NewMemLog()
	// Someone else's records in between must not confuse the search for
	// the last tick.
	_ = l.Append(context.Background(), []byte("noise"))
	raceTickers(t, l)
}

func TestTickerExactlyOnceCmdlog(t *testing.T) {
	lc := startCluster(t)
	c := lc.NewClient(cmdlog.ClientConfig{})
	defer c.Close()
	raceTickers(t, c)
}

// The ticker keeps its schedule on the injected clock: one tick per
// period, a burst to catch up after a short stall, and a fresh schedule
// (no burst) after a stall longer than MaxLag.
func TestTickerSchedule(t *testing.T) {
	l := replay.NewMemLog()
	clk := replay.NewFakeClock(time.Unix(1000, 0))
	tk, err := replay.NewTicker(replay.TickerConfig{World: 9, Log: l, Rate: 10, Clock: clk, MaxLag: time.Second, Start: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tk.Run(ctx) }()
	waitFor := func(ticks uint64) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for (tk.Next() <= ticks || clk.Pending() == 0) && time.Now().Before(deadline) {
			time.Sleep(100 * time.Microsecond)
		}
		if got := checkTicks(t, l.Entries(1)); got != ticks {
			t.Fatalf("%d ticks in the log, want %d", got, ticks)
		}
	}
	waitFor(1) // the first tick is immediate
	clk.Advance(100 * time.Millisecond)
	waitFor(2)
	clk.Advance(550 * time.Millisecond) // a short stall: catch up
	waitFor(7)
	clk.Advance(5 * time.Second) // a long stall: tick once, then reschedule
	waitFor(8)
	clk.Advance(100 * time.Millisecond)
	waitFor(9)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}

// slowLog acknowledges each append latency after it was issued (on the
// injected clock), in the order issued: a log slower than a tick period.
type slowLog struct {
	*replay.MemLog
	clk     *replay.FakeClock
	latency time.Duration
	queue   chan func()
	stopped chan struct{}
}

func newSlowLog(clk *replay.FakeClock, latency time.Duration) *slowLog {
	l := &slowLog{MemLog: replay.NewMemLog(), clk: clk, latency: latency, queue: make(chan func(), 1024), stopped: make(chan struct{})}
	go func() {
		defer close(l.stopped)
		for f := range l.queue {
			f()
		}
	}()
	return l
}

// stop lets the appends still queued land and ends the log's goroutine.
func (l *slowLog) stop() {
	close(l.queue)
	for {
		select {
		case <-l.stopped:
			return
		case <-time.After(time.Millisecond):
			l.clk.Advance(l.latency)
		}
	}
}

func (l *slowLog) AppendWithIDAsync(ctx context.Context, id msg.RecordID, data []byte, done func(error)) error {
	at := l.clk.Now().Add(l.latency)
	data = append([]byte(nil), data...)
	l.queue <- func() {
		<-l.clk.After(at.Sub(l.clk.Now()))
		done(l.MemLog.AppendWithID(ctx, id, data))
	}
	return nil
}

// A log whose appends take three tick periods does not slow the world's
// ticks down: the ticker keeps several markers in flight, in tick order
// (one at a time, it would tick at a third of its rate).
func TestTickerRateHoldsOnASlowLog(t *testing.T) {
	clk := replay.NewFakeClock(time.Unix(1000, 0))
	l := newSlowLog(clk, 100*time.Millisecond)
	const rate = 30
	tk, err := replay.NewTicker(replay.TickerConfig{World: 9, Log: l, Rate: rate, Clock: clk, Start: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tk.Run(ctx) }()
	period := time.Second / rate
	for i := 1; i <= rate; i++ {
		// Wait (bounded) for the ticker to issue this period's marker.
		for deadline := time.Now().Add(2 * time.Second); tk.Next() <= uint64(i) && time.Now().Before(deadline); {
			time.Sleep(100 * time.Microsecond)
		}
		time.Sleep(time.Millisecond) // the ticker waits on the clock again
		clk.Advance(period)
	}
	for i := 0; i < 10; i++ { // the markers still in flight land
		time.Sleep(2 * time.Millisecond)
		clk.Advance(period)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	l.stop()
	got := checkTicks(t, l.Entries(1))
	if got < rate {
		t.Fatalf("%d ticks in the log after one second of a 30 Hz ticker on a log with 100 ms appends, want at least %d", got, rate)
	}
}
