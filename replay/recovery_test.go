package replay_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/snapshot"
)

// The recording used by the many-seeds tests: 48 ships in the small world
// for 360 ticks (12 s of play), with lots of migrations.
const (
	recShips = 48
	recTicks = 360
)

// An uninterrupted replay of a recording reproduces its hashes tick by
// tick, and the match exercised what recovery must get right (migrations,
// cannonballs, garbage records).
func TestReplayReproducesRecording(t *testing.T) {
	rec := record(t, 1, recShips, recTicks)
	migrations := 0
	for shard := range rec.hashes {
		got := replayShard(t, rec, shard, rec.entries)
		if len(got) != int(rec.ticks) {
			t.Fatalf("shard %d: %d ticks replayed, want %d", shard, len(got), rec.ticks)
		}
		for k := range got {
			if got[k] != rec.hashes[shard][k] {
				t.Fatalf("shard %d tick %d: hash %#x, recorded %#x", shard, k+1, got[k], rec.hashes[shard][k])
			}
		}
	}
	for _, e := range rec.entries {
		if e.Record.ID.Client>>56 == 0xB5 && e.Record.ID.Client != replay.TickerClientID(1) {
			migrations++
		}
	}
	if migrations < 50 {
		t.Fatalf("only %d migrations in the recording: the test world is too quiet", migrations)
	}
	t.Logf("%d entries, %d migrations", len(rec.entries), migrations)
}

// killPlan says when to crash which shard, and how.
type killPlan struct {
	shard   uint32
	tick    uint64
	corrupt bool   // damage the newest snapshot before the crash
	second  uint64 // kill again at this tick
	// midTick kills while the runner is between two records of the tick
	// (from the feeder) rather than right after publishing it.
	midTick bool
	// noStore runs without snapshots: recovery replays from the start.
	noStore bool
}

// recordedAppender stands for the log's deduplication when a recording is
// fed back: a shard's outputs must be exactly the records the recording
// holds under the same ids (deterministic, exactly once).
type recordedAppender struct {
	byID map[msg.RecordID][]byte
	mu   sync.Mutex
	errs []string
}

func newRecordedAppender(rec *recording) *recordedAppender {
	a := &recordedAppender{byID: map[msg.RecordID][]byte{}}
	for _, e := range rec.entries {
		a.byID[e.Record.ID] = e.Record.Data
	}
	return a
}

func (a *recordedAppender) AppendWithID(_ context.Context, id msg.RecordID, data []byte) error {
	if want, ok := a.byID[id]; !ok || !bytes.Equal(want, data) {
		a.mu.Lock()
		a.errs = append(a.errs, fmt.Sprintf("output %v not in the recording (present %v)", id, ok))
		a.mu.Unlock()
	}
	return nil
}

