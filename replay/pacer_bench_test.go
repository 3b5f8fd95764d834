package replay

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/anoptic/broadside/lineage"
)

// busySim is a counterSim whose every step burns cpu of CPU.
type busySim struct {
	*counterSim
	cpu time.Duration
}

func (s busySim) Step(tick uint64, cmds []Command, rec lineage.Recorder) []Output {
	for start := time.Now(); time.Since(start) < s.cpu; {
	}
	return s.counterSim.Step(tick, cmds, rec)
}

// BenchmarkPacedCatchUp measures the mechanism of the takeover's pacing
// on one core (GOMAXPROCS 1), with nothing else in the process: a live
// runner steps a tick marker appended every 33 ms (30 Hz, 2 s) while a
// catch-up runner replays 200 ticks of the same log, both stepping 3 ms of
// CPU a tick. It reports the live runner's lateness (marker appended to
// tick stepped, ms: p50, p99, max) and how long the catch-up took to
// reach the marker appended when it began (0: not within the 2 s), with
// the catch-up paced by a Pacer (paced) and not (unpaced).
func BenchmarkPacedCatchUp(b *testing.B) {
	for _, paced := range []bool{false, true} {
		name := "unpaced"
		if paced {
			name = "paced"
		}
		b.Run(name, func(b *testing.B) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
			var late []time.Duration
			var catchUp []time.Duration
			for range b.N {
				l, c := pacedCatchUpRound(b, paced)
				late, catchUp = append(late, l...), append(catchUp, c)
			}
			slices.Sort(late)
			slices.Sort(catchUp)
			q := func(p float64) float64 { return float64(late[int(p*float64(len(late)-1))]) / 1e6 }
			b.ReportMetric(q(0.5), "live-late-p50-ms")
			b.ReportMetric(q(0.99), "live-late-p99-ms")
			b.ReportMetric(q(1), "live-late-max-ms")
			b.ReportMetric(float64(catchUp[len(catchUp)/2])/1e6, "catchup-ms")
		})
	}
}

func pacedCatchUpRound(b *testing.B, paced bool) (late []time.Duration, catchUp time.Duration) {
	const prefill, live, period, cpu = 200, 60, 33 * time.Millisecond, 3 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l := NewMemLog()
	defer l.Close()
	for t := uint64(1); t <= prefill; t++ {
		if err := l.Append(ctx, tickRec(t)); err != nil {
			b.Fatal(err)
		}
	}
	p := NewPacer(PacerConfig{Rate: 30})
	var mu sync.Mutex
	appended := map[uint64]time.Time{}
	done := make(chan struct{})
	liveR, err := NewRunner(RunnerConfig{Shard: 1, Sim: busySim{newCounterSim(), cpu}, Source: l.Subscribe(prefill + 1),
		Start: Checkpoint{Tick: prefill, Pos: prefill}, Observer: func(info TickInfo) {
			now := time.Now()
			p.Stepped(1, info.Tick)
			mu.Lock()
			late = append(late, now.Sub(appended[info.Tick]))
			mu.Unlock()
			if info.Tick == prefill+live {
				close(done)
			}
		}})
	if err != nil {
		b.Fatal(err)
	}
	var began time.Time
	var target uint64
	cfg := RunnerConfig{Shard: 2, Sim: busySim{newCounterSim(), cpu}, Source: l.Subscribe(1), Observer: func(info TickInfo) {
		if target != 0 && info.Tick == target && catchUp == 0 {
			catchUp = time.Since(began)
		}
	}}
	if paced {
		cfg.Pace, cfg.PaceUntil = p.Wait, prefill
	}
	catchR, err := NewRunner(cfg)
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	rctx, rcancel := context.WithCancel(ctx)
	wg.Add(2)
	go func() { defer wg.Done(); _ = liveR.Run(rctx) }()
	go func() {
		defer wg.Done()
		next := time.Now()
		for t := uint64(prefill + 1); t <= prefill+live; t++ {
			next = next.Add(period)
			time.Sleep(time.Until(next))
			mu.Lock()
			appended[t] = time.Now()
			mu.Unlock()
			if err := l.Append(ctx, tickRec(t)); err != nil {
				return
			}
			if t == prefill+3 {
				// The takeover begins: replay the log to the present.
				target, began = t, time.Now()
				wg.Add(1)
				go func() { defer wg.Done(); _ = catchR.Run(rctx) }()
			}
		}
	}()
	select {
	case <-done:
	case <-ctx.Done():
		b.Fatal("the live runner did not step every tick")
	}
	rcancel()
	wg.Wait()
	return late, catchUp
}
