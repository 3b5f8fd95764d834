package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/anoptic/broadside/internal/logbench"
	"github.com/spf13/cobra"
)

// benchSubcommands holds the constructors of `broadside bench` subcommands
// that live in other files: each registers itself from an init function
// with registerBenchCmd, so adding a benchmark never edits this file.
var (
	benchSubcommandsMu sync.Mutex
	benchSubcommands   []func() *cobra.Command
)

// registerBenchCmd adds a `broadside bench` subcommand. Call it from an
// init function.
func registerBenchCmd(newCmd func() *cobra.Command) {
	benchSubcommandsMu.Lock()
	defer benchSubcommandsMu.Unlock()
	benchSubcommands = append(benchSubcommands, newCmd)
}

func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Run side-by-side system benchmarks",
		Long: `Run system benchmarks that put Broadside and its baselines side by side, in one
run, on this machine, under the same load, and print a table with ratios.

Machines here are small and shared: quote medians, p99 and ratios from one
run, never a lone absolute number. Record results in docs/benchmarks.md with
the command that produced them.`,
		Example: `  broadside bench sim --quick
  broadside bench log --quick --json bench-log.json`,
	}
	cmd.AddCommand(newBenchLogCmd())
	benchSubcommandsMu.Lock()
	defer benchSubcommandsMu.Unlock()
	for _, newSub := range benchSubcommands {
		cmd.AddCommand(newSub())
	}
	return cmd
}

// benchLogFlags are the flags of 'bench log'.
type benchLogFlags struct {
	quick      bool
	jsonPath   string
	pngPath    string
	sizes      string
	duration   time.Duration
	rates      string
	contenders string
	p99Bound   time.Duration
	profileDir string
	dir        string
	noProgress bool
}

func newBenchLogCmd() *cobra.Command {
	var fl benchLogFlags
	cmd := &cobra.Command{
		Use:   "log",
		Short: "Benchmark the command log against Corfu, NATS JetStream and the QUIC floor",
		Long: `Benchmark Broadside's command log (cmdlog, LazyLog design) side by side with its
baselines, in one run on this machine, under the same load:

  lazylog-memory  cmdlog: 3 sequencing replicas + 2 Pebble shards, each node its own
                  QUIC endpoint on 127.0.0.1; acked when in memory on all 3 replicas
                  (1 round trip). The reference for the ratios.
  lazylog-fsync   the same, acked when in the fsynced WAL of all 3 replicas.
  corfu           Corfu-style log: sequencer token, then a client-driven chain write
                  through 3 Pebble replicas (4 round trips), no fsync: the durability
                  of lazylog-memory.
  corfu-fsync     the same, every replica fsyncs before acking: the durability of
                  lazylog-fsync.
  jetstream-r3    NATS JetStream: 3-node embedded cluster on loopback, R3 memory
                  stream, publish with ack, client on the stream leader.
  quic-floor      one round trip fanned out to 3 echo servers over one long-lived
                  stream each: the physical floor of a 1-RTT append here.

For each contender and record size (--sizes):
  1. closed loop at low load: 1 appender, then 8, a fixed number of appends;
     the table's latencies (mean, p50, p99, p99.9) are the 1-appender ones;
     then a saturating closed loop (64 appenders; 256 in a full run) for
     throughput with batching and the CPU time each append costs;
  2. open loop at rising target rates (--rates), each offered for --duration
     whatever the completions, with latency measured from each append's
     scheduled send time (no coordinated omission). A rate is sustained if at
     least 95% of it is achieved, p99 stays under --p99-bound, nothing fails,
     and background work (cmdlog's ordering) catches up right after. The ramp
     stops after the first unsustained rate (the second in a full run).
     "max ops/s" is the achieved rate of the highest sustained step.

Output: the table on stdout (ratios against lazylog-memory), a progress
display on stderr, --json FILE with one row per contender and size
({"contenders":[{"name","record_bytes","mean_us","p50_us","p99_us","p999_us",
"max_ops"}]}), --png FILE with latency-vs-throughput curves (p50 and p99).
Everything runs in this process on 127.0.0.1; storage goes to temporary
directories that are removed afterwards.

--quick runs 100-byte records only with short phases and finishes in under a
minute on 2 cores; a full run (the default) takes several minutes.`,
		Example: `  broadside bench log --quick
  # from the repository's root, the quick run of docs/benchmarks.md and its chart:
  broadside bench log --quick --json /tmp/b.json --png docs/bench-log.png
  broadside bench log --sizes 100,4096 --duration 3s
  broadside bench log --contenders lazylog-memory,quic-floor --profile-dir /tmp/prof`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runBenchLog(cmd, fl) },
	}
	f := cmd.Flags()
	f.BoolVar(&fl.quick, "quick", false, "short run: 100-byte records, short phases, fewer rates (under a minute)")
	f.StringVar(&fl.jsonPath, "json", "", "write the results as JSON to `FILE`")
	f.StringVar(&fl.pngPath, "png", "", "write latency-vs-throughput curves as a PNG to `FILE`")
	f.StringVar(&fl.sizes, "sizes", "100,4096", "record sizes in bytes, comma-separated (--quick: 100)")
	f.DurationVar(&fl.duration, "duration", 3*time.Second, "how long each open-loop rate is offered (--quick: 500ms)")
	f.StringVar(&fl.rates, "rates", "", "open-loop target rates in appends/s, comma-separated\n(default 2000,...,400000; --quick: 5000,10000,20000,50000,100000,200000,300000)")
	f.StringVar(&fl.contenders, "contenders", "", "run only these contenders, comma-separated (default: all: "+strings.Join(logbench.ContenderNames(), ",")+")")
	f.DurationVar(&fl.p99Bound, "p99-bound", 50*time.Millisecond, "p99 latency a sustained rate must stay under")
	f.StringVar(&fl.profileDir, "profile-dir", "", "write a CPU profile per contender to `DIR`/<name>.pprof (go tool pprof)")
	f.StringVar(&fl.dir, "dir", "", "parent `DIR` of the contenders' temporary storage (default: the system temp dir)")
	f.BoolVar(&fl.noProgress, "no-progress", false, "no progress display on stderr")
	return cmd
}

