package broadside

import (
	"testing"

	"github.com/anoptic/broadside/replay/table"
)

// benchWorld is the performance target's world: 1,000 ships on the default
// 8 km × 8 km sea in 2 × 2 sectors, an aggressive fleet firing broadsides
// often enough to keep about 10,000 cannonballs in the air, warmed up past
// the first volleys.
func benchWorld(b *testing.B) *testWorld {
	w := newBotWorld(b, DefaultConfig(), 1000, 1, 0)
	for k := 0; k < 300; k++ {
		w.step(b, nil)
	}
	return w
}

// BenchmarkWorldStep is one tick of the whole world (all four sectors) as
// a world runs it, through the Runners on an in-memory log: the marker,
// decoding the records, commands, sailing, gunnery, ballistics, hits,
// migrations (appended to the log) and the state hash. The bots' thinking
// and the submission of their orders are excluded from the timing.
func BenchmarkWorldStep(b *testing.B) {
	w := benchWorld(b)
	var balls, ships, cmds int
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		if err := w.match.Act(w.Tick() + 1); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if err := w.LocalWorld.Step(); err != nil {
			b.Fatal(err)
		}
		cmds += len(w.input)
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
	w := benchWorld(b)
	caps := make([]table.SetCapture, w.Shards())
	for i, s := range w.Sectors() {
		s.Tables().CaptureInto(&caps[i], true)
	}
	var bytes int
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		w.step(b, nil)
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