// runSupervised runs a Supervisor over the recording with snapshots in
// memory: it feeds the recorded log tick by tick (the world's pace: each
// tick's records once every shard is live at the previous tick), executes
// the kill plan, and returns the supervisor and its recoveries once every
// shard reached the recording's last tick.
func runSupervised(t *testing.T, rec *recording, plan killPlan, policy snapshot.Policy) (*replay.Supervisor, []replay.Recovery) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	log := replay.NewMemLog()
	store := snapshot.NewMemStore()
	var snapStore snapshot.Store = store
	if plan.noStore {
		snapStore = nil
	}
	outputs := newRecordedAppender(rec)
	var (
		mu          sync.Mutex
		recoveries  []replay.Recovery
		divergences []replay.Divergence
		killed      atomic.Int32
		sup         *replay.Supervisor
	)
	shards := make([]replay.ShardSpec, rec.cfg.Sectors())
	for i := range shards {
		shards[i] = replay.ShardSpec{Shard: uint32(i), NewSim: sectorFactory(rec.cfg, i)}
	}
	kill := func() {
		if plan.corrupt {
			if metas, _ := store.List(ctx, plan.shard); len(metas) > 0 {
				store.Corrupt(plan.shard, metas[len(metas)-1].Tick, 200)
			}
		}
		sup.Kill(plan.shard)
	}
	var err error
	sup, err = replay.NewSupervisor(replay.SupervisorConfig{
		World: 1, Shards: shards, Appender: outputs, Store: snapStore, Policy: policy,
		Open: func(_ context.Context, _ uint32, from uint64) (replay.Source, error) { return log.Subscribe(from), nil },
		OnTick: func(info replay.TickInfo) {
			if info.Shard != plan.shard || plan.midTick {
				return
			}
			if (info.Tick == plan.tick && killed.CompareAndSwap(0, 1)) || (plan.second > 0 && info.Tick == plan.second && killed.CompareAndSwap(1, 2)) {
				kill()
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
		WedgeTimeout: time.Minute, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- sup.Run(ctx) }()
	var feedErr error
	next := 0
	for n := uint64(1); n <= rec.ticks && feedErr == nil; n++ {
		first := next
		for ; next < len(rec.entries) && rec.entries[next].Pos <= rec.tickPos[n-1]; next++ {
			e := rec.entries[next]
			if feedErr = log.AppendWithID(ctx, e.Record.ID, e.Record.Data); feedErr != nil {
				break
			}
			if plan.midTick && (n == plan.tick || n == plan.second) && next == (first+int(rec.tickPos[n-1])-1)/2 {
				// Let the runner take in part of the tick's records.
				time.Sleep(time.Millisecond)
				kill()
			}
		}
		if feedErr == nil {
			feedErr = sup.WaitTick(ctx, n)
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("supervisor: %v", err)
	}
	if feedErr != nil {
		t.Fatalf("shards did not reach tick %d: %v (status %+v)", rec.ticks, feedErr, sup.Status())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(divergences) > 0 {
		t.Fatalf("divergences: %+v", divergences)
	}
	if len(outputs.errs) > 0 {
		t.Fatalf("outputs: %v", outputs.errs)
	}
	return sup, recoveries
}

// checkHashes compares every shard's published hashes with the recording,
// tick by tick.
func checkHashes(t *testing.T, sup *replay.Supervisor, rec *recording) {
	t.Helper()
	for shard, want := range rec.hashes {
		h := sup.Hashes(uint32(shard))
		for k, w := range want {
			got, ok := h.Get(uint64(k + 1))
			if !ok || got.Hash != w || got.Pos != rec.tickPos[k] {
				t.Fatalf("shard %d tick %d: hash %#x at %d (present %v), uninterrupted run %#x at %d", shard, k+1, got.Hash, got.Pos, ok, w, rec.tickPos[k])
			}
		}
	}
}

// TestKillRecoverManySeeds kills a sim shard at a random tick of a recorded
// match (30 seeds; some also corrupt the newest snapshot, some kill twice),
// lets the supervisor recover it, and checks that every shard's hashes
// equal those of the uninterrupted run, tick by tick.
func TestKillRecoverManySeeds(t *testing.T) {
	rec := record(t, 1, recShips, recTicks)
	seeds := 30
	if testing.Short() {
		seeds = 8
	}
	for seed := 1; seed <= seeds; seed++ {
		rng := rand.New(rand.NewPCG(uint64(seed), 3))
		plan := killPlan{shard: uint32(rng.IntN(rec.cfg.Sectors())), tick: 2 + rng.Uint64N(rec.ticks-2),
			corrupt: seed%5 == 0, midTick: seed%3 == 0, noStore: seed%10 == 9}
		if seed%7 == 0 {
			plan.second = min(plan.tick+1+rng.Uint64N(40), rec.ticks-1)
		}
		// Snapshots at most every 1..60 ticks (the default policy would
		// take one nearly every tick in a world this small), in chains of
		// various lengths.
		policy := snapshot.Policy{MaxInterval: 1 + rng.Uint64N(60), DeltaFraction: 1e9, RecoveryTarget: time.Hour, ChainFactor: 0.5 + 4*rng.Float64()}
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			sup, recs := runSupervised(t, rec, plan, policy)
			checkHashes(t, sup, rec)
			kills := 1
			if plan.second > 0 {
				kills = 2
			}
			if len(recs) != kills || recs[len(recs)-1].Err != nil {
				t.Fatalf("plan %+v: %d recoveries for %d kills, the last must succeed: %+v", plan, len(recs), kills, recs)
			}
			for _, r := range recs {
				if !errors.Is(r.Cause, replay.ErrKilled) || r.Mismatched != 0 || (r.Err != nil && !errors.Is(r.Err, replay.ErrKilled)) {
					t.Fatalf("recovery %+v", r)
				}
				if r.Err == nil && r.Snapshot != nil && r.Snapshot.Tick > r.LiveTick {
					t.Fatalf("recovered from snapshot at tick %d beyond live tick %d", r.Snapshot.Tick, r.LiveTick)
				}
			}
			t.Logf("plan %+v: recovered from tick %d, replayed %d ticks, checked %d, in %v", plan, recs[0].From.Tick, recs[0].Replayed, recs[0].Checked, recs[0].Duration)
		})
	}
}
