package lineage_test

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/lineage"
)

// aggressiveFleet plays every ship of the benchmark world the way
// demo/broadside's benchmarks do: each bot thinks every 10 ticks, and
// every ship also fires a broadside every 40 ticks, which keeps about
// 10,000 cannonballs in the air at 1,000 ships.
type aggressiveFleet struct {
	rng           *rand.Rand
	views, nearby []broadside.ShipView
}

func (f *aggressiveFleet) act(w *broadside.World) {
	tick := int(w.Tick())
	f.views = f.views[:0]
	w.Ships(func(v broadside.ShipView) { f.views = append(f.views, v) })
	for k := range f.views {
		v := &f.views[k]
		phase := (tick + int(v.Player)) % 80
		if !v.Sunk && (phase == 0 || phase == 40) {
			side := broadside.Port
			if phase == 40 {
				side = broadside.Starboard
			}
			_ = w.SubmitCommand(v.Player, broadside.Fire(side))
			continue
		}
		if (tick+int(v.Player))%10 != 0 {
			continue
		}
		f.nearby = f.nearby[:0]
		for j := range f.views {
			o := &f.views[j]
			if dx, dy := int64(o.X-v.X), int64(o.Y-v.Y); dx*dx+dy*dy < 1_500_000*1_500_000 {
				f.nearby = append(f.nearby, *o)
			}
		}
		if c, ok := broadside.BotCommand(f.nearby, *v, f.rng); ok {
			_ = w.SubmitCommand(v.Player, c)
		}
	}
}

// recordBenchWorld plays the 1,000-ship benchmark world for ticks ticks,
// recording its lineage (all sectors as shard 0), and returns the store.
func recordBenchWorld(tb testing.TB, ticks int) lineage.Store {
	tb.Helper()
	ctx := context.Background()
	w, err := broadside.NewWorld(broadside.DefaultConfig())
	if err != nil {
		tb.Fatal(err)
	}
	for p := uint32(1); p <= 1000; p++ {
		_ = w.SubmitCommand(p, broadside.Join())
	}
	f := &aggressiveFleet{rng: rand.New(rand.NewPCG(1, 7))}
	lg := lineage.NewLog(lineage.LogOptions{})
	for k := 0; k < ticks; k++ {
		if err := lg.BeginTick(ctx, 0, w.Tick()+1); err != nil {
			tb.Fatal(err)
		}
		in := w.Step(lg)
		for i := range in {
			lg.Input(lineage.CommandInfo{Pos: in[i].Pos, Player: in[i].Player, Kind: kindOf(&in[i])})
		}
		if err := lg.EndTick(ctx); err != nil {
			tb.Fatal(err)
		}
		f.act(w)
	}
	if err := lg.Close(ctx); err != nil {
		tb.Fatal(err)
	}
	return lg.Store()
}

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
