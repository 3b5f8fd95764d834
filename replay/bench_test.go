package replay_test

import (
	"context"
	"runtime"
	"testing"

	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/replay"
)

// BenchmarkRunnerReplay replays one shard of a 1,000-ship match of the
// default world (the bench sim world) over a recorded log: decoding every
// record, stepping the sector at every marker. The reported ticks/s over 30
// is the replay speed as a multiple of real time.
func BenchmarkRunnerReplay(b *testing.B) {
	rec := recordWorld(b, broadside.DefaultConfig(), 1000, 400)
	b.ResetTimer()
	ticks := 0
	for b.Loop() {
		b.StopTimer()
		sec, err := broadside.NewSector(rec.cfg, 0)
		if err != nil {
			b.Fatal(err)
		}
		r, err := replay.NewRunner(replay.RunnerConfig{World: 1, Sim: sec, Source: replay.NewSliceSource(rec.entries, 1)})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if err := r.Run(context.Background()); err != nil {
			b.Fatal(err)
		}
		ticks += int(rec.ticks)
	}
	b.ReportMetric(float64(ticks)/b.Elapsed().Seconds()/broadside.TickRate, "x-realtime")
}

// BenchmarkWorldReplay replays the four shards of the same match in
// parallel, as bench sim does (replay.RunParallel on GOMAXPROCS workers):
// the whole world's replay speed.
func BenchmarkWorldReplay(b *testing.B) {
	rec := recordWorld(b, broadside.DefaultConfig(), 1000, 400)
	b.ResetTimer()
	ticks := 0
	for b.Loop() {
		b.StopTimer()
		runners := make([]*replay.Runner, rec.cfg.Sectors())
		shared := replay.NewVerifiedEntries(rec.entries) // each envelope verified once, as bench sim replays
		for i := range runners {
			sec, err := broadside.NewSector(rec.cfg, i)
			if err != nil {
				b.Fatal(err)
			}
			if runners[i], err = replay.NewRunner(replay.RunnerConfig{World: 1, Shard: uint32(i), Sim: sec, Source: shared.Source(1)}); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		if err := replay.RunParallel(context.Background(), runners, rec.ticks, runtime.GOMAXPROCS(0), 0); err != nil {
			b.Fatal(err)
		}
		ticks += int(rec.ticks)
	}
	b.ReportMetric(float64(ticks)/b.Elapsed().Seconds()/broadside.TickRate, "x-realtime")
}
