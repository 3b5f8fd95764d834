package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/netcode/wire"
	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/snapshot"
	"github.com/spf13/cobra"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// sbOptions configure `broadside bench sim`.
type sbOptions struct {
	quick          bool
	jsonPath       string
	pngPath        string
	ships          int
	recoveryTarget time.Duration
	dir            string
	// scale divides the recording lengths (1, 10 and 60 simulated
	// minutes); --quick uses 20.
	scale int
	// replayTicks is the length of the replay-speed measurement.
	replayTicks uint64
	// window is the length of each live phase (without, then with
	// recoveries).
	window time.Duration
	log    *slog.Logger
	prog   io.Writer
}

// sbJSON is the machine-readable result (the keys are part of the
// interface: docs/benchmarks.md and issue 4 refer to them).
type sbJSON struct {
	TicksPerSec              float64            `json:"ticks_per_sec"`
	CapturePauseP99Us        float64            `json:"capture_pause_p99_us"`
	SnapshotFullBytes        float64            `json:"snapshot_full_bytes"`
	SnapshotIncrementalBytes float64            `json:"snapshot_incremental_bytes"`
	ReplaySpeedup            float64            `json:"replay_speedup"`
	RecoveryMs               map[string]float64 `json:"recovery_ms"`
	HealthyTickP99Ratio      float64            `json:"healthy_tick_p99_ratio"`
}