// options turns the flags cmd was given into logbench options.
func (fl benchLogFlags) options(cmd *cobra.Command) (logbench.Options, error) {
	opts := logbench.Full()
	if fl.quick {
		opts = logbench.Quick()
	}
	f := cmd.Flags()
	if f.Changed("sizes") {
		s, err := logbench.ParseInts(fl.sizes)
		if err != nil {
			return opts, fmt.Errorf("--sizes: %w", err)
		}
		opts.Sizes = s
	}
	if f.Changed("rates") {
		r, err := logbench.ParseInts(fl.rates)
		if err != nil {
			return opts, fmt.Errorf("--rates: %w", err)
		}
		slices.Sort(r) // the ramp stops at the first unsustained rate
		opts.Rates = opts.Rates[:0]
		for _, v := range r {
			opts.Rates = append(opts.Rates, float64(v))
		}
	}
	if f.Changed("duration") {
		if fl.duration <= 0 {
			return opts, errors.New("--duration must be positive")
		}
		opts.StepDuration = fl.duration
	}
	if f.Changed("p99-bound") {
		opts.P99Bound = fl.p99Bound
	}
	if fl.contenders != "" {
		opts.Contenders = strings.Split(fl.contenders, ",")
	}
	opts.ProfileDir, opts.Dir = fl.profileDir, fl.dir
	if fl.profileDir != "" {
		if err := os.MkdirAll(fl.profileDir, 0o755); err != nil {
			return opts, err
		}
	}
	if !fl.noProgress {
		opts.Progress = logbench.NewProgress(cmd.ErrOrStderr())
	}
	return opts, nil
}

func runBenchLog(cmd *cobra.Command, fl benchLogFlags) error {
	opts, err := fl.options(cmd)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
	defer stop()
	rep, runErr := logbench.Run(ctx, opts)
	if rep == nil {
		return runErr
	}
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "\n$ broadside %s\n", strings.Join(os.Args[1:], " "))
	if err := rep.WriteTable(out); err != nil {
		return err
	}
	if fl.jsonPath != "" {
		if err := rep.WriteJSONFile(fl.jsonPath); err != nil {
			return fmt.Errorf("--json: %w", err)
		}
	}
	if fl.pngPath != "" {
		if err := rep.WritePNGFile(fl.pngPath); err != nil {
			return fmt.Errorf("--png: %w", err)
		}
	}
	return runErr
}
