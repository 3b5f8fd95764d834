// Package logbench runs the side-by-side benchmark of Broadside's command
// log against its baselines (`broadside bench log`): the same load, in one
// run, on one machine, for cmdlog (memory and fsync durability), a
// Corfu-style log, NATS JetStream R3, and the raw QUIC floor of a 1-RTT
// append to 3 replicas.
//
// For each contender and record size it measures
//
//  1. closed-loop latency at low load: 1 appender, then 8, each appending
//     and waiting, for a fixed count (the table's latencies are the
//     1-appender ones); then a saturating load (64 appenders, 256 in a
//     full run) that shows throughput with batching and the CPU cost per
//     append;
//  2. open-loop throughput: appends issued at rising target rates whatever
//     the completions, latency measured from each append's scheduled send
//     time (no coordinated omission). A rate is sustained when the achieved
//     rate is at least 95% of the target, p99 is under a bound, nothing
//     failed, and the contender's background work (cmdlog's ordering) caught
//     up within 5% of the step's duration (plus 50 ms) after it. The report
//     gives the achieved rate of the highest sustained step.
//
// Everything runs in this process on 127.0.0.1, every node with its own QUIC
// endpoint; the load generator shares the machine's cores with the systems
// it measures, equally for all of them. Every loop is bounded in count and
// in time.
package logbench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/anoptic/broadside/internal/report"
)

// ClosedLoopPhase is one closed-loop latency measurement.
type ClosedLoopPhase struct {
	Appenders int
	Ops       int
}

// Options configures a run.
type Options struct {
	// Contenders to run, by name (empty: all, see ContenderNames).
	Contenders []string
	// Sizes are the record sizes in bytes.
	Sizes []int
	// Warmup appends (8 concurrent) run and are discarded before each size.
	Warmup int
	// ClosedLoop phases; the first one's latencies are the headline.
	ClosedLoop []ClosedLoopPhase
	// ClosedLoopMaxTime bounds each closed-loop phase.
	ClosedLoopMaxTime time.Duration
	// Rates are the open-loop target rates (appends/s), ascending.
	Rates []float64
	// StepDuration is how long each open-loop rate is offered.
	StepDuration time.Duration
	// StopAfterFailures ends the open-loop ramp of a contender after this
	// many consecutive unsustained rates (default 1).
	StopAfterFailures int
	// MaxInflight bounds appends in progress in the open loop.
	MaxInflight int
	// P99Bound is the p99 latency a sustained rate must stay under.
	P99Bound time.Duration
	// MinAchieved is the fraction of the target rate a sustained rate must
	// reach.
	MinAchieved float64
	// OpTimeout bounds one closed-loop append; DrainTime bounds how long an
	// open-loop step waits for its last appends.
	OpTimeout, DrainTime time.Duration
	// SettleTimeout bounds the wait for a contender's background work after
	// a phase.
	SettleTimeout time.Duration
	// Dir holds the contenders' storage (a fresh temporary directory under
	// it per contender, removed afterwards); empty means os.TempDir().
	Dir string
	// ProfileDir, if set, receives a CPU profile per contender
	// (ProfileDir/<name>.pprof) covering its measurement phases.
	ProfileDir string
	// Progress receives progress reports (nil: none).
	Progress Progress
	// Logger receives the systems' own logs; nil: warnings and errors to
	// stderr.
	Logger *slog.Logger
}

// Quick returns the options of `bench log --quick`: 100-byte records, short
// phases, fewer rates; it finishes in well under a minute on 2 cores.
func Quick() Options {
	o := defaults()
	o.Sizes = []int{100}
	o.Warmup = 300
	o.ClosedLoop = []ClosedLoopPhase{{1, 600}, {8, 3000}, {64, 6000}}
	o.ClosedLoopMaxTime = 1500 * time.Millisecond
	o.Rates = []float64{5_000, 10_000, 20_000, 50_000, 100_000, 200_000, 300_000}
	o.StepDuration = 500 * time.Millisecond
	o.DrainTime = 500 * time.Millisecond
	return o
}

// Full returns the options of a full run: 100-byte and 4 KiB records,
// longer phases, a finer ramp of rates.
func Full() Options {
	o := defaults()
	o.Sizes = []int{100, 4096}
	o.Warmup = 2000
	o.ClosedLoop = []ClosedLoopPhase{{1, 5000}, {8, 20000}, {256, 100000}}
	o.ClosedLoopMaxTime = 6 * time.Second
	o.Rates = []float64{2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 150_000, 200_000, 250_000, 300_000, 400_000}
	o.StepDuration = 3 * time.Second
	o.StopAfterFailures = 2
	return o
}

func defaults() Options {
	return Options{
		StopAfterFailures: 1,
		MaxInflight:       4096,
		P99Bound:          50 * time.Millisecond,
		MinAchieved:       0.95,
		OpTimeout:         10 * time.Second,
		DrainTime:         time.Second,
		SettleTimeout:     20 * time.Second,
	}
}