func newBenchSimCmd() *cobra.Command {
	var opts sbOptions
	var noProgress bool
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Benchmark simulation shards: tick rate, snapshots, replay and recovery",
		Long: `Benchmark Broadside's simulation shards (replay.Runner, one per sector of the
sample game) on an in-memory command log, with snapshots in Pebble:

  1. generation: 1,000 bot ships (about 10,000 cannonballs in the air) on the
     default 8 km sea in 2 x 2 sectors, ticked as fast as the shards go, in
     lockstep (each tick's bot commands, then TICK(n), then all four shards
     step in parallel). Gives the world's ticks/s, the snapshot capture pause
     (the only pause of the tick loop) and the compressed sizes of full and
     incremental snapshots, with snapshots taken by the adaptive policy for
     the recovery target.
  2. recovery: after 1, 10 and 60 simulated minutes, each of the four shards
     is killed in turn and recovered by the supervisor (restore the newest
     snapshot chain into a fresh sim, replay the log to where the world is,
     check every replayed hash); the median time from the kill to live again.
     The log is trimmed behind the snapshots as the recording grows.
  3. replay: the last stretch of the recording is replayed from snapshots,
     each shard alone and the whole world in parallel, as a multiple of real
     time (30 ticks/s).
  4. live: the world continues in real time (a Ticker at 30 Hz, scripted bots)
     on a restarted supervisor; the tick latency of the healthy shards (from
     TICK(n) appended to shard stepped) is measured in one-second slots that
     alternate between no recovery and a kill of shard 0 at the slot's
     start (so that the machine's other load weighs on both alike); the
     ratio of their p99s.

Output: a table on stdout, progress on stderr, --json FILE with the keys
ticks_per_sec, capture_pause_p99_us, snapshot_full_bytes,
snapshot_incremental_bytes, replay_speedup (whole world), recovery_ms
({"1","10","60"}: minutes of recording) and healthy_tick_p99_ratio, and
--png FILE with recovery time against recording length and the healthy
shards' tick latency percentiles. --quick divides the recording lengths by 20
(3 s, 30 s, 3 min; the keys stay "1", "10", "60") and shortens the live
phase (10 slots instead of 30), to finish in under a minute on 2 cores; a
full run takes a few minutes.`,
		Example: `  broadside bench sim --quick
  broadside bench sim --json sim.json --png sim.png`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.scale, opts.replayTicks, opts.window = 1, 3000, 15*time.Second
			if opts.quick {
				opts.scale, opts.replayTicks, opts.window = 20, 900, 5*time.Second
			}
			if opts.ships < 2 || opts.ships > 4000 {
				return fmt.Errorf("--ships %d out of range [2, 4000]", opts.ships)
			}
			opts.log = quietLogger()
			if !noProgress {
				opts.prog = cmd.ErrOrStderr()
			} else {
				opts.prog = io.Discard
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
			defer stop()
			res, err := runSimBench(ctx, opts)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "\n$ broadside %s\n", strings.Join(os.Args[1:], " "))
			res.writeTable(out)
			if opts.jsonPath != "" {
				b, err := json.MarshalIndent(res.json(), "", "  ")
				if err != nil {
					return err
				}
				if err := os.WriteFile(opts.jsonPath, append(b, '\n'), 0o644); err != nil {
					return fmt.Errorf("--json: %w", err)
				}
			}
			if opts.pngPath != "" {
				if err := res.writePNG(opts.pngPath); err != nil {
					return fmt.Errorf("--png: %w", err)
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&opts.quick, "quick", false, "recordings 20 times shorter and short live windows (under a minute)")
	f.StringVar(&opts.jsonPath, "json", "", "write the results as JSON to `FILE`")
	f.StringVar(&opts.pngPath, "png", "", "write recovery time and tick latency charts as a PNG to `FILE`")
	f.IntVar(&opts.ships, "ships", 1000, "bot ships in the world")
	f.DurationVar(&opts.recoveryTarget, "recovery-target", snapshot.DefaultRecoveryTarget, "recovery time target of the snapshot policy")
	f.StringVar(&opts.dir, "dir", "", "parent `DIR` of the snapshot store's temporary directory (default: the system temp dir)")
	f.BoolVar(&noProgress, "no-progress", false, "no progress on stderr")
	return cmd
}

// sbWorld is the world id of the benchmark.
const sbWorld = 1

// sbMinutes are the recording lengths of the recovery measurement.
var sbMinutes = []int{1, 10, 60}

// sbResults collects the measurements.
type sbResults struct {
	opts sbOptions

	// generation
	genTicks   uint64
	genWall    time.Duration
	worldTicks []time.Duration // lockstep world tick (log → all shards stepped)
	stepSums   []time.Duration // CPU of a world tick: the shards' steps summed
	ships      int
	balls      int
	records    float64 // log records per tick
	captures   []time.Duration
	fullCaps   []time.Duration
	fullSizes  []float64 // compressed bytes
	deltaSizes []float64
	fullRaw    []float64
	deltaRaw   []float64
	skipped    uint64 // captures skipped (writer busy)

	// recovery per recording length (minutes)
	recoveries map[int][]replay.Recovery

	// replay
	replayTicks   uint64
	shardReplay   []time.Duration // per shard, alone
	worldReplay   time.Duration   // four shards in parallel
	replayedTicks []uint64        // per shard

	// live
	liveQuiet, liveRecover []time.Duration // healthy shards' tick latency
	liveDuring             []time.Duration // the part of liveRecover during a recovery
	liveRecoveries         []replay.Recovery
	liveStepQuiet          []time.Duration
	liveStepRecover        []time.Duration
}

func (r *sbResults) json() sbJSON {
	out := sbJSON{RecoveryMs: map[string]float64{}}
	if s := sbSum(r.worldTicks); s > 0 {
		out.TicksPerSec = sbRound1(float64(len(r.worldTicks)) / s.Seconds())
	}
	out.CapturePauseP99Us = sbRound1(sbUs(sbQuantile(r.captures, 0.99)))
	out.SnapshotFullBytes = math.Round(sbMedian(r.fullSizes))
	out.SnapshotIncrementalBytes = math.Round(sbMedian(r.deltaSizes))
	out.ReplaySpeedup = sbRound1(r.worldSpeedup())
	for _, m := range sbMinutes {
		out.RecoveryMs[fmt.Sprint(m)] = sbRound1(sbMs(r.recoveryMedian(m)))
	}
	if q := sbQuantile(r.liveQuiet, 0.99); q > 0 {
		out.HealthyTickP99Ratio = math.Round(1000*float64(sbQuantile(r.liveRecover, 0.99))/float64(q)) / 1000
	}
	return out
}

func (r *sbResults) worldSpeedup() float64 {
	if r.worldReplay <= 0 {
		return 0
	}
	return float64(r.replayTicks) / r.worldReplay.Seconds() / broadside.TickRate
}

func (r *sbResults) recoveryMedian(minutes int) time.Duration {
	var d []time.Duration
	for _, rec := range r.recoveries[minutes] {
		d = append(d, rec.Duration)
	}
	return sbQuantile(d, 0.5)
}

// runSimBench runs the four phases.
func runSimBench(ctx context.Context, opts sbOptions) (*sbResults, error) {
	res := &sbResults{opts: opts, recoveries: map[int][]replay.Recovery{}}
	dir, err := os.MkdirTemp(opts.dir, "broadside-bench-sim-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	store, err := snapshot.OpenPebble(dir, snapshot.PebbleOptions{Logger: opts.log})
	if err != nil {
		return nil, err
	}
	defer store.Close()
	cfg := broadside.DefaultConfig()
	world := newSBWorld(cfg, store, opts)
	if err := world.generate(ctx, res); err != nil {
		return nil, err
	}
	if err := world.measureReplay(ctx, res); err != nil {
		return nil, err
	}
	if err := world.live(ctx, res); err != nil {
		return nil, err
	}
	return res, nil
}

// sbWorld runs the benchmark's world: its log, snapshot store, supervisor
// and bots.
type sbWorldRun struct {
	cfg    broadside.Config
	opts   sbOptions
	store  snapshot.Store
	log    *replay.MemLog
	shards []uint32

	mu      sync.Mutex
	sectors []*broadside.Sector // the current sim of each shard

	// Phase 1 bookkeeping, guarded by mu.
	stepSum   time.Duration
	stepTick  uint64
	captures  []time.Duration
	fullCaps  []time.Duration
	recovered chan replay.Recovery

	// Replay phase: restored sims kept from before the end of generation.
	replayFrom [2][]replay.Restored
	retained   uint64
}

func newSBWorld(cfg broadside.Config, store snapshot.Store, opts sbOptions) *sbWorldRun {
	w := &sbWorldRun{cfg: cfg, opts: opts, store: store, log: replay.NewMemLog(),
		sectors: make([]*broadside.Sector, cfg.Sectors()), recovered: make(chan replay.Recovery, 64)}
	for i := range cfg.Sectors() {
		w.shards = append(w.shards, uint32(i))
	}
	return w
}

func (w *sbWorldRun) shardSpecs() []replay.ShardSpec {
	specs := make([]replay.ShardSpec, len(w.shards))
	for i := range w.shards {
		specs[i] = replay.ShardSpec{Shard: uint32(i), NewSim: func() (replay.TableSim, error) {
			s, err := broadside.NewSector(w.cfg, i)
			if err != nil {
				return nil, err
			}
			w.mu.Lock()
			w.sectors[i] = s
			w.mu.Unlock()
			return s, nil
		}}
	}
	return specs
}

func (w *sbWorldRun) progress(format string, args ...any) {
	fmt.Fprintf(w.opts.prog, "bench sim: "+format+"\n", args...)
}

func (w *sbWorldRun) supervisor(res *sbResults, onTick func(replay.TickInfo)) (*replay.Supervisor, error) {
	return replay.NewSupervisor(replay.SupervisorConfig{
		World: sbWorld, Shards: w.shardSpecs(), Appender: w.log, Store: w.store,
		Policy: snapshot.Policy{RecoveryTarget: w.opts.recoveryTarget},
		Open: func(_ context.Context, _ uint32, from uint64) (replay.Source, error) {
			return w.log.Subscribe(from), nil
		},
		OnTick: onTick,
		OnStored: func(s snapshot.Stored) {
			if s.Err != nil {
				return
			}
			w.mu.Lock()
			if s.Meta.Full {
				res.fullSizes = append(res.fullSizes, float64(s.Meta.StoredBytes))
				res.fullRaw = append(res.fullRaw, float64(s.Meta.RawBytes))
			} else {
				res.deltaSizes = append(res.deltaSizes, float64(s.Meta.StoredBytes))
				res.deltaRaw = append(res.deltaRaw, float64(s.Meta.RawBytes))
			}
			w.mu.Unlock()
		},
		OnRecovery: func(r replay.Recovery) {
			select {
			case w.recovered <- r:
			default:
			}
		},
		OnDivergence: func(d replay.Divergence) {
			w.opts.log.Error("bench sim: replayed hash differs", "shard", d.Shard, "tick", d.Tick)
		},
		LogTail: w.log.CheckTail,
		Logger:  w.opts.log,
	})
}

// tickRecord is TICK(n) as the world's Ticker appends it.
func sbTickRecord(n uint64) (msg.RecordID, []byte) {
	return msg.RecordID{Client: replay.TickerClientID(sbWorld), Seq: n},
		wire.EncodeEnvelope(nil, wire.Envelope{Kind: wire.EnvelopeTick, Tick: n})
}

// generate plays the recording in lockstep and recovers shards at the
// marks (phases 1 and 2).
func (w *sbWorldRun) generate(ctx context.Context, res *sbResults) error {
	perMinute := uint64(60 * broadside.TickRate / w.opts.scale)
	total := uint64(sbMinutes[len(sbMinutes)-1]) * perMinute
	marks := map[uint64]int{}
	for _, m := range sbMinutes {
		marks[uint64(m)*perMinute] = m
	}
	replayStart := total - min(w.opts.replayTicks, total/2)
	res.genTicks, res.replayTicks = total, total-replayStart

	sup, err := w.supervisor(res, func(info replay.TickInfo) {
		w.mu.Lock()
		if info.Tick == w.stepTick {
			w.stepSum += info.Step
		}
		if info.Snapshot != replay.NoSnapshot {
			w.captures = append(w.captures, info.Capture)
			if info.Snapshot == replay.FullSnapshot {
				w.fullCaps = append(w.fullCaps, info.Capture)
			}
		}
		w.mu.Unlock()
	})
	if err != nil {
		return err
	}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- sup.Run(sctx) }()
	defer func() {
		stop()
		<-done
	}()

	fleet := newSBFleet(uint32(w.opts.ships), 1)
	var trimmed uint64
	start := time.Now()
	lastReport := start
	w.progress("generating %d ticks (%.1f simulated minutes) with %d ships", total, float64(total)/float64(60*broadside.TickRate), w.opts.ships)
	for n := uint64(1); n <= total; n++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		w.mu.Lock()
		sectors := slices.Clone(w.sectors)
		w.stepTick, w.stepSum = n, 0
		w.mu.Unlock()
		recs := fleet.records(n, sectors)
		for _, r := range recs {
			if err := w.log.Append(ctx, r); err != nil {
				return err
			}
		}
		id, tick := sbTickRecord(n)
		t0 := time.Now()
		if err := w.log.AppendWithID(ctx, id, tick); err != nil {
			return err
		}
		if err := sup.WaitTick(ctx, n); err != nil {
			return fmt.Errorf("tick %d: %w", n, err)
		}
		res.worldTicks = append(res.worldTicks, time.Since(t0))
		w.mu.Lock()
		res.stepSums = append(res.stepSums, w.stepSum)
		w.mu.Unlock()
		res.records += float64(len(recs) + 1)

		if n == replayStart {
			if err := w.keepReplayStart(ctx); err != nil {
				return err
			}
		}
		if m, ok := marks[n]; ok {
			if err := w.recoverAll(ctx, sup, n, m, res); err != nil {
				return err
			}
		}
		if n%perMinute == 0 {
			var retained []uint64
			if w.retained > 0 {
				retained = []uint64{w.retained}
			}
			if trimmed, err = replay.SafeTrim(ctx, w.log, w.store, w.shards, retained, trimmed, 1); err != nil {
				return err
			}
		}
		if time.Since(lastReport) > 5*time.Second {
			lastReport = time.Now()
			w.progress("tick %d/%d (%.0f%%), %.0f ticks/s, log trimmed to %d", n, total, 100*float64(n)/float64(total),
				float64(n)/time.Since(start).Seconds(), trimmed)
		}
	}
	res.genWall = time.Since(start)
	res.records /= float64(total)
	w.mu.Lock()
	res.captures, res.fullCaps = w.captures, w.fullCaps
	for _, s := range w.sectors {
		res.ships += s.ShipCount()
		res.balls += s.BallCount()
	}
	w.mu.Unlock()
	for _, s := range w.shards {
		if st, ok := sup.Stats(s); ok {
			res.skipped += st.SkippedCaptures
		}
	}
	return nil
}

