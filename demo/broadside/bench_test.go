package broadside

import (
	"testing"

	"github.com/anoptic/broadside/lineage"
	"github.com/anoptic/broadside/replay/table"
)

// benchWorld is the performance target's world: 1,000 ships on the default
// 8 km × 8 km sea in 2 × 2 sectors, bots firing broadsides often enough to
// keep about 10,000 cannonballs in the air, warmed up past the first
// volleys.
func benchWorld(b *testing.B) (*World, *botFleet) {
	w := mustWorld(b, DefaultConfig())
	f := newFleet(b, w, 1000, 1)
	f.aggressive = true
	for k := 0; k < 300; k++ {
		f.act()
		w.Step(lineage.Nop)
	}
	return w, f
}

// BenchmarkWorldStep is one tick of the whole world (all four sectors):
// commands, sailing, gunnery, ballistics, hits, migrations and the state
// hash. The bots' thinking is excluded from the timing.
func BenchmarkWorldStep(b *testing.B) {
	w, f := benchWorld(b)
	var balls, ships, cmds int
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		f.act()
		b.StartTimer()
		cmds += len(w.Step(lineage.Nop))
		balls += w.BallCount()
		ships += w.ShipCount()
	}
	n := float64(b.N)
	b.ReportMetric(float64(balls)/n, "balls")
	b.ReportMetric(float64(ships)/n, "ships")
	b.ReportMetric(float64(cmds)/n, "records/tick")
}

// BenchmarkSectorCapture is the tick-loop pause of a delta capture of every
// sector of the benchmark world after one tick, reusing buffers.
func BenchmarkSectorCapture(b *testing.B) {
	w, f := benchWorld(b)
	caps := make([]table.SetCapture, len(w.Sectors()))
	for i, s := range w.Sectors() {
		s.Tables().CaptureInto(&caps[i], true)
	}
	var bytes int
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		f.act()
		w.Step(lineage.Nop)
		b.StartTimer()
		for i, s := range w.Sectors() {
			s.Tables().CaptureInto(&caps[i], false)
			for _, tc := range caps[i].Tables {
				bytes += len(tc.Pages) * int(tc.RecordSize*tc.RecordsPerPage)
			}
		}
	}
	b.ReportMetric(float64(bytes)/float64(b.N), "bytes/capture")
}
