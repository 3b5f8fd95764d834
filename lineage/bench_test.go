package lineage_test

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/lineage"
)

// benchRange returns a full range of the battle (ticks 384..511).
func benchRange(b *testing.B) *lineage.Range {
	ctx := context.Background()
	s := recordBenchWorld(b, 512)
	data, err := s.GetRange(ctx, 0, 384)
	if err != nil {
		b.Fatal(err)
	}
	r := new(lineage.Range)
	if err := lineage.DecodeRange(data, r); err != nil {
		b.Fatal(err)
	}
	return r
}

// BenchmarkLogTick is the recorder's cost per tick of the 1,000-ship
// battle, replaying a recorded range's ticks: BeginTick, Input for every
// record, the sim's Command and Derived calls (through the Recorder
// interface) and EndTick. "record" leaves the ticks that seal a range out
// of the timing: it is what the tick loop pays with background sealing.
// "inline" times every tick, so it adds the encoding and a MemStore put
// of a range every 128 ticks. (A background Log cannot be timed this way:
// without a sim between ticks it produces ranges faster than anyone can
// encode them, and waits for its sealer.)
func BenchmarkLogTick(b *testing.B) {
	r := benchRange(b)
	for _, mode := range []string{"record", "inline"} {
		b.Run(mode, func(b *testing.B) {
			ctx := context.Background()
			lg := lineage.NewLog(lineage.LogOptions{Store: lineage.NewMemStore()})
			defer lg.Close(ctx)
			var rec lineage.Recorder = lg
			tick := uint64(0)
			events := 0
			b.ReportAllocs()
			for b.Loop() {
				i := int(tick % uint64(r.Ticks()))
				if err := lg.BeginTick(ctx, 0, tick); err != nil {
					b.Fatal(err)
				}
				for _, in := range r.TickInputs(i) {
					lg.Input(lineage.CommandInfo{Pos: tick<<20 | in.Pos&(1<<20-1), Player: in.Player, Kind: in.Kind})
				}
				for _, ev := range r.TickEvents(i) {
					if ev.Kind == lineage.EventCommand {
						rec.Command(ev.Entity, ev.Arg)
					} else {
						rec.Derived(ev.Entity, lineage.EntityID(ev.Arg))
					}
				}
				events += len(r.TickEvents(i))
				seals := (tick+1)%lineage.DefaultRangeTicks == 0
				if seals && mode == "record" {
					b.StopTimer()
				}
				if err := lg.EndTick(ctx); err != nil {
					b.Fatal(err)
				}
				if seals && mode == "record" {
					b.StartTimer()
				}
				tick++
			}
			b.ReportMetric(float64(events)/float64(b.N), "events/tick")
		})
	}
}

// BenchmarkEncodeRange encodes a range of the battle (columns and zstd).
func BenchmarkEncodeRange(b *testing.B) {
	r := benchRange(b)
	var enc lineage.Encoder
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		buf, _ = enc.AppendRange(buf[:0], r)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(r.Ticks()), "ns/tick")
	b.ReportMetric(float64(len(buf))/float64(r.Ticks()), "B/tick")
}

// BenchmarkDecodeRange decodes it (checksum, zstd, columns, validation).
func BenchmarkDecodeRange(b *testing.B) {
	r := benchRange(b)
	data, err := lineage.EncodeRange(r)
	if err != nil {
		b.Fatal(err)
	}
	var out lineage.Range
	b.ReportAllocs()
	for b.Loop() {
		if err := lineage.DecodeRange(data, &out); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(r.Ticks()), "ns/tick")
}

// BenchmarkWhy asks Why of random ships at random ticks of a one-minute
// battle of 1,000 ships (the full-size figure is `broadside bench
// lineage`).
func BenchmarkWhy(b *testing.B) {
	ctx := context.Background()
	s := recordBenchWorld(b, 1800)
	ix, err := lineage.LoadIndex(ctx, s)
	if err != nil {
		b.Fatal(err)
	}
	for _, depth := range []int{2, 4, lineage.Unlimited} {
		b.Run(map[int]string{2: "depth=2", 4: "depth=4", lineage.Unlimited: "unlimited"}[depth], func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 2))
			causes := 0
			for b.Loop() {
				r, err := ix.Why(lineage.AnyShard, broadside.ShipID(uint32(1+rng.IntN(1000))), 1+rng.Uint64N(1800), depth)
				if err != nil {
					b.Fatal(err)
				}
				causes += r.Applications
			}
			b.ReportMetric(float64(causes)/float64(b.N), "applications")
		})
	}
}
