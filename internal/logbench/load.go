package logbench

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
)

// Stats summarises the latencies of one phase.
type Stats struct {
	Ops       int           // appends that completed successfully
	Errors    int           // appends that failed or were cut off by the phase's deadline
	Unissued  int           // open loop: appends never sent because the phase ran out of time
	Elapsed   time.Duration // from the first scheduled send to the last completion
	OpsPerSec float64       // Ops / Elapsed
	Mean      time.Duration
	P50       time.Duration
	P99       time.Duration
	P999      time.Duration
	Max       time.Duration
	// CPUPerOp is the process's CPU time (all cores, user and system; the
	// load generator's share included) from the start of the phase until
	// the contender settled after it, per completed append. On a busy
	// machine it is steadier than latency: throughput on N cores cannot
	// exceed N / CPUPerOp.
	CPUPerOp time.Duration
}

// latencyRecorder collects one latency per operation index without locks:
// every operation owns its slot.
type latencyRecorder struct {
	lat      []int64 // ns; 0 = not completed
	failed   []bool
	lastDone atomic.Int64 // unix ns of the latest completion
}

func newRecorder(n int) *latencyRecorder {
	return &latencyRecorder{lat: make([]int64, n), failed: make([]bool, n)}
}

func (r *latencyRecorder) record(i int, d time.Duration, end time.Time, err error) {
	r.lat[i] = max(int64(d), 1)
	if err != nil {
		r.failed[i] = true
		return
	}
	e := end.UnixNano()
	for {
		last := r.lastDone.Load()
		if e <= last || r.lastDone.CompareAndSwap(last, e) {
			return
		}
	}
}

// stats computes the summary. Failed operations count in the percentiles
// with the time they took to fail (an open-loop phase cuts off what is
// still waiting at its deadline, and those count as at least that slow).
func (r *latencyRecorder) stats(start time.Time) Stats {
	h := hdr.New(1, int64(10*time.Minute), 3)
	var s Stats
	var sum float64
	var n int
	for i, v := range r.lat {
		if v == 0 {
			s.Unissued++
			continue
		}
		if r.failed[i] {
			s.Errors++
		} else {
			s.Ops++
		}
		n++
		sum += float64(v)
		_ = h.RecordValue(min(v, int64(10*time.Minute)))
	}
	if n == 0 {
		return s
	}
	if last := r.lastDone.Load(); last > 0 {
		s.Elapsed = time.Duration(last - start.UnixNano())
	}
	if s.Elapsed > 0 {
		s.OpsPerSec = float64(s.Ops) / s.Elapsed.Seconds()
	}
	s.Mean = time.Duration(sum / float64(n))
	s.P50 = time.Duration(h.ValueAtQuantile(50))
	s.P99 = time.Duration(h.ValueAtQuantile(99))
	s.P999 = time.Duration(h.ValueAtQuantile(99.9))
	s.Max = time.Duration(h.Max())
	return s
}

// closedLoop runs appenders goroutines that each append, wait for the
// acknowledgement and append again, until ops appends were issued or
// maxTime passed. Latency is measured per append.
func closedLoop(ctx context.Context, sys System, payload []byte, appenders, ops int, maxTime, opTimeout time.Duration) Stats {
	rec := newRecorder(ops)
	var next atomic.Int64
	start := time.Now()
	stopIssuing := start.Add(maxTime)
	var wg sync.WaitGroup
	for range min(appenders, ops) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= ops || ctx.Err() != nil {
					return
				}
				t0 := time.Now()
				if t0.After(stopIssuing) {
					return
				}
				actx, cancel := context.WithTimeout(ctx, opTimeout)
				err := sys.Append(actx, payload)
				cancel()
				end := time.Now()
				rec.record(i, end.Sub(t0), end, err)
			}
		})
	}
	wg.Wait()
	return rec.stats(start)
}

// timerSlack is how early the open loop may send an append. An idle Go
// program on Linux wakes from sub-millisecond timers about 1 ms late (the
// runtime's poller sleeps in whole milliseconds), which would add up to a
// millisecond of harness-made delay to every append at low rates. So a
// worker sleeps until timerSlack before the scheduled time and sends when it
// wakes, possibly a little early; the latency is then measured from the
// actual send. The rate over the step is unchanged; appends leave in small
// bursts, about a millisecond apart.
const timerSlack = 1200 * time.Microsecond

// openLoop issues appends at a fixed rate for dur, whether or not earlier
// ones completed: append i is scheduled at start + i/rate and its latency
// is measured from that scheduled time (or from its send, if earlier), not
// from when a goroutine got around to sending it, so a system that falls
// behind is charged for the queueing it causes (no coordinated omission). At most maxInflight
// appends are in progress at once; appends still waiting drainTime after
// the last one was scheduled are cut off and count as failed.
func openLoop(ctx context.Context, sys System, payload []byte, rate float64, dur time.Duration, maxInflight int, drainTime time.Duration) Stats {
	n := int(math.Round(rate * dur.Seconds()))
	if n < 1 {
		n = 1
	}
	rec := newRecorder(n)
	interval := float64(time.Second) / rate
	start := time.Now().Add(2 * time.Millisecond) // let the workers start
	deadline := start.Add(dur + drainTime)
	pctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(maxInflight, n) {
		wg.Go(func() {
			timer := time.NewTimer(time.Hour)
			defer timer.Stop()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				sched := start.Add(time.Duration(float64(i) * interval))
				if d := time.Until(sched); d > timerSlack {
					// No select on pctx.Done here: thousands of workers
					// parked on one channel contend on its lock. The sleep
					// ends before the step's deadline anyway.
					timer.Reset(d - timerSlack)
					<-timer.C
				}
				if pctx.Err() != nil {
					return // the rest stays unissued
				}
				// Measure from the scheduled time, or from the actual send
				// if that was earlier (see timerSlack).
				from := time.Now()
				if sched.Before(from) {
					from = sched
				}
				err := sys.Append(pctx, payload)
				end := time.Now()
				rec.record(i, end.Sub(from), end, err)
			}
		})
	}
	wg.Wait()
	st := rec.stats(start)
	if st.Elapsed < dur {
		// Achieved throughput is over the whole scheduled window even if
		// the last appends finished early.
		st.Elapsed = dur
		st.OpsPerSec = float64(st.Ops) / dur.Seconds()
	}
	return st
}
