package replay

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/anoptic/broadside/replay/snapshot"
)

var quiet = slog.New(slog.DiscardHandler)

// feedTicks appends, for ticks 1..n, a write command and a marker, waiting
// for every shard between ticks (the world's pace).
func feedTicks(ctx context.Context, t *testing.T, log *MemLog, sup *Supervisor, from, n uint64, extra func(tick uint64) [][]byte) {
	t.Helper()
	for k := from; k <= n; k++ {
		_ = log.Append(ctx, cmdRec(1, k, writeCmd(uint8(k%16), k)))
		if extra != nil {
			for _, r := range extra(k) {
				_ = log.Append(ctx, r)
			}
		}
		_ = log.Append(ctx, tickRec(k))
		if err := sup.WaitTick(ctx, k); err != nil {
			t.Fatalf("tick %d: %v (%+v)", k, err, sup.Status())
		}
	}
}

type recoveryLog struct {
	mu   sync.Mutex
	recs []Recovery
	divs []Divergence
}

func (l *recoveryLog) config(cfg *SupervisorConfig) {
	cfg.OnRecovery = func(r Recovery) {
		l.mu.Lock()
		l.recs = append(l.recs, r)
		l.mu.Unlock()
	}
	cfg.OnDivergence = func(d Divergence) {
		l.mu.Lock()
		l.divs = append(l.divs, d)
		l.mu.Unlock()
	}
}

func (l *recoveryLog) get() ([]Recovery, []Divergence) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Recovery(nil), l.recs...), append([]Divergence(nil), l.divs...)
}

// A runner wedged inside Step is replaced once the log advances past it;
// the replacement catches up and the wedged goroutine, once it returns, is
// discarded.
func TestSupervisorWedged(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	log := NewMemLog()
	block := make(chan struct{})
	var mu sync.Mutex
	made := map[uint32]int{}
	newSim := func(shard uint32) func() (TableSim, error) {
		return func() (TableSim, error) {
			mu.Lock()
			defer mu.Unlock()
			made[shard]++
			s := newCounterSim()
			if shard == 1 && made[shard] == 1 {
				s.block, s.blockAt = block, 20
			}
			return s, nil
		}
	}
	var rl recoveryLog
	cfg := SupervisorConfig{
		World: 1, Shards: []ShardSpec{{0, newSim(0)}, {1, newSim(1)}}, Appender: log, Store: snapshot.NewMemStore(),
		Policy:  snapshot.Policy{MaxInterval: 5},
		Open:    func(_ context.Context, _ uint32, from uint64) (Source, error) { return log.Subscribe(from), nil },
		LogTail: log.CheckTail, WedgeTimeout: 100 * time.Millisecond, Logger: quiet,
	}
	rl.config(&cfg)
	sup, err := NewSupervisor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- sup.Run(ctx) }()
	feedTicks(ctx, t, log, sup, 1, 40, nil)
	recs, divs := rl.get()
	if len(divs) > 0 || len(recs) != 1 || !errors.Is(recs[0].Cause, ErrWedged) || recs[0].Err != nil || recs[0].Snapshot == nil {
		t.Fatalf("recoveries %+v divergences %+v", recs, divs)
	}
	if sup.Abandoned() != 1 {
		t.Fatalf("%d abandoned runners, want 1", sup.Abandoned())
	}
	close(block) // the wedged Step returns; its runner must not interfere
	if err := sup.WaitAbandoned(ctx); err != nil {
		t.Fatal(err)
	}
	feedTicks(ctx, t, log, sup, 41, 50, nil)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if h0, h1 := sup.Hashes(0).Latest(), sup.Hashes(1).Latest(); h0.Tick != 50 || h1.Tick != 50 || h0.Hash != h1.Hash {
		t.Fatalf("shards at %+v and %+v", h0, h1)
	}
}

// A sim that panics is recovered; a crash loop backs off; every replayed
// hash is checked.
func TestSupervisorPanicAndCrashLoop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	log := NewMemLog()
	armed := true
	var mu sync.Mutex
	newSim := func() (TableSim, error) {
		mu.Lock()
		defer mu.Unlock()
		s := newCounterSim()
		s.panicArmed = &armed
		return s, nil
	}
	var rl recoveryLog
	cfg := SupervisorConfig{
		World: 1, Shards: []ShardSpec{{0, newSim}}, Appender: log,
		Open:   func(_ context.Context, _ uint32, from uint64) (Source, error) { return log.Subscribe(from), nil },
		Logger: quiet, RestartBackoff: time.Millisecond,
	}
	rl.config(&cfg)
	sup, err := NewSupervisor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- sup.Run(ctx) }()
	feedTicks(ctx, t, log, sup, 1, 10, func(tick uint64) [][]byte {
		if tick == 6 {
			return [][]byte{cmdRec(2, 1, []byte("p"))}
		}
		return nil
	})
	// Kill it repeatedly while it recovers: each kill before it is live
	// reports a failed recovery, and the last one succeeds.
	for range 3 {
		sup.Kill(0)
		time.Sleep(2 * time.Millisecond)
	}
	feedTicks(ctx, t, log, sup, 11, 20, nil)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	recs, divs := rl.get()
	if len(divs) > 0 || len(recs) < 2 || !errors.Is(recs[0].Cause, ErrSimPanic) || recs[0].Checked != 5 || recs[len(recs)-1].Err != nil {
		t.Fatalf("recoveries %+v divergences %+v", recs, divs)
	}
	if st := sup.Status(); st[0].Deaths < 2 || st[0].Tick != 20 {
		t.Fatalf("status %+v", st)
	}
}
