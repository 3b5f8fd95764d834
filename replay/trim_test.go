package replay

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/anoptic/broadside/replay/snapshot"
)

// Trimming never goes above the base of any shard's newest complete chain
// or the start of a retained recording, and a shard killed after a trim
// still recovers.
func TestSafeTrim(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	log := NewMemLog()
	store := snapshot.NewMemStore()
	newSim := func() (TableSim, error) { return newCounterSim(), nil }
	var rl recoveryLog
	cfg := SupervisorConfig{
		World: 1, Shards: []ShardSpec{{0, newSim}, {1, newSim}}, Appender: log, Store: store,
		Policy: snapshot.Policy{MaxInterval: 7, ChainFactor: 3, DeltaFraction: 1e9, RecoveryTarget: time.Hour},
		Open:   func(_ context.Context, _ uint32, from uint64) (Source, error) { return log.Subscribe(from), nil },
		Logger: quiet,
	}
	rl.config(&cfg)
	sup, err := NewSupervisor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- sup.Run(ctx) }()

	if p, err := TrimPoint(ctx, store, []uint32{0, 1}, nil); err != nil || p != 0 {
		t.Fatalf("trim point %d before any snapshot (%v)", p, err)
	}
	feedTicks(ctx, t, log, sup, 1, 80, nil)
	var bases []snapshot.Meta
	for _, shard := range []uint32{0, 1} {
		// Snapshots are stored in the background: wait until the shard's
		// newest one stops changing.
		var last uint64
		for {
			metas, err := store.List(ctx, shard)
			if err != nil {
				t.Fatal(err)
			}
			if n := len(metas); n > 0 && metas[n-1].Tick == last {
				break
			} else if n > 0 {
				last = metas[n-1].Tick
			}
			select {
			case <-ctx.Done():
				t.Fatalf("shard %d: no snapshots", shard)
			case <-time.After(20 * time.Millisecond):
			}
		}
		b, ok, err := snapshot.NewestBase(ctx, store, shard)
		if err != nil || !ok {
			t.Fatalf("shard %d: no base (%v)", shard, err)
		}
		bases = append(bases, b)
	}
	want := min(bases[0].Pos, bases[1].Pos)
	if p, err := TrimPoint(ctx, store, []uint32{0, 1}, nil); err != nil || p != want {
		t.Fatalf("trim point %d, want %d (%v)", p, want, err)
	}
	if p, _ := TrimPoint(ctx, store, []uint32{0, 1}, []uint64{want}); p != want-1 {
		t.Fatalf("trim point %d with a recording from %d", p, want)
	}
	trimmed, err := SafeTrim(ctx, log, store, []uint32{0, 1}, nil, 0, 1000)
	if err != nil || trimmed != 0 {
		t.Fatalf("a trim below the minimum step happened: %d %v", trimmed, err)
	}
	if trimmed, err = SafeTrim(ctx, log, store, []uint32{0, 1}, nil, 0, 1); err != nil || trimmed != want {
		t.Fatalf("trimmed to %d, want %d (%v)", trimmed, want, err)
	}
	if _, err := log.Read(ctx, want, 1); !errors.Is(err, ErrTrimmed) {
		t.Fatalf("read of a trimmed position: %v", err)
	}
	// Kill both shards: they recover from their snapshots above the trim.
	sup.Kill(0)
	sup.Kill(1)
	feedTicks(ctx, t, log, sup, 81, 100, nil)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	recs, divs := rl.get()
	if len(recs) != 2 || len(divs) != 0 {
		t.Fatalf("recoveries %+v divergences %+v", recs, divs)
	}
	for _, r := range recs {
		if r.Err != nil || r.Snapshot == nil || r.Snapshot.Pos < want {
			t.Fatalf("recovery %+v", r)
		}
	}
}