// recoverAll kills each shard in turn at tick n (the world is paused in
// lockstep) and waits until the supervisor has it live again.
func (w *sbWorldRun) recoverAll(ctx context.Context, sup *replay.Supervisor, n uint64, minutes int, res *sbResults) error {
	for len(w.recovered) > 0 {
		<-w.recovered
	}
	for _, s := range w.shards {
		if !sup.Kill(s) {
			return fmt.Errorf("kill shard %d at tick %d: no runner", s, n)
		}
		select {
		case r := <-w.recovered:
			if r.Err != nil || r.Mismatched != 0 {
				return fmt.Errorf("recovery of shard %d at tick %d: %+v", s, n, r)
			}
			res.recoveries[minutes] = append(res.recoveries[minutes], r)
		case <-time.After(time.Minute):
			return fmt.Errorf("shard %d not recovered within a minute", s)
		case <-ctx.Done():
			return ctx.Err()
		}
		if err := sup.WaitTick(ctx, n); err != nil {
			return err
		}
		r := res.recoveries[minutes][len(res.recoveries[minutes])-1]
		from := "the log's start"
		if r.Snapshot != nil {
			from = fmt.Sprintf("tick %d (chain of %d, %s raw)", r.Snapshot.Tick, r.Load.Chain, sbBytes(float64(r.Load.RawBytes)))
		}
		w.progress("  shard %d: live again in %.1f ms: restored %s in %.1f ms, replayed %d ticks, %d hashes checked",
			s, sbMs(r.Duration), from, sbMs(r.Load.Read+r.Load.Restore), r.Replayed, r.Checked)
	}
	rs := res.recoveries[minutes]
	w.progress("recovery after %d simulated minute(s) (tick %d): median %.1f ms over %d shards (from snapshots %d ticks back on average)",
		minutes*1, n, sbMs(res.recoveryMedian(minutes)), len(rs), sbAvgReplayed(rs))
	return nil
}

