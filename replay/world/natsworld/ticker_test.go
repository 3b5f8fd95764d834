package natsworld

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anoptic/broadside/cmdlog"
	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/world"
	"github.com/nats-io/nats.go/jetstream"
)

// tickLog is an in-memory world log whose first failTails tail checks
// fail (a log cluster that has not formed yet).
type tickLog struct {
	*replay.MemLog
	failTails atomic.Int32
}

func (l *tickLog) CheckTail(ctx context.Context) (uint64, error) {
	if l.failTails.Add(-1) >= 0 {
		return 0, errors.New("no view record yet")
	}
	return l.MemLog.CheckTail(ctx)
}

func (l *tickLog) Subscribe(uint64) *cmdlog.Subscription { return nil }

// ticks returns the distinct tick markers of world 1 in the log.
func (l *tickLog) ticks() int {
	n := 0
	id := replay.TickerClientID(1)
	for _, e := range l.Entries(1) {
		if e.Record.ID.Client == id {
			n++
		}
	}
	return n
}

// TestTickerRestartsAndOverlaps: the holder of a short Ticker lease
// restarts a Ticker that failed (the log not ready at first) instead of
// holding the lease without ticking, and keeps the lease while it renews
// it; a second Ticker process takes the lease over when the first stops,
// and the log keeps ticking, each tick stored once.
func TestTickerRestartsAndOverlaps(t *testing.T) {
	js := startNATS(t)()
	log := &tickLog{MemLog: replay.NewMemLog()}
	log.failTails.Store(3)
	l1, stop1 := startTicker(t, js, "t1", 0, TickerConfig{Log: log})
	if l1.TTL() != DefaultTickerTTL {
		t.Fatalf("ticker lease TTL %v, want %v", l1.TTL(), DefaultTickerTTL)
	}
	waitFor(t, "30 ticks after the log's first failures", func() bool { return log.ticks() >= 30 })

	l2, _ := startTicker(t, js, "t2", 0, TickerConfig{Log: log})
	time.Sleep(200 * time.Millisecond)
	if w, _, _ := l1.Owner(ctxT(t), TickerLease); w != "t1" {
		t.Fatalf("the Ticker's lease moved to %q while t1 renewed it", w)
	}
	stop1()
	before, at := log.ticks(), time.Now()
	waitFor(t, "t2 holding the Ticker's lease", func() bool { w, _, _ := l2.Owner(ctxT(t), TickerLease); return w == "t2" })
	waitFor(t, "30 more ticks", func() bool { return log.ticks() >= before+30 })
	if d := time.Since(at); d > 3*time.Second {
		t.Fatalf("30 ticks took %v after the first Ticker stopped", d)
	}
	// Every marker id is stored once (the MemLog dedups by id like the
	// log): the ticks are dense from 1.
	checkTicksOnce(t, log)
}

// deadLog is the world log as one process sees it: after kill, every
// append fails (the process died; what it appended before stays).
type deadLog struct {
	world.Log
	dead atomic.Bool
}

func (l *deadLog) AppendWithID(ctx context.Context, id msg.RecordID, data []byte) error {
	if l.dead.Load() {
		return replay.ErrLogClosed
	}
	return l.Log.AppendWithID(ctx, id, data)
}

func (l *deadLog) AppendWithIDAsync(ctx context.Context, id msg.RecordID, data []byte, done func(error)) error {
	done(l.AppendWithID(ctx, id, data))
	return nil
}

// maxTick returns the highest tick marker of world 1 in the log.
func (l *tickLog) maxTick() uint64 {
	var n uint64
	id := replay.TickerClientID(1)
	for _, e := range l.Entries(1) {
		if e.Record.ID.Client == id {
			n = max(n, e.Record.ID.Seq)
		}
	}
	return n
}

// TestTickerStandbyBridgesADeadHolder: the Ticker's holder dies (no more
// markers, renewals or release); a second process competing for the
// lease, tailing the log, bridges the ticks while the lease has not
// expired yet (a 2 s lease here, so that the bridge is what keeps the
// world ticking), then claims the lease and goes on; every tick is
// stored once and none is missing. Without the standby (Grace < 0) no
// tick is stored before the lease is claimed.
func TestTickerStandbyBridgesADeadHolder(t *testing.T) {
	for _, standby := range []bool{true, false} {
		t.Run(fmt.Sprintf("standby=%v", standby), func(t *testing.T) {
			connect := startNATS(t)
			log := &tickLog{MemLog: replay.NewMemLog()}
			holderLog := &deadLog{Log: log}
			js1 := connect()
			const ttl = 2 * time.Second
			l1, _ := startTicker(t, js1, "t1", ttl, TickerConfig{Log: holderLog})
			waitFor(t, "t1 holding the Ticker's lease", func() bool { w, _, _ := l1.Owner(ctxT(t), TickerLease); return w == "t1" })

			grace := time.Duration(0)
			if !standby {
				grace = -1
			}
			l2, _ := startTicker(t, connect(), "t2", 0, TickerConfig{Log: log, Grace: grace})
			waitFor(t, "30 ticks", func() bool { return log.ticks() >= 30 })

			// t1 dies: its appends fail, its NATS connection is gone.
			holderLog.dead.Store(true)
			js1.Conn().Close()
			killed := log.maxTick()
			var claimedAt uint64
			waitFor(t, "t2 holding the Ticker's lease", func() bool {
				w, _, _ := l2.Owner(ctxT(t), TickerLease)
				claimedAt = log.maxTick()
				return w == "t2"
			})
			if bridged := claimedAt - min(claimedAt, killed+1); standby && bridged < 15 {
				t.Fatalf("%d ticks stored between the holder's death (tick %d) and t2's claim of its %v lease, want the bridge's (about 30 a second)", bridged, killed, ttl)
			} else if !standby && bridged > 1 {
				t.Fatalf("%d ticks stored before the lease was claimed with no standby", bridged)
			}
			waitFor(t, "30 ticks after the claim", func() bool { return log.maxTick() >= claimedAt+30 })
			checkTicksOnce(t, log)
		})
	}
}

