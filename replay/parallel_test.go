package replay_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/replay"
)

// TestRunParallel replays a recorded world with RunParallel (fewer workers
// than shards, short chunks, an end past the log's) and requires every
// shard's hash at every tick to be the recorded one.
func TestRunParallel(t *testing.T) {
	rec := recordWorld(t, broadside.DefaultConfig(), 200, 120)
	for _, c := range []struct {
		workers int
		chunk   uint64
		until   uint64
	}{{2, 7, rec.ticks}, {1, 0, rec.ticks}, {3, 1, 50}, {8, 16, rec.ticks + 100}} {
		shared := replay.NewVerifiedEntries(rec.entries)
		got := make([][]uint64, rec.cfg.Sectors())
		runners := make([]*replay.Runner, rec.cfg.Sectors())
		for i := range runners {
			sec, err := broadside.NewSector(rec.cfg, i)
			if err != nil {
				t.Fatal(err)
			}
			shard := i
			runners[i], err = replay.NewRunner(replay.RunnerConfig{World: 1, Shard: uint32(i), Sim: sec, Source: shared.Source(1),
				Observer: func(info replay.TickInfo) { got[shard] = append(got[shard], info.Hash) }})
			if err != nil {
				t.Fatal(err)
			}
		}
		if err := replay.RunParallel(context.Background(), runners, c.until, c.workers, c.chunk); err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		want := min(c.until, rec.ticks)
		for i, r := range runners {
			if r.Tick() != want || uint64(len(got[i])) != want {
				t.Fatalf("%+v: shard %d at tick %d (%d hashes), want %d", c, i, r.Tick(), len(got[i]), want)
			}
			for k := range got[i] {
				if got[i][k] != rec.hashes[i][k] {
					t.Fatalf("%+v: shard %d tick %d hash %#x, recorded %#x", c, i, k+1, got[i][k], rec.hashes[i][k])
				}
			}
		}
	}
}

// TestRunParallelConcurrent checks that two workers run two shards at the
// same time: the first two runners' observers wait for each other's first
// tick (a serial replay would wait forever; the test gives up after 10 s).
func TestRunParallelConcurrent(t *testing.T) {
	rec := recordWorld(t, broadside.DefaultConfig(), 200, 120)
	shared := replay.NewVerifiedEntries(rec.entries)
	started := [2]chan struct{}{make(chan struct{}), make(chan struct{})}
	var once [2]sync.Once
	runners := make([]*replay.Runner, rec.cfg.Sectors())
	for i := range runners {
		sec, err := broadside.NewSector(rec.cfg, i)
		if err != nil {
			t.Fatal(err)
		}
		cfg := replay.RunnerConfig{World: 1, Shard: uint32(i), Sim: sec, Source: shared.Source(1)}
		if i < 2 {
			me, other := i, 1-i
			cfg.Observer = func(replay.TickInfo) {
				once[me].Do(func() {
					close(started[me])
					select {
					case <-started[other]:
					case <-time.After(10 * time.Second):
						t.Errorf("shard %d: shard %d did not run while it waited", me, other)
					}
				})
			}
		}
		if runners[i], err = replay.NewRunner(cfg); err != nil {
			t.Fatal(err)
		}
	}
	if err := replay.RunParallel(context.Background(), runners, rec.ticks, 2, 8); err != nil {
		t.Fatal(err)
	}
}