func sbAvgReplayed(rs []replay.Recovery) uint64 {
	if len(rs) == 0 {
		return 0
	}
	var t uint64
	for _, r := range rs {
		t += r.Replayed
	}
	return t / uint64(len(rs))
}

// keepReplayStart restores, from the snapshots, two copies of every shard
// near the current tick, for the replay measurement at the end, and keeps
// the log from there.
func (w *sbWorldRun) keepReplayStart(ctx context.Context) error {
	for k := range w.replayFrom {
		w.replayFrom[k] = nil
		for i := range w.shards {
			r, err := replay.RestoreShard(ctx, w.store, nil, uint32(i), func() (replay.TableSim, error) { return broadside.NewSector(w.cfg, i) })
			if err != nil {
				return err
			}
			w.replayFrom[k] = append(w.replayFrom[k], r)
			if pos := r.Start.Pos + 1; w.retained == 0 || pos < w.retained {
				w.retained = pos
			}
		}
	}
	return nil
}

// measureReplay replays the end of the recording from the kept snapshots:
// each shard alone, then the four in parallel (phase 3).
func (w *sbWorldRun) measureReplay(ctx context.Context, res *sbResults) error {
	end := res.genTicks
	entries := w.log.Entries(w.retained)
	w.progress("replaying up to %d ticks of the recording: each shard alone, then the world in parallel", res.replayTicks)
	run := func(r replay.Restored, shard int) (*replay.Runner, error) {
		return replay.NewRunner(replay.RunnerConfig{World: sbWorld, Shard: uint32(shard), Sim: r.Sim,
			Source: replay.NewSliceSource(entries, r.Start.Pos+1), Start: r.Start, Logger: w.opts.log})
	}
	for i, r := range w.replayFrom[0] {
		runner, err := run(r, i)
		if err != nil {
			return err
		}
		t0 := time.Now()
		if err := runner.RunUntil(ctx, end); err != nil {
			return fmt.Errorf("replay shard %d: %w", i, err)
		}
		res.shardReplay = append(res.shardReplay, time.Since(t0))
		res.replayedTicks = append(res.replayedTicks, end-r.Start.Tick)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(w.replayFrom[1]))
	first := end
	t0 := time.Now()
	for i, r := range w.replayFrom[1] {
		first = min(first, r.Start.Tick)
		runner, err := run(r, i)
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = runner.RunUntil(ctx, end)
		}()
	}
	wg.Wait()
	res.worldReplay = time.Since(t0)
	res.replayTicks = end - first
	w.replayFrom = [2][]replay.Restored{}
	return errors.Join(errs...)
}