// timedLog records when each tick marker of world 1 was first stored
// (wall clock).
type timedLog struct {
	*tickLog
	mu      sync.Mutex
	arrived map[uint64]time.Time
}

func (l *timedLog) AppendWithID(ctx context.Context, id msg.RecordID, data []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	before := l.Tail()
	err := l.tickLog.AppendWithID(ctx, id, data)
	if err == nil && l.Tail() != before && id.Client == replay.TickerClientID(1) {
		if _, ok := l.arrived[id.Seq]; !ok {
			l.arrived[id.Seq] = time.Now()
		}
	}
	return err
}

func (l *timedLog) AppendWithIDAsync(ctx context.Context, id msg.RecordID, data []byte, done func(error)) error {
	done(l.AppendWithID(ctx, id, data))
	return nil
}

// interval returns the time between the stores of tick n-1 and n.
func (l *timedLog) interval(n uint64) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	a, ok1 := l.arrived[n-1]
	b, ok2 := l.arrived[n]
	if !ok1 || !ok2 {
		return -1
	}
	return b.Sub(a)
}

// TestSecondTickerTicksOnWhenTheHolderDies: t2, not holding the Ticker's
// lease, holds the second Ticker's (TickerSecondLease) and appends every
// marker on the holder's shared schedule; when the holder t1 dies (2 s
// lease, so nobody claims it meanwhile), the next tick is stored within
// about a period of the last one, where the grace-based standby alone
// (NoSecondTicker) leaves a longer interval. Every tick is stored once.
func TestSecondTickerTicksOnWhenTheHolderDies(t *testing.T) {
	for _, second := range []bool{true, false} {
		t.Run(fmt.Sprintf("second=%v", second), func(t *testing.T) {
			connect := startNATS(t)
			log := &timedLog{tickLog: &tickLog{MemLog: replay.NewMemLog()}, arrived: map[uint64]time.Time{}}
			hlog := &deadLog{Log: log}
			js1 := connect()
			l1, _ := startTicker(t, js1, "t1", 2*time.Second, TickerConfig{Log: hlog, NoSecondTicker: true})
			waitFor(t, "t1 holding the Ticker's lease", func() bool { w, _, _ := l1.Owner(ctxT(t), TickerLease); return w == "t1" })
			l2, _ := startTicker(t, connect(), "t2", 0, TickerConfig{Log: log, NoSecondTicker: !second})
			if second {
				waitFor(t, "t2 holding the second Ticker's lease", func() bool { w, _, _ := l2.Owner(ctxT(t), TickerSecondLease); return w == "t2" })
			}
			start := log.maxTick()
			waitFor(t, "60 ticks", func() bool { return log.maxTick() >= start+60 })
			var quietMax time.Duration
			for n := start + 30; n <= start+60; n++ {
				quietMax = max(quietMax, log.interval(n))
			}
			hlog.dead.Store(true)
			js1.Conn().Close()
			killed := log.maxTick()
			waitFor(t, "30 ticks after the holder's death", func() bool { return log.maxTick() >= killed+30 })
			var stall time.Duration
			for n := killed + 1; n <= killed+30; n++ {
				stall = max(stall, log.interval(n))
			}
			if w, _, _ := l2.Owner(ctxT(t), TickerLease); w == "t2" {
				t.Fatal("t2 claimed the 2 s lease already: the test measures the time before")
			}
			t.Logf("second=%v: the longest tick interval after the holder's death %v (quiet before it: %v)", second, stall, quietMax)
			period := time.Second / 30
			if second && stall > period+period/2+max(quietMax-period, 0) {
				t.Fatalf("the longest tick interval after the holder's death is %v, over 1.5 periods plus the quiet jitter (quiet max %v): the second Ticker left a gap", stall, quietMax)
			}
			checkTicksOnce(t, log.tickLog)
		})
	}
}

// checkTicksOnce fails t unless every tick marker of world 1 in log is
// stored once and the ticks are dense from 1 (the MemLog dedups by id
// like the log).
func checkTicksOnce(t *testing.T, log *tickLog) {
	t.Helper()
	seen := map[uint64]bool{}
	for _, e := range log.Entries(1) {
		if e.Record.ID.Client == replay.TickerClientID(1) {
			if seen[e.Record.ID.Seq] {
				t.Fatalf("tick %d stored twice", e.Record.ID.Seq)
			}
			seen[e.Record.ID.Seq] = true
		}
	}
	for n := uint64(1); n <= uint64(len(seen)); n++ {
		if !seen[n] {
			t.Fatalf("tick %d missing of %d", n, len(seen))
		}
	}
}

// startTicker runs worker's RunTicker with cfg (world 1 at 30 Hz, on
// Ticker leases of length ttl, 0 the default, opened on js) until stop
// or the end of the test; it returns the worker's leases.
func startTicker(t *testing.T, js jetstream.JetStream, worker string, ttl time.Duration, cfg TickerConfig) (l *Leases, stop func()) {
	t.Helper()
	l, err := OpenTickerLeases(ctxT(t), js, LeasesConfig{World: 1, Worker: worker, TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	cfg.World, cfg.Leases, cfg.Rate, cfg.Logger = 1, l, 30, quiet()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = RunTicker(ctx, cfg)
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return l, stop
}
