package cluster

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/anoptic/broadside/demo/bots"
	"github.com/anoptic/broadside/netcode/server"
)

// MeasureOptions configure Measure.
type MeasureOptions struct {
	// Bots play, split over the front ends, at Rate commands per second
	// each, for Duration (the first Warmup of it is not counted).
	Bots     int
	Rate     float64
	Duration time.Duration
	Warmup   time.Duration
	FirstID  uint32
}

// Throughput is what a cluster did under a steady load, no faults.
type Throughput struct {
	Workers int
	Bots    int
	Rate    float64
	// TicksPerSec is the world's: the slowest sector's ticks published
	// per second over the measured period.
	TicksPerSec float64
	// Interval is the time between the first publications of a sector's
	// consecutive ticks, every sector: p50, p99.
	IntervalP50, IntervalP99 time.Duration
	// Frame latency (published to received by this process) p50, p99.
	LatencyP50, LatencyP99 time.Duration
	// Commands acknowledged per second, and the bots' worst ack and
	// applied p99 and their updates per second (the lowest).
	AckedPerSec        float64
	AckP99, AppliedP99 time.Duration
	UpdatesPerSec      float64
	// WorkerCPU is each worker's CPU use over the period, in cores.
	WorkerCPU []float64
}

func (t Throughput) String() string {
	var cpu []string
	total := 0.0
	for _, c := range t.WorkerCPU {
		cpu = append(cpu, fmt.Sprintf("%.2f", c))
		total += c
	}
	return fmt.Sprintf("%d workers, %d bots at %.0f/s: world %.1f ticks/s, tick interval p50/p99 %.1f/%.1f ms, frame latency p50/p99 %.2f/%.2f ms, %.0f commands acked/s, ack p99 %.0f ms, applied p99 %.0f ms, %.1f updates/s per bot, worker CPU %s cores (sum %.2f)",
		t.Workers, t.Bots, t.Rate, t.TicksPerSec, msf(t.IntervalP50), msf(t.IntervalP99), msf(t.LatencyP50), msf(t.LatencyP99),
		t.AckedPerSec, msf(t.AckP99), msf(t.AppliedP99), t.UpdatesPerSec, strings.Join(cpu, "+"), total)
}

// Measure runs bots on every front end for o.Duration with no fault and
// reports the world's throughput and the workers' CPU.
func Measure(ctx context.Context, c *Cluster, o MeasureOptions) (Throughput, error) {
	o.Bots = or(o.Bots, 12)
	if o.Rate == 0 {
		o.Rate = 5
	}
	if o.Duration == 0 {
		o.Duration = 20 * time.Second
	}
	if o.Warmup == 0 {
		o.Warmup = 3 * time.Second
	}
	th := Throughput{Workers: len(c.Workers), Bots: o.Bots, Rate: o.Rate}
	w, err := c.Watch()
	if err != nil {
		return th, err
	}
	defer w.Stop()
	// The world ticks before the load starts.
	for deadline := time.Now().Add(60 * time.Second); w.MinTick(4) < 30; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return th, fmt.Errorf("cluster: the world did not tick within 60 s (sectors at %v)", w.Latest())
		}
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		reps []bots.Report
		errs []error
	)
	start := time.Now()
	for i, fe := range c.FrontEndNames {
		n := o.Bots / len(c.FrontEndNames)
		if i < o.Bots%len(c.FrontEndNames) {
			n++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := bots.Run(ctx, bots.Config{Server: c.FrontEnds[fe], TLS: c.CA.ClientTLS(), Secret: c.Secret,
				Prefix: fe + "-m-", FirstID: server.EphemeralIDBase + 100_001 + o.FirstID + uint32(i)*1000, N: n, Rate: o.Rate,
				Duration: o.Duration, Seed: uint64(i + 7)})
			mu.Lock()
			defer mu.Unlock()
			reps, errs = append(reps, r), append(errs, err)
		}()
	}
	sleep(ctx, o.Warmup)
	from := time.Now()
	cpu0 := c.workerCPU()
	t0 := w.MinTick(4)
	sleep(ctx, time.Until(start.Add(o.Duration)))
	to := time.Now()
	cpu1 := c.workerCPU()
	t1 := w.MinTick(4)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return th, err
		}
	}
	span := to.Sub(from).Seconds()
	th.TicksPerSec = float64(t1-t0) / span
	for i := range cpu1 {
		if i < len(cpu0) {
			th.WorkerCPU = append(th.WorkerCPU, (cpu1[i]-cpu0[i])/span)
		}
	}
	frames, _ := w.Frames()
	firstPub := map[[2]uint64]int64{}
	iv, lat := hdrhistogram.New(1, 60_000_000, 3), hdrhistogram.New(1, 60_000_000, 3)
	for _, f := range frames {
		if f.At.Before(from) || f.At.After(to) {
			continue
		}
		k := [2]uint64{uint64(f.F.Sector), f.F.Tick}
		if v, ok := firstPub[k]; !ok || f.F.Published < v {
			firstPub[k] = f.F.Published
		}
		_ = lat.RecordValue(max(1, f.At.Sub(time.Unix(0, f.F.Published)).Microseconds()))
	}
	for k, v := range firstPub {
		if prev, ok := firstPub[[2]uint64{k[0], k[1] - 1}]; ok && v > prev {
			_ = iv.RecordValue((v - prev) / 1000)
		}
	}
	us := func(v int64) time.Duration { return time.Duration(v) * time.Microsecond }
	th.IntervalP50, th.IntervalP99 = us(iv.ValueAtQuantile(50)), us(iv.ValueAtQuantile(99))
	th.LatencyP50, th.LatencyP99 = us(lat.ValueAtQuantile(50)), us(lat.ValueAtQuantile(99))
	var acked int64
	th.UpdatesPerSec = -1
	for _, r := range reps {
		acked += r.Acked
		th.AckP99 = max(th.AckP99, us(r.AckP99us))
		th.AppliedP99 = max(th.AppliedP99, us(r.AppliedP99us))
		if th.UpdatesPerSec < 0 || r.UpdatesPerSec < th.UpdatesPerSec {
			th.UpdatesPerSec = r.UpdatesPerSec
		}
	}
	th.AckedPerSec = float64(acked) / o.Duration.Seconds()
	return th, nil
}

// workerCPU returns each worker's CPU seconds so far (Linux /proc; empty
// elsewhere).
func (c *Cluster) workerCPU() []float64 {
	var out []float64
	for _, name := range c.Workers {
		p := c.Proc(name)
		if p == nil || !p.Running() {
			out = append(out, 0)
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
		if err != nil {
			return nil
		}
		// Fields after the command name (which may hold spaces): state is
		// field 3, utime 14 and stime 15.
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 13 {
			return nil
		}
		ut, _ := strconv.ParseFloat(f[11], 64)
		st, _ := strconv.ParseFloat(f[12], 64)
		out = append(out, (ut+st)/100) // USER_HZ is 100 on Linux
	}
	return out
}