// sbTimedLog is the world's log with the time each tick marker was
// appended, for the live tick latency.
type sbTimedLog struct {
	*replay.MemLog
	mu sync.Mutex
	at map[uint64]time.Time
}

func (l *sbTimedLog) AppendWithID(ctx context.Context, id msg.RecordID, data []byte) error {
	if id.Client == replay.TickerClientID(sbWorld) {
		l.mu.Lock()
		l.at[id.Seq] = time.Now()
		l.mu.Unlock()
	}
	return l.MemLog.AppendWithID(ctx, id, data)
}

func (l *sbTimedLog) appended(tick uint64) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.at[tick]
	return t, ok
}

// live restarts the world on a new supervisor (every shard recovers from
// its snapshots), runs it in real time and measures the healthy shards'
// tick latency without, then with, recoveries of shard 0 (phase 4).
func (w *sbWorldRun) live(ctx context.Context, res *sbResults) error {
	tl := &sbTimedLog{MemLog: w.log, at: map[uint64]time.Time{}}
	const (
		quiet = iota + 1
		recovering
	)
	var (
		mu       sync.Mutex
		phase    int
		during   bool // shard 0 is recovering
		inWindow func(replay.TickInfo, time.Duration)
	)
	inWindow = func(info replay.TickInfo, lat time.Duration) {
		switch phase {
		case quiet:
			res.liveQuiet = append(res.liveQuiet, lat)
			res.liveStepQuiet = append(res.liveStepQuiet, info.Step)
		case recovering:
			res.liveRecover = append(res.liveRecover, lat)
			res.liveStepRecover = append(res.liveStepRecover, info.Step)
			if during {
				res.liveDuring = append(res.liveDuring, lat)
			}
		}
	}
	sup, err := w.supervisor(res, func(info replay.TickInfo) {
		if info.Shard == 0 {
			return
		}
		at, ok := tl.appended(info.Tick)
		if !ok {
			return
		}
		lat := time.Since(at)
		mu.Lock()
		inWindow(info, lat)
		mu.Unlock()
	})
	if err != nil {
		return err
	}
	sctx, stopSup := context.WithCancel(ctx)
	supDone := make(chan error, 1)
	go func() { supDone <- sup.Run(sctx) }()
	defer func() {
		stopSup()
		<-supDone
	}()

	// Real-time ticks and scripted bots (they cannot look at the sectors
	// while the runners step them).
	tctx, stopTicks := context.WithCancel(ctx)
	defer stopTicks()
	ticks := make(chan uint64, 64)
	ticker, err := replay.NewTicker(replay.TickerConfig{World: sbWorld, Log: tl, Rate: broadside.TickRate,
		OnTick: func(n uint64, _ time.Time) {
			select {
			case ticks <- n:
			default:
			}
		}})
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		_ = ticker.Run(tctx)
	}()
	go func() {
		defer wg.Done()
		bots := newSBScript(uint32(w.opts.ships), 2)
		for {
			select {
			case n := <-ticks:
				for _, r := range bots.records(n + 1) {
					_ = tl.Append(tctx, r)
				}
			case <-tctx.Done():
				return
			}
		}
	}()
	defer func() {
		stopTicks()
		wg.Wait()
	}()

	sleep := func(d time.Duration) error {
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	slots := int(2 * w.opts.window / time.Second)
	w.progress("live at 30 ticks/s: restart and settle, then %d one-second slots alternating without and with a recovery of shard 0", slots)
	if err := sleep(3 * time.Second); err != nil {
		return err
	}
	for len(w.recovered) > 0 {
		<-w.recovered
	}
	// Alternate quiet slots and slots that start with a kill, so that
	// the load of the machine (other processes, GC) weighs on both alike.
	for slot := range slots {
		next := time.Now().Add(time.Second)
		mu.Lock()
		phase = quiet
		if slot%2 == 1 {
			phase, during = recovering, true
		}
		mu.Unlock()
		if slot%2 == 1 {
			sup.Kill(0)
			select {
			case r := <-w.recovered:
				if r.Err == nil {
					res.liveRecoveries = append(res.liveRecoveries, r)
				}
			case <-time.After(10 * time.Second):
				return errors.New("live: shard 0 not recovered within 10 s")
			case <-ctx.Done():
				return ctx.Err()
			}
			mu.Lock()
			during = false
			mu.Unlock()
		}
		if err := sleep(time.Until(next)); err != nil {
			return err
		}
	}
	mu.Lock()
	phase = 0
	mu.Unlock()
	return nil
}