// Step is one open-loop rate.
type Step struct {
	Target float64
	Stats
	// Settle is how long the contender's background work took to catch up
	// after the step.
	Settle time.Duration
	// Sustained: see the package documentation.
	Sustained bool
	// Why explains an unsustained step.
	Why string
}

// Result is one contender at one record size.
type Result struct {
	Name        string
	RecordBytes int
	// Closed holds one Stats per Options.ClosedLoop phase.
	Closed []Stats
	Steps  []Step
	// MaxOps is the achieved rate of the highest sustained step (0: none).
	MaxOps float64
	// Err is set if the contender failed to start or run.
	Err error
	// Diagnostics is what the system reported about its work at this size
	// (may be empty).
	Diagnostics string
}

// Headline returns the latencies the table leads with: the first
// closed-loop phase (1 appender).
func (r Result) Headline() Stats {
	if len(r.Closed) == 0 {
		return Stats{}
	}
	return r.Closed[0]
}

// Report is the outcome of a run.
type Report struct {
	Machine  string
	Options  Options
	Started  time.Time
	Duration time.Duration
	Results  []Result
	// MachineCores and OwnCores are the average number of cores busy on
	// the whole machine and in this process during the run (0 if
	// unknown): on a shared machine, the difference is other work that
	// competed with the benchmark.
	MachineCores, OwnCores float64
}

// Run runs the benchmark. A contender that fails is reported in its
// Result; the run goes on with the others and Run returns their errors
// joined.
func Run(ctx context.Context, opts Options) (*Report, error) {
	contenders, err := selectContenders(opts.Contenders)
	if err != nil {
		return nil, err
	}
	if len(opts.Sizes) == 0 || len(opts.ClosedLoop) == 0 {
		return nil, errors.New("logbench: no record sizes or no closed-loop phases")
	}
	if opts.StopAfterFailures <= 0 {
		opts.StopAfterFailures = 1
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	prog := opts.Progress
	if prog == nil {
		prog = nopProgress{}
	}
	unitsPerSize := 1 + len(opts.ClosedLoop) + len(opts.Rates)
	prog.Start(len(contenders) * len(opts.Sizes) * unitsPerSize)
	defer prog.Finish()

	rep := &Report{Machine: MachineDescription(), Options: opts, Started: time.Now()}
	busy0, total0, machineOK := report.MachineBusy()
	cpu0 := report.ProcessCPU()
	var errs []error
	for _, c := range contenders {
		results, err := runContender(ctx, c, opts, prog, unitsPerSize)
		rep.Results = append(rep.Results, results...)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.Name, err))
		}
		if ctx.Err() != nil {
			break
		}
		runtime.GC() // the next contender starts on a clean heap
	}
	rep.Duration = time.Since(rep.Started)
	rep.OwnCores = float64(report.ProcessCPU()-cpu0) / float64(rep.Duration)
	if busy1, total1, ok := report.MachineBusy(); ok && machineOK && total1 > total0 {
		rep.MachineCores = float64(busy1-busy0) / float64(total1-total0) * float64(runtime.NumCPU())
	}
	return rep, errors.Join(errs...)
}

func runContender(ctx context.Context, c Contender, opts Options, prog Progress, unitsPerSize int) (results []Result, err error) {
	fail := func(err error) ([]Result, error) {
		if n := len(results); n > 0 && results[n-1].Err == nil {
			results[n-1].Err = err
		}
		for _, size := range opts.Sizes[len(results):] {
			results = append(results, Result{Name: c.Name, RecordBytes: size, Err: err})
			prog.Done(unitsPerSize)
		}
		return results, err
	}
	dir, err := os.MkdirTemp(opts.Dir, "logbench-"+c.Name+"-")
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(dir)
	prog.Activity(c.Name + ": starting")
	sys, err := c.Start(ctx, Env{Dir: dir, Logger: opts.Logger})
	if err != nil {
		return fail(fmt.Errorf("start: %w", err))
	}
	defer func() {
		prog.Activity(c.Name + ": stopping")
		if cerr := sys.Close(); cerr != nil {
			opts.Logger.Warn("logbench: close contender", "name", c.Name, "err", cerr)
		}
	}()
	if opts.ProfileDir != "" {
		stop, err := report.CPUProfileToFile(filepath.Join(opts.ProfileDir, c.Name+".pprof"))
		if err != nil {
			return fail(err)
		}
		defer stop()
	}
	for _, size := range opts.Sizes {
		u := &units{p: prog}
		r, err := runSize(ctx, c.Name, sys, size, opts, u)
		u.Done(unitsPerSize - u.done)
		if d, ok := sys.(Diagnoser); ok {
			r.Diagnostics = d.Diagnostics()
		}
		results = append(results, r)
		if err != nil {
			return fail(err)
		}
	}
	return results, nil
}

