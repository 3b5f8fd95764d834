package world

import (
	"testing"
	"time"

	"github.com/anoptic/broadside/replay"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func TestTickScheduleCountsMissedPeriods(t *testing.T) {
	const p = time.Second / 30
	t0 := time.Unix(1000, 0)
	type done struct {
		tick uint64
		at   time.Duration
	}
	onTime := func(from, to uint64, start time.Duration, jitter time.Duration) []done {
		var ds []done
		for k := from; k <= to; k++ {
			j := time.Duration(0)
			if k%2 == 0 {
				j = jitter
			}
			ds = append(ds, done{k, start + time.Duration(k-from)*p + j})
		}
		return ds
	}
	// 25 Hz for 10 s: 250 ticks where 300 were due.
	var slow []done
	for k := uint64(1); k <= 250; k++ {
		slow = append(slow, done{k, time.Duration(k-1) * (time.Second / 25)})
	}
	stall := append(onTime(1, 10, 0, 0), done{11, 15 * p}) // due at 10p, 5 periods late
	for k := uint64(12); k <= 15; k++ {
		stall = append(stall, done{k, 15*p + time.Millisecond}) // the catch-up burst
	}
	stall = append(stall, onTime(16, 40, 16*p, 0)...)
	gap := append(onTime(1, 10, 0, 0), onTime(14, 30, 13*p, 0)...) // 11..13 never complete
	for _, tc := range []struct {
		name     string
		ticks    []done
		min, max uint64
	}{
		{"on time with jitter under a period", onTime(1, 300, 0, p*9/10), 0, 0},
		{"steady at 25 Hz", slow, 49, 51},
		{"one stall of 5 periods then a catch-up burst", stall, 5, 5},
		{"ticks that never complete", gap, 3, 3},
		{"a late first tick moves nothing", append([]done{{1, 0}}, onTime(2, 60, 3*p, 0)...), 2, 2},
	} {
		s := tickSchedule{period: p}
		var n uint64
		for _, d := range tc.ticks {
			n += s.complete(d.tick, t0.Add(d.at))
		}
		if n < tc.min || n > tc.max {
			t.Errorf("%s: %d overruns, want %d..%d", tc.name, n, tc.min, tc.max)
		}
	}
}

// TestWorldCountsLostTicks: a world whose ticks complete at 25 Hz has
// overruns although every sector steps in a millisecond (the counter used
// to count only sector steps longer than a period, and stayed 0 while the
// world lost ticks).
func TestWorldCountsLostTicks(t *testing.T) {
	reg := prometheus.NewRegistry()
	w := &World{cfg: Config{Game: Game{TickRate: 30}}, frames: NewFrames(2, nil), metrics: newMetrics(reg)}
	now := time.Unix(1000, 0)
	w.watchOverruns(func() time.Time { return now })
	for k := uint64(1); k <= 250; k++ {
		now = time.Unix(1000, 0).Add(time.Duration(k-1) * time.Second / 25)
		for shard := uint32(0); shard < 2; shard++ {
			w.frames.Add(replay.TickInfo{Shard: shard, Tick: k, Step: time.Millisecond})
		}
	}
	var m dto.Metric
	if err := w.metrics.overruns.Write(&m); err != nil {
		t.Fatal(err)
	}
	if got := m.GetCounter().GetValue(); got < 49 || got > 51 {
		t.Fatalf("tick_overruns_total = %v after 10 s at 25 Hz, want about 50", got)
	}
}