// sbFleet plays the bots of the generation phase: they look at the world
// between ticks (the runners are idle then, in lockstep), steer toward the
// nearest enemy with broadside.BotCommand and fire on a schedule, enough to
// keep about 10,000 cannonballs in the air with 1,000 ships.
type sbFleet struct {
	fleet   *broadside.Fleet
	players uint32
	seq     uint64
	views   []broadside.ShipView
}

func newSBFleet(players uint32, seed uint64) *sbFleet {
	return &sbFleet{fleet: broadside.NewFleet(seed, true), players: players}
}

func sbCommand(player uint32, seq uint64, c broadside.PlayerCommand) []byte {
	payload, err := broadside.EncodeCommand(c)
	if err != nil {
		panic(err) // the fleet only builds valid commands
	}
	return wire.EncodeEnvelope(nil, wire.Envelope{Kind: wire.EnvelopePlayerCommand, Player: player, ClientSeq: seq, Payload: payload})
}

// records returns the envelopes the fleet sends before TICK(tick).
func (f *sbFleet) records(tick uint64, sectors []*broadside.Sector) [][]byte {
	var out [][]byte
	emit := func(p uint32, c broadside.PlayerCommand) {
		f.seq++
		out = append(out, sbCommand(p, f.seq, c))
	}
	if tick == 1 {
		for p := uint32(1); p <= f.players; p++ {
			emit(p, broadside.Join())
		}
		return out
	}
	f.views = f.views[:0]
	for _, s := range sectors {
		if s != nil {
			s.Ships(func(v broadside.ShipView) { f.views = append(f.views, v) })
		}
	}
	f.fleet.Act(tick, f.views, emit)
	return out
}

// sbScript plays bots without looking at the world (for the live phase,
// where the sectors are being stepped): random orders and broadsides on a
// schedule.
type sbScript struct {
	rng     *rand.Rand
	players uint32
	seq     uint64
}

func newSBScript(players uint32, seed uint64) *sbScript {
	return &sbScript{rng: rand.New(rand.NewPCG(seed, 11)), players: players}
}

