package natsworld

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anoptic/broadside/cmdlog"
	"github.com/anoptic/broadside/replay"
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
	l1, err := OpenTickerLeases(ctxT(t), js, LeasesConfig{World: 1, Worker: "t1"})
	if err != nil {
		t.Fatal(err)
	}
	if l1.TTL() != DefaultTickerTTL {
		t.Fatalf("ticker lease TTL %v, want %v", l1.TTL(), DefaultTickerTTL)
	}
	ctx1, stop1 := context.WithCancel(context.Background())
	done1 := make(chan struct{})
	go func() {
		defer close(done1)
		_ = RunTicker(ctx1, TickerConfig{World: 1, Log: log, Leases: l1, Rate: 30, Logger: quiet()})
	}()
	waitFor(t, "30 ticks after the log's first failures", func() bool { return log.ticks() >= 30 })

	l2, err := OpenTickerLeases(ctxT(t), js, LeasesConfig{World: 1, Worker: "t2"})
	if err != nil {
		t.Fatal(err)
	}
	ctx2, stop2 := context.WithCancel(context.Background())
	done2 := make(chan struct{})
	go func() {
		defer close(done2)
		_ = RunTicker(ctx2, TickerConfig{World: 1, Log: log, Leases: l2, Rate: 30, Logger: quiet()})
	}()
	defer func() { stop2(); <-done2 }()
	time.Sleep(200 * time.Millisecond)
	if w, _, _ := l1.Owner(ctxT(t), TickerLease); w != "t1" {
		t.Fatalf("the Ticker's lease moved to %q while t1 renewed it", w)
	}
	stop1()
	<-done1
	before, at := log.ticks(), time.Now()
	waitFor(t, "t2 holding the Ticker's lease", func() bool { w, _, _ := l2.Owner(ctxT(t), TickerLease); return w == "t2" })
	waitFor(t, "30 more ticks", func() bool { return log.ticks() >= before+30 })
	if d := time.Since(at); d > 3*time.Second {
		t.Fatalf("30 ticks took %v after the first Ticker stopped", d)
	}
	// Every marker id is stored once (the MemLog dedups by id like the
	// log): the ticks are dense from 1.
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
