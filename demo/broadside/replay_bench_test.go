package broadside

import (
	"hash/fnv"
	"sync"
	"testing"
	"time"

	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/table"
)

// tape is a stretch of the benchmark world's play as a replay sees it:
// every sector's full capture at tick start, then, per tick, the records
// every sector read and each sector's state hash after the step.
type tape struct {
	cfg   Config
	start uint64 // the captures' tick
	caps  []*table.SetCapture
	ticks []tapeTick
}

type tapeTick struct {
	tick   uint64
	cmds   []replay.Command
	hashes []uint64 // per sector
}

// tapes records each tape once per test binary, by its warm-up.
var tapes = struct {
	sync.Mutex
	by map[int]*tape
}{by: map[int]*tape{}}

// benchTape records 300 ticks of the benchmark world (1,000 ships, about
// 10,000 cannonballs in the air) after its 300 ticks of warm-up: what bench
// sim's replay phase replays, without the log.
func benchTape(t testing.TB) *tape { return recordTape(t, 300) }

// lateTape records 300 ticks of the same world after 4,500 ticks of
// warm-up: where bench sim --quick's replay phase starts (its generation
// is 5,400 ticks, the last 900 replayed). Late in a match the world is
// heavier to step than benchTape's (more cannonballs, tables that have
// churned), so this is the tape to profile bench sim's replay_speedup on.
func lateTape(t testing.TB) *tape { return recordTape(t, 4500) }

func recordTape(t testing.TB, warmup int) *tape {
	t.Helper()
	tapes.Lock()
	defer tapes.Unlock()
	if tp := tapes.by[warmup]; tp != nil {
		return tp
	}
	w := newBotWorld(t, DefaultConfig(), 1000, 1, 0) // as benchWorld
	for k := 0; k < warmup; k++ {
		w.step(t, nil)
	}
	tp := &tape{cfg: DefaultConfig(), start: w.Tick()}
	for _, s := range w.Sectors() {
		tp.caps = append(tp.caps, s.Tables().CaptureFull())
	}
	for k := 0; k < 300; k++ {
		in := w.step(t, nil)
		tt := tapeTick{tick: w.Tick(), cmds: make([]replay.Command, len(in))}
		for j, c := range in {
			c.Payload = append([]byte(nil), c.Payload...)
			tt.cmds[j] = c
		}
		for _, s := range w.Sectors() {
			tt.hashes = append(tt.hashes, s.Hash())
		}
		tp.ticks = append(tp.ticks, tt)
	}
	tapes.by[warmup] = tp
	return tp
}

// restoreTape returns the tape's sectors at its start.
func restoreTape(t testing.TB, tp *tape) []*Sector {
	t.Helper()
	secs := make([]*Sector, len(tp.caps))
	for i := range secs {
		s, err := NewSector(tp.cfg, i)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Tables().Restore(tp.caps[i]); err != nil {
			t.Fatal(err)
		}
		if err := s.Restored(); err != nil {
			t.Fatal(err)
		}
		secs[i] = s
	}
	return secs
}

// TestBenchTapeGolden pins every sector's state hash at every tick of the
// benchmark world's tape (1,000 ships, about 10,000 cannonballs: hits,
// sinkings, wrecks, migrations, islands) in one digest, and replays the
// tape from the captures to the same hashes. An optimisation of Step must
// leave the digest unchanged; a change of the game rules updates it on
// purpose (recordings made before no longer verify).
func TestBenchTapeGolden(t *testing.T) {
	if testing.Short() {
		t.Skip("records 600 ticks of a 1,000-ship world")
	}
	tp := benchTape(t)
	d := fnv.New64a()
	var b [8]byte
	for _, tt := range tp.ticks {
		for _, h := range tt.hashes {
			for k := range b {
				b[k] = byte(h >> (8 * k))
			}
			d.Write(b[:])
		}
	}
	const golden uint64 = 0x0da843cef8747c11
	if got := d.Sum64(); got != golden {
		t.Errorf("digest of %d ticks × %d sector hashes = %#x, golden %#x", len(tp.ticks), len(tp.caps), got, golden)
	}
	secs := restoreTape(t, tp)
	for _, tt := range tp.ticks {
		for i, s := range secs {
			s.Step(tt.tick, tt.cmds, nil)
			if s.Hash() != tt.hashes[i] {
				t.Fatalf("replay: sector %d tick %d hash %#x, recorded %#x", i, tt.tick, s.Hash(), tt.hashes[i])
			}
		}
	}
}

// BenchmarkSectorReplay replays the tape's 300 ticks, all four sectors in
// turn on one goroutine (no log, no lineage): the CPU of the whole world's
// replay. x-realtime-1core is its speed on one core as a multiple of real
// time (30 ticks/s); bench sim's whole-world replay on 2 cores is at most
// twice that.
func BenchmarkSectorReplay(b *testing.B) { benchReplay(b, benchTape(b)) }

// BenchmarkSectorReplayLate replays lateTape: the world where bench sim
// --quick measures replay_speedup.
func BenchmarkSectorReplayLate(b *testing.B) { benchReplay(b, lateTape(b)) }

func benchReplay(b *testing.B, tp *tape) {
	ticks := 0
	var cpu time.Duration // the process's CPU time in the loop: less noisy than the wall clock on a loaded machine
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		secs := restoreTape(b, tp)
		c0 := processCPU()
		b.StartTimer()
		for _, tt := range tp.ticks {
			for i, s := range secs {
				s.Step(tt.tick, tt.cmds, nil)
				if s.Hash() != tt.hashes[i] {
					b.Fatalf("sector %d tick %d: hash %#x, recorded %#x", i, tt.tick, s.Hash(), tt.hashes[i])
				}
			}
		}
		b.StopTimer()
		cpu += processCPU() - c0
		b.StartTimer()
		ticks += len(tp.ticks)
	}
	b.ReportMetric(float64(ticks)/b.Elapsed().Seconds()/TickRate, "x-realtime-1core")
	b.ReportMetric(b.Elapsed().Seconds()*1e6/float64(ticks), "µs/world-tick")
	b.ReportMetric(cpu.Seconds()*1e6/float64(ticks), "cpu-µs/world-tick")
}
