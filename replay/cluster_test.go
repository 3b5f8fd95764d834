package replay_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anoptic/broadside/cmdlog"
	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/snapshot"
)

// TestKillRecoverOnCmdlog plays live matches on an in-process cmdlog
// cluster (a Ticker, bots appending commands, a Supervisor whose runners
// subscribe to the log and append their migrations), kills a shard at a
// random tick, and checks that every shard's hashes equal those of an
// uninterrupted replay of the same log, tick by tick, and that every
// output is in the log exactly once.
func TestKillRecoverOnCmdlog(t *testing.T) {
	seeds := 3
	if testing.Short() {
		seeds = 1
	}
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) { liveKillRecover(t, seed) })
	}
}

func liveKillRecover(t *testing.T, seed uint64) {
	const ticks = 150
	cfg := testWorld(seed)
	rng := rand.New(rand.NewPCG(seed, 5))
	victim := uint32(rng.IntN(cfg.Sectors()))
	killAt := 20 + rng.Uint64N(ticks-40)

	lc := startCluster(t)
	client := lc.NewClient(cmdlog.ClientConfig{})
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	var (
		mu          sync.Mutex
		recoveries  []replay.Recovery
		divergences []replay.Divergence
		killed      atomic.Bool
		sup         *replay.Supervisor
	)
	shards := make([]replay.ShardSpec, cfg.Sectors())
	for i := range shards {
		shards[i] = replay.ShardSpec{Shard: uint32(i), NewSim: sectorFactory(cfg, i)}
	}
	sup, err := replay.NewSupervisor(replay.SupervisorConfig{
		World: 1, Shards: shards, Appender: client, Store: snapshot.NewMemStore(),
		Policy: snapshot.Policy{MaxInterval: 25, DeltaFraction: 1e9, RecoveryTarget: time.Hour},
		Open: func(_ context.Context, _ uint32, from uint64) (replay.Source, error) {
			return client.Subscribe(from), nil
		},
		LogTail: client.CheckTail,
		OnTick: func(info replay.TickInfo) {
			if info.Shard == victim && info.Tick == killAt && killed.CompareAndSwap(false, true) {
				sup.Kill(victim)
			}
		},
		OnRecovery: func(r replay.Recovery) {
			mu.Lock()
			recoveries = append(recoveries, r)
			mu.Unlock()
		},
		OnDivergence: func(d replay.Divergence) {
			mu.Lock()
			divergences = append(divergences, d)
			mu.Unlock()
		},
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	supCtx, stopSup := context.WithCancel(ctx)
	supDone := make(chan error, 1)
	go func() { supDone <- sup.Run(supCtx) }()

	// The ticker stops after TICK(ticks); the bots send each tick's
	// commands as soon as the previous tick's marker is durable.
	tickCtx, stopTicker := context.WithCancel(ctx)
	ticked := make(chan uint64, ticks+1)
	ticker, err := replay.NewTicker(replay.TickerConfig{World: 1, Log: client, Rate: 100, OnTick: func(n uint64, _ time.Time) {
		ticked <- n
		if n == ticks {
			stopTicker()
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	tickDone := make(chan error, 1)
	go func() { tickDone <- ticker.Run(tickCtx) }()
	bots := newScriptBots(24, seed)
	var botErr error
	for n := uint64(1); n < ticks && botErr == nil; n++ {
		var wg sync.WaitGroup
		var errOnce sync.Once
		for _, r := range bots.records(n + 1) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := client.Append(ctx, r); err != nil {
					errOnce.Do(func() { botErr = err })
				}
			}()
		}
		wg.Wait()
		select {
		case <-ticked:
		case <-ctx.Done():
			botErr = ctx.Err()
		}
	}
	if err := <-tickDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("ticker: %v", err)
	}
	if botErr != nil {
		t.Fatalf("bots: %v", botErr)
	}
	waitErr := sup.WaitTick(ctx, ticks)
	stopSup()
	if err := <-supDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("supervisor: %v", err)
	}
	if waitErr != nil {
		t.Fatalf("shards did not reach tick %d: %v %+v", ticks, waitErr, sup.Status())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(divergences) > 0 || len(recoveries) != 1 || recoveries[0].Err != nil || recoveries[0].Mismatched != 0 {
		t.Fatalf("divergences %+v, recoveries %+v", divergences, recoveries)
	}
	t.Logf("killed shard %d at tick %d; recovered from tick %d, replayed %d ticks (checked %d) in %v",
		victim, killAt, recoveries[0].From.Tick, recoveries[0].Replayed, recoveries[0].Checked, recoveries[0].Duration)

	// The uninterrupted run of the same log.
	entries := readLog(t, client)
	rec := &recording{cfg: cfg, entries: entries}
	for s := range cfg.Sectors() {
		want := replayShard(t, rec, s, entries)
		if len(want) < ticks {
			t.Fatalf("shard %d: the log holds %d ticks", s, len(want))
		}
		h := sup.Hashes(uint32(s))
		for k := 0; k < ticks; k++ {
			got, ok := h.Get(uint64(k + 1))
			if !ok || got.Hash != want[k] {
				t.Fatalf("shard %d tick %d: supervised hash %#x (present %v), uninterrupted %#x", s, k+1, got.Hash, ok, want[k])
			}
		}
		// Outputs: ids 1, 2, 3, ... each once.
		seen := map[uint64]bool{}
		var maxSeq uint64
		for _, e := range entries {
			if e.Record.ID.Client != replay.OutputClientID(1, uint32(s)) {
				continue
			}
			if seen[e.Record.ID.Seq] {
				t.Fatalf("shard %d: output %d twice in the log", s, e.Record.ID.Seq)
			}
			seen[e.Record.ID.Seq] = true
			maxSeq = max(maxSeq, e.Record.ID.Seq)
		}
		if uint64(len(seen)) != maxSeq {
			t.Fatalf("shard %d: %d outputs with ids up to %d", s, len(seen), maxSeq)
		}
	}
}