func (b *sbScript) records(tick uint64) [][]byte {
	var out [][]byte
	emit := func(p uint32, c broadside.PlayerCommand) {
		b.seq++
		out = append(out, sbCommand(p, b.seq, c))
	}
	for p := uint32(1); p <= b.players; p++ {
		switch phase := (tick + uint64(p)) % 80; {
		case phase == 0:
			emit(p, broadside.Fire(broadside.Port))
		case phase == 40:
			emit(p, broadside.Fire(broadside.Starboard))
		case b.rng.IntN(10) == 0:
			emit(p, broadside.Rudder(int8(b.rng.IntN(201)-100)))
		case b.rng.IntN(50) == 0:
			emit(p, broadside.Throttle(int8(40+b.rng.IntN(61))))
		}
	}
	return out
}

// writeTable prints the results.
func (r *sbResults) writeTable(out io.Writer) {
	j := r.json()
	tw := tabwriter.NewWriter(out, 2, 8, 2, ' ', 0)
	defer tw.Flush()
	o := r.opts
	fmt.Fprintf(tw, "world\t%d ships, %d cannonballs at the end, 2 x 2 sectors, %.0f log records per tick\t\n", r.ships, r.balls, r.records)
	fmt.Fprintf(tw, "generation\t%d ticks (%.1f simulated min) in %v\t\n", r.genTicks, float64(r.genTicks)/(60*broadside.TickRate), r.genWall.Round(time.Millisecond))
	fmt.Fprintf(tw, "world tick (lockstep, 4 shards in parallel)\tp50 %.0f µs, p99 %.0f µs -> %.0f ticks/s (%.0fx the 30 Hz target)\t\n",
		sbUs(sbQuantile(r.worldTicks, 0.5)), sbUs(sbQuantile(r.worldTicks, 0.99)), j.TicksPerSec, j.TicksPerSec/broadside.TickRate)
	fmt.Fprintf(tw, "world tick CPU (4 steps summed)\tp50 %.0f µs, p99 %.0f µs -> %.0f ticks/s on one core\t\n",
		sbUs(sbQuantile(r.stepSums, 0.5)), sbUs(sbQuantile(r.stepSums, 0.99)), sbPerSec(sbQuantile(r.stepSums, 0.5)))
	fmt.Fprintf(tw, "capture pause (per shard)\tp50 %.1f µs, p99 %.1f µs, max %.1f µs over %d captures (%d full: p99 %.1f µs); %d skipped (writer busy)\t\n",
		sbUs(sbQuantile(r.captures, 0.5)), sbUs(sbQuantile(r.captures, 0.99)), sbUs(sbQuantile(r.captures, 1)), len(r.captures),
		len(r.fullCaps), sbUs(sbQuantile(r.fullCaps, 0.99)), r.skipped)
	ratio := 0.0
	if j.SnapshotFullBytes > 0 {
		ratio = 100 * j.SnapshotIncrementalBytes / j.SnapshotFullBytes
	}
	fmt.Fprintf(tw, "snapshot size (per shard, median)\tfull %s (raw %s), incremental %s (raw %s) = %.1f%% of full; %d full, %d incremental\t\n",
		sbBytes(j.SnapshotFullBytes), sbBytes(sbMedian(r.fullRaw)), sbBytes(j.SnapshotIncrementalBytes), sbBytes(sbMedian(r.deltaRaw)), ratio,
		len(r.fullSizes), len(r.deltaSizes))
	var alone []float64
	for i, d := range r.shardReplay {
		alone = append(alone, float64(r.replayedTicks[i])/d.Seconds()/broadside.TickRate)
	}
	fmt.Fprintf(tw, "replay (x real time)\twhole world in parallel %.0fx (%d ticks); one shard alone: median %.0fx, min %.0fx\t\n",
		j.ReplaySpeedup, r.replayTicks, sbMedian(alone), sbMin(alone))
	for _, m := range sbMinutes {
		rs := r.recoveries[m]
		var ds []time.Duration
		var replayed, restore []float64
		for _, rec := range rs {
			ds = append(ds, rec.Duration)
			replayed = append(replayed, float64(rec.Replayed))
			restore = append(restore, sbMs(rec.Load.Read+rec.Load.Restore))
		}
		fmt.Fprintf(tw, "recovery, %g min recording (key %q)\tmedian %.1f ms, max %.1f ms over %d kills; restore median %.1f ms, replayed median %.0f ticks\t\n",
			float64(m)/float64(o.scale), fmt.Sprint(m), sbMs(sbQuantile(ds, 0.5)), sbMs(sbQuantile(ds, 1)), len(rs), sbMedian(restore), sbMedian(replayed))
	}
	var liveRec []time.Duration
	for _, rec := range r.liveRecoveries {
		liveRec = append(liveRec, rec.Duration)
	}
	fmt.Fprintf(tw, "live recoveries of shard 0\t%d, median %.1f ms, max %.1f ms\t\n", len(liveRec), sbMs(sbQuantile(liveRec, 0.5)), sbMs(sbQuantile(liveRec, 1)))
	fmt.Fprintf(tw, "healthy shards' tick latency, quiet slots\tp50 %.0f µs, p99 %.0f µs, max %.0f µs (%d ticks); step p99 %.0f µs\t\n",
		sbUs(sbQuantile(r.liveQuiet, 0.5)), sbUs(sbQuantile(r.liveQuiet, 0.99)), sbUs(sbQuantile(r.liveQuiet, 1)), len(r.liveQuiet), sbUs(sbQuantile(r.liveStepQuiet, 0.99)))
	fmt.Fprintf(tw, "healthy shards' tick latency, slots with a recovery\tp50 %.0f µs, p99 %.0f µs, max %.0f µs (%d ticks; %d during a recovery, p99 %.0f µs); step p99 %.0f µs\t\n",
		sbUs(sbQuantile(r.liveRecover, 0.5)), sbUs(sbQuantile(r.liveRecover, 0.99)), sbUs(sbQuantile(r.liveRecover, 1)), len(r.liveRecover),
		len(r.liveDuring), sbUs(sbQuantile(r.liveDuring, 0.99)), sbUs(sbQuantile(r.liveStepRecover, 0.99)))
	fmt.Fprintf(tw, "healthy tick p99 ratio (with / without recovery)\t%.3f\t\n", j.HealthyTickP99Ratio)
}