// units counts the progress units reported for one size, so that a size
// that ends early still reports all of its units.
type units struct {
	p    Progress
	done int
}

func (u *units) Activity(s string) { u.p.Activity(s) }
func (u *units) Done(n int) {
	if n > 0 {
		u.p.Done(n)
		u.done += n
	}
}

func runSize(ctx context.Context, name string, sys System, size int, opts Options, prog *units) (Result, error) {
	res := Result{Name: name, RecordBytes: size}
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = byte('a' + i%26)
	}
	label := fmt.Sprintf("%s %dB", name, size)
	settle := func() (time.Duration, error) {
		sctx, cancel := context.WithTimeout(ctx, opts.SettleTimeout)
		defer cancel()
		t0 := time.Now()
		err := sys.Settle(sctx)
		return time.Since(t0), err
	}

	prog.Activity(label + ": warm-up")
	if w := closedLoop(ctx, sys, payload, 8, opts.Warmup, opts.ClosedLoopMaxTime, opts.OpTimeout); w.Errors > 0 || w.Ops == 0 {
		// Not fatal: the measured phases will show whether it lasts.
		opts.Logger.Warn("logbench: warm-up appends failed", "contender", name, "bytes", size,
			"failed", w.Errors, "ok", w.Ops)
	}
	if _, err := settle(); err != nil {
		res.Err = fmt.Errorf("settle after warm-up: %w", err)
		return res, res.Err
	}
	prog.Done(1)

	for _, ph := range opts.ClosedLoop {
		prog.Activity(fmt.Sprintf("%s: closed loop, %d appender(s)", label, ph.Appenders))
		cpu0 := report.ProcessCPU()
		st := closedLoop(ctx, sys, payload, ph.Appenders, ph.Ops, opts.ClosedLoopMaxTime, opts.OpTimeout)
		_, settleErr := settle()
		st.CPUPerOp = perOp(report.ProcessCPU()-cpu0, st.Ops)
		res.Closed = append(res.Closed, st)
		prog.Done(1)
		if st.Ops == 0 || st.Errors > 0 {
			res.Err = fmt.Errorf("closed loop with %d appenders: %d of %d appends failed", ph.Appenders, st.Errors, st.Errors+st.Ops)
			return res, res.Err
		}
		if settleErr != nil {
			res.Err = fmt.Errorf("settle after closed loop: %w", settleErr)
			return res, res.Err
		}
	}

	failures := 0
	for _, rate := range opts.Rates {
		if failures >= opts.StopAfterFailures || ctx.Err() != nil {
			break
		}
		prog.Activity(fmt.Sprintf("%s: open loop, %s/s", label, formatCount(rate)))
		cpu0 := report.ProcessCPU()
		st := openLoop(ctx, sys, payload, rate, opts.StepDuration, opts.MaxInflight, opts.DrainTime)
		step := Step{Target: rate, Stats: st}
		var settleErr error
		step.Settle, settleErr = settle()
		step.CPUPerOp = perOp(report.ProcessCPU()-cpu0, st.Ops)
		step.Sustained, step.Why = judge(step, settleErr, opts)
		res.Steps = append(res.Steps, step)
		if step.Sustained {
			failures = 0
			res.MaxOps = max(res.MaxOps, step.OpsPerSec)
		} else {
			failures++
		}
		prog.Done(1)
		if settleErr != nil {
			// The system is stuck; the remaining rates would measure the
			// backlog, not the rate.
			break
		}
	}
	return res, nil
}

func perOp(d time.Duration, ops int) time.Duration {
	if ops <= 0 {
		return 0
	}
	return d / time.Duration(ops)
}

// judge decides whether an open-loop step was sustained.
func judge(s Step, settleErr error, opts Options) (bool, string) {
	switch {
	case s.Errors > 0:
		return false, fmt.Sprintf("%d appends failed or timed out", s.Errors)
	case s.Unissued > 0:
		return false, fmt.Sprintf("%d appends not issued in time", s.Unissued)
	case s.OpsPerSec < opts.MinAchieved*s.Target:
		return false, fmt.Sprintf("achieved %.0f%% of the target", 100*s.OpsPerSec/s.Target)
	case s.P99 > opts.P99Bound:
		return false, fmt.Sprintf("p99 %v above %v", s.P99.Round(time.Millisecond), opts.P99Bound)
	case settleErr != nil:
		return false, fmt.Sprintf("background work did not catch up: %v", settleErr)
	case s.Settle > opts.StepDuration/20+50*time.Millisecond:
		return false, fmt.Sprintf("background work caught up only %v after the step", s.Settle.Round(time.Millisecond))
	}
	return true, ""
}

// MachineDescription describes this machine for the report.
func MachineDescription() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	return fmt.Sprintf("%s, %d logical CPUs (GOMAXPROCS %d), %s/%s, %s", model, runtime.NumCPU(),
		runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH, runtime.Version())
}