// writePNG draws recovery time against recording length and the healthy
// shards' tick latency percentiles without and with recoveries.
func (r *sbResults) writePNG(path string) error {
	rec := plot.New()
	rec.Title.Text = "Recovery time (kill to live) vs recording length"
	rec.X.Label.Text = "recording length (simulated minutes)"
	rec.Y.Label.Text = "ms (median of 4 shards; dashed: target)"
	vals := plotter.Values{}
	names := []string{}
	for _, m := range sbMinutes {
		vals = append(vals, sbMs(r.recoveryMedian(m)))
		names = append(names, fmt.Sprintf("%g", float64(m)/float64(r.opts.scale)))
	}
	bars, err := plotter.NewBarChart(vals, vg.Points(40))
	if err != nil {
		return err
	}
	bars.Color = plotutil.Color(0)
	rec.Add(bars, plotter.NewGrid())
	rec.NominalX(names...)
	target, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: sbMs(r.opts.recoveryTarget)}, {X: float64(len(vals)) - 0.5, Y: sbMs(r.opts.recoveryTarget)}})
	if err != nil {
		return err
	}
	target.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
	rec.Add(target)

	lat := plot.New()
	lat.Title.Text = "Healthy shards' tick latency (TICK appended to shard stepped)"
	lat.X.Label.Text = "percentile"
	lat.Y.Label.Text = "ms"
	lat.Legend.Top, lat.Legend.Left = true, true
	lat.Legend.YOffs = -vg.Millimeter * 3
	qs := []float64{0.5, 0.9, 0.99, 0.999, 1}
	qnames := []string{"p50", "p90", "p99", "p99.9", "max"}
	for k, series := range []struct {
		name string
		d    []time.Duration
	}{{"quiet slots", r.liveQuiet}, {"slots starting with a recovery of shard 0", r.liveRecover}} {
		var xys plotter.XYs
		for i, q := range qs {
			xys = append(xys, plotter.XY{X: float64(i), Y: sbMs(sbQuantile(series.d, q))})
		}
		l, pts, err := plotter.NewLinePoints(xys)
		if err != nil {
			return err
		}
		l.Color, pts.Color = plotutil.Color(k), plotutil.Color(k)
		pts.Shape = plotutil.Shape(k)
		lat.Add(l, pts)
		lat.Legend.Add(series.name, l, pts)
	}
	lat.Add(plotter.NewGrid())
	lat.NominalX(qnames...)

	const w, h = 7 * vg.Inch, 5 * vg.Inch
	img := vgimg.New(2*w, h)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	row := []*plot.Plot{rec, lat}
	canvases := plot.Align([][]*plot.Plot{row}, tiles, dc)
	for i, p := range row {
		p.Draw(canvases[0][i])
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Small statistics helpers (exact quantiles of sorted copies).

func sbQuantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func sbMedian(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

func sbMin(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	return slices.Min(v)
}

func sbSum(d []time.Duration) time.Duration {
	var t time.Duration
	for _, x := range d {
		t += x
	}
	return t
}

func sbUs(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
func sbMs(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

func sbPerSec(d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return 1 / d.Seconds()
}

func sbRound1(v float64) float64 { return math.Round(v*10) / 10 }

func sbBytes(b float64) string {
	switch {
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", b/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", b/(1<<10))
	}
	return fmt.Sprintf("%.0f B", b)
}
