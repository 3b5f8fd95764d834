package gamebench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"runtime"
	"slices"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/internal/report"
	"github.com/anoptic/broadside/netcode/wire"
	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/snapshot"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// SimConfig configures RunSim (`broadside bench sim`). The zero value of
// every field but Ships and RecoveryTarget is a default.
type SimConfig struct {
	// Quick divides the recording lengths by 20 and shortens the live
	// phase (under a minute on 2 cores).
	Quick bool
	// Ships is the number of bot ships, 2 to 4000.
	Ships int
	// RecoveryTarget is the recovery time target of the snapshot policy.
	RecoveryTarget time.Duration
	// Dir is the parent of the snapshot store's temporary directory (""
	// for the system's temporary directory).
	Dir string
	// PNGPath, if set, receives the recovery and tick latency charts as a
	// PNG.
	PNGPath string
	// ReplayProfile, if set, receives a CPU profile of the whole world's
	// replay (phase 3, the four shards in parallel) for go tool pprof.
	ReplayProfile string
	Output
}

// RunSim benchmarks the simulation shards (generation, recovery, replay
// and live phases) and writes the table to out, and the JSON and PNG files
// the config names.
func RunSim(ctx context.Context, cfg SimConfig, out io.Writer) error {
	if cfg.Ships < 2 || cfg.Ships > 4000 {
		return fmt.Errorf("--ships %d out of range [2, 4000]", cfg.Ships)
	}
	cfg.Output = cfg.Output.withDefaults()
	opts := simOptions{ships: cfg.Ships, recoveryTarget: cfg.RecoveryTarget, dir: cfg.Dir,
		log: cfg.Logger, prog: cfg.Progress, replayProfile: cfg.ReplayProfile}
	opts.scale, opts.replayTicks, opts.window = 1, 3000, 15*time.Second
	if cfg.Quick {
		opts.scale, opts.replayTicks, opts.window = 20, 900, 5*time.Second
	}
	res, err := runSimBench(ctx, opts)
	if err != nil {
		return err
	}
	res.writeTable(out)
	if err := cfg.writeJSON(res.json()); err != nil {
		return err
	}
	if cfg.PNGPath != "" {
		if err := res.writePNG(cfg.PNGPath); err != nil {
			return fmt.Errorf("--png: %w", err)
		}
	}
	return nil
}

// simOptions are the benchmark's settings, with the phases' lengths.
type simOptions struct {
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
	// replayProfile is the path of the world replay's CPU profile ("":
	// none).
	replayProfile string
}

// simJSON is the machine-readable result (the keys are part of the
// interface: docs/benchmarks.md and issue 4 refer to them).
type simJSON struct {
	TicksPerSec              float64            `json:"ticks_per_sec"`
	CapturePauseP99Us        float64            `json:"capture_pause_p99_us"`
	SnapshotFullBytes        float64            `json:"snapshot_full_bytes"`
	SnapshotIncrementalBytes float64            `json:"snapshot_incremental_bytes"`
	ReplaySpeedup            float64            `json:"replay_speedup"`
	RecoveryMs               map[string]float64 `json:"recovery_ms"`
	HealthyTickP99Ratio      float64            `json:"healthy_tick_p99_ratio"`
}

// simWorldID is the world id of the benchmark.
const simWorldID = 1

// simMinutes are the recording lengths of the recovery measurement.
var simMinutes = []int{1, 10, 60}

// simResults collects the measurements.
type simResults struct {
	opts simOptions

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
	worldCPU      time.Duration   // the process's CPU time during worldReplay
	replayedTicks []uint64        // per shard

	// live
	liveQuiet, liveRecover []time.Duration // healthy shards' tick latency
	liveDuring             []time.Duration // the part of liveRecover during a recovery
	liveRecoveries         []replay.Recovery
	liveStepQuiet          []time.Duration
	liveStepRecover        []time.Duration
}

func (r *simResults) json() simJSON {
	out := simJSON{RecoveryMs: map[string]float64{}}
	if s := sum(r.worldTicks); s > 0 {
		out.TicksPerSec = round1(float64(len(r.worldTicks)) / s.Seconds())
	}
	out.CapturePauseP99Us = round1(report.Us(report.Quantile(r.captures, 0.99)))
	out.SnapshotFullBytes = math.Round(report.ValueQuantile(r.fullSizes, 0.5, 1))
	out.SnapshotIncrementalBytes = math.Round(report.ValueQuantile(r.deltaSizes, 0.5, 1))
	out.ReplaySpeedup = round1(r.worldSpeedup())
	for _, m := range simMinutes {
		out.RecoveryMs[fmt.Sprint(m)] = round1(report.Ms(r.recoveryMedian(m)))
	}
	if q := report.Quantile(r.liveQuiet, 0.99); q > 0 {
		out.HealthyTickP99Ratio = math.Round(1000*float64(report.Quantile(r.liveRecover, 0.99))/float64(q)) / 1000
	}
	return out
}

func (r *simResults) worldSpeedup() float64 {
	if r.worldReplay <= 0 {
		return 0
	}
	return float64(r.replayTicks) / r.worldReplay.Seconds() / broadside.TickRate
}

func (r *simResults) recoveryMedian(minutes int) time.Duration {
	var d []time.Duration
	for _, rec := range r.recoveries[minutes] {
		d = append(d, rec.Duration)
	}
	return report.Quantile(d, 0.5)
}

// runSimBench runs the four phases.
func runSimBench(ctx context.Context, opts simOptions) (*simResults, error) {
	res := &simResults{opts: opts, recoveries: map[int][]replay.Recovery{}}
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
	world := newSimWorld(cfg, store, opts)
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

// simWorld runs the benchmark's world: its log, snapshot store, supervisor
// and bots.
type simWorld struct {
	cfg    broadside.Config
	opts   simOptions
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

func newSimWorld(cfg broadside.Config, store snapshot.Store, opts simOptions) *simWorld {
	w := &simWorld{cfg: cfg, opts: opts, store: store, log: replay.NewMemLog(),
		sectors: make([]*broadside.Sector, cfg.Sectors()), recovered: make(chan replay.Recovery, 64)}
	for i := range cfg.Sectors() {
		w.shards = append(w.shards, uint32(i))
	}
	return w
}

func (w *simWorld) shardSpecs() []replay.ShardSpec {
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

func (w *simWorld) progress(format string, args ...any) {
	fmt.Fprintf(w.opts.prog, "bench sim: "+format+"\n", args...)
}

func (w *simWorld) supervisor(res *simResults, onTick func(replay.TickInfo)) (*replay.Supervisor, error) {
	return replay.NewSupervisor(replay.SupervisorConfig{
		World: simWorldID, Shards: w.shardSpecs(), Appender: w.log, Store: w.store,
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

// simTickRecord is TICK(n) as the world's Ticker appends it.
func simTickRecord(n uint64) (msg.RecordID, []byte) {
	return msg.RecordID{Client: replay.TickerClientID(simWorldID), Seq: n},
		wire.EncodeEnvelope(nil, wire.Envelope{Kind: wire.EnvelopeTick, Tick: n})
}

// generate plays the recording in lockstep and recovers shards at the
// marks (phases 1 and 2).
func (w *simWorld) generate(ctx context.Context, res *simResults) error {
	perMinute := uint64(60 * broadside.TickRate / w.opts.scale)
	total := uint64(simMinutes[len(simMinutes)-1]) * perMinute
	marks := map[uint64]int{}
	for _, m := range simMinutes {
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

	fleet := newBotFleet(uint32(w.opts.ships), 1)
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
		id, tick := simTickRecord(n)
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
func (w *simWorld) recoverAll(ctx context.Context, sup *replay.Supervisor, n uint64, minutes int, res *simResults) error {
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
			from = fmt.Sprintf("tick %d (chain of %d, %s raw)", r.Snapshot.Tick, r.Load.Chain, report.Bytes(float64(r.Load.RawBytes)))
		}
		w.progress("  shard %d: live again in %.1f ms: restored %s in %.1f ms, replayed %d ticks, %d hashes checked",
			s, report.Ms(r.Duration), from, report.Ms(r.Load.Read+r.Load.Restore), r.Replayed, r.Checked)
	}
	rs := res.recoveries[minutes]
	w.progress("recovery after %d simulated minute(s) (tick %d): median %.1f ms over %d shards (from snapshots %d ticks back on average)",
		minutes*1, n, report.Ms(res.recoveryMedian(minutes)), len(rs), avgReplayed(rs))
	return nil
}

func avgReplayed(rs []replay.Recovery) uint64 {
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
func (w *simWorld) keepReplayStart(ctx context.Context) error {
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
func (w *simWorld) measureReplay(ctx context.Context, res *simResults) error {
	end := res.genTicks
	entries := w.log.Entries(w.retained)
	w.progress("replaying up to %d ticks of the recording: each shard alone, then the world in parallel", res.replayTicks)
	// The shards of one replay share the entries' verification: each
	// envelope is verified once, not once per shard.
	var shared *replay.VerifiedEntries
	run := func(r replay.Restored, shard int) (*replay.Runner, error) {
		return replay.NewRunner(replay.RunnerConfig{World: simWorldID, Shard: uint32(shard), Sim: r.Sim,
			Source: shared.Source(r.Start.Pos + 1), Start: r.Start, Logger: w.opts.log})
	}
	for i, r := range w.replayFrom[0] {
		shared = replay.NewVerifiedEntries(entries)
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
	first := end
	if w.opts.replayProfile != "" {
		stop, err := report.CPUProfileToFile(w.opts.replayProfile)
		if err != nil {
			return fmt.Errorf("replay profile: %w", err)
		}
		defer stop()
	}
	// The world's shards replay on GOMAXPROCS workers, each taking the
	// shard furthest behind for a chunk of ticks (replay.RunParallel).
	t0, c0 := time.Now(), report.ProcessCPU()
	shared = replay.NewVerifiedEntries(entries)
	runners := make([]*replay.Runner, 0, len(w.replayFrom[1]))
	for i, r := range w.replayFrom[1] {
		first = min(first, r.Start.Tick)
		runner, err := run(r, i)
		if err != nil {
			return err
		}
		runners = append(runners, runner)
	}
	err := replay.RunParallel(ctx, runners, end, runtime.GOMAXPROCS(0), 0)
	res.worldReplay, res.worldCPU = time.Since(t0), report.ProcessCPU()-c0
	res.replayTicks = end - first
	w.replayFrom = [2][]replay.Restored{}
	return err
}

// timedLog is the world's log with the time each tick marker was
// appended, for the live tick latency.
type timedLog struct {
	*replay.MemLog
	mu sync.Mutex
	at map[uint64]time.Time
}

func (l *timedLog) AppendWithID(ctx context.Context, id msg.RecordID, data []byte) error {
	if id.Client == replay.TickerClientID(simWorldID) {
		l.mu.Lock()
		l.at[id.Seq] = time.Now()
		l.mu.Unlock()
	}
	return l.MemLog.AppendWithID(ctx, id, data)
}

// AppendWithIDAsync is the Ticker's path (replay.AsyncAppender): without
// it the embedded MemLog's would be promoted and no marker timed.
func (l *timedLog) AppendWithIDAsync(ctx context.Context, id msg.RecordID, data []byte, done func(error)) error {
	done(l.AppendWithID(ctx, id, data))
	return nil
}

func (l *timedLog) appended(tick uint64) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.at[tick]
	return t, ok
}

// Phases of the live measurement.
const (
	liveIdle = iota
	liveQuiet
	liveRecovering
)

// liveSlots files the healthy shards' tick latencies by the slot they
// fall in.
type liveSlots struct {
	res    *simResults
	mu     sync.Mutex
	phase  int
	during bool // shard 0 is recovering
}

func (l *liveSlots) set(phase int, during bool) {
	l.mu.Lock()
	l.phase, l.during = phase, during
	l.mu.Unlock()
}

func (l *liveSlots) record(info replay.TickInfo, lat time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	res := l.res
	switch l.phase {
	case liveQuiet:
		res.liveQuiet = append(res.liveQuiet, lat)
		res.liveStepQuiet = append(res.liveStepQuiet, info.Step)
	case liveRecovering:
		res.liveRecover = append(res.liveRecover, lat)
		res.liveStepRecover = append(res.liveStepRecover, info.Step)
		if l.during {
			res.liveDuring = append(res.liveDuring, lat)
		}
	}
}

// live restarts the world on a new supervisor (every shard recovers from
// its snapshots), runs it in real time and measures the healthy shards'
// tick latency without, then with, recoveries of shard 0 (phase 4).
func (w *simWorld) live(ctx context.Context, res *simResults) error {
	tl := &timedLog{MemLog: w.log, at: map[uint64]time.Time{}}
	slots := &liveSlots{res: res}
	sup, err := w.supervisor(res, func(info replay.TickInfo) {
		if info.Shard == 0 {
			return
		}
		if at, ok := tl.appended(info.Tick); ok {
			slots.record(info, time.Since(at))
		}
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
	stopLoad, err := w.startLiveLoad(ctx, tl)
	if err != nil {
		return err
	}
	defer stopLoad()
	if err := w.runSlots(ctx, sup, slots); err != nil {
		return err
	}
	slots.mu.Lock()
	defer slots.mu.Unlock()
	if len(res.liveQuiet) == 0 || len(res.liveRecover) == 0 {
		return fmt.Errorf("live: no healthy shard's tick was timed (%d in quiet slots, %d in slots with a recovery): the tick markers' append times were not seen", len(res.liveQuiet), len(res.liveRecover))
	}
	return nil
}

// startLiveLoad starts real-time ticks and scripted bots (they cannot
// look at the sectors while the runners step them) on tl; stop stops them.
func (w *simWorld) startLiveLoad(ctx context.Context, tl *timedLog) (stop func(), err error) {
	tctx, stopTicks := context.WithCancel(ctx)
	ticks := make(chan uint64, 64)
	ticker, err := replay.NewTicker(replay.TickerConfig{World: simWorldID, Log: tl, Rate: broadside.TickRate,
		OnTick: func(n uint64, _ time.Time) {
			select {
			case ticks <- n:
			default:
			}
		}})
	if err != nil {
		stopTicks()
		return nil, err
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		_ = ticker.Run(tctx)
	}()
	go func() {
		defer wg.Done()
		bots := newScriptedBots(uint32(w.opts.ships), 2)
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
	return func() {
		stopTicks()
		wg.Wait()
	}, nil
}

// runSlots lets the restarted world settle, then alternates quiet slots
// and slots that start with a kill of shard 0, so that the load of the
// machine (other processes, GC) weighs on both alike.
func (w *simWorld) runSlots(ctx context.Context, sup *replay.Supervisor, slots *liveSlots) error {
	sleep := func(d time.Duration) error {
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	n := int(2 * w.opts.window / time.Second)
	w.progress("live at 30 ticks/s: restart and settle, then %d one-second slots alternating without and with a recovery of shard 0", n)
	if err := sleep(3 * time.Second); err != nil {
		return err
	}
	for len(w.recovered) > 0 {
		<-w.recovered
	}
	defer slots.set(liveIdle, false)
	for slot := range n {
		next := time.Now().Add(time.Second)
		if slot%2 == 0 {
			slots.set(liveQuiet, false)
		} else {
			slots.set(liveRecovering, true)
			sup.Kill(0)
			select {
			case r := <-w.recovered:
				if r.Err == nil {
					slots.res.liveRecoveries = append(slots.res.liveRecoveries, r)
				}
			case <-time.After(10 * time.Second):
				return errors.New("live: shard 0 not recovered within 10 s")
			case <-ctx.Done():
				return ctx.Err()
			}
			slots.set(liveRecovering, false)
		}
		if err := sleep(time.Until(next)); err != nil {
			return err
		}
	}
	return nil
}

// writeTable prints the results.
func (r *simResults) writeTable(out io.Writer) {
	j := r.json()
	tw := tabwriter.NewWriter(out, 2, 8, 2, ' ', 0)
	defer tw.Flush()
	o := r.opts
	fmt.Fprintf(tw, "world\t%d ships, %d cannonballs at the end, 2 x 2 sectors, %.0f log records per tick\t\n", r.ships, r.balls, r.records)
	fmt.Fprintf(tw, "generation\t%d ticks (%.1f simulated min) in %v\t\n", r.genTicks, float64(r.genTicks)/(60*broadside.TickRate), r.genWall.Round(time.Millisecond))
	fmt.Fprintf(tw, "world tick (lockstep, 4 shards in parallel)\tp50 %.0f µs, p99 %.0f µs -> %.0f ticks/s (%.0fx the 30 Hz target)\t\n",
		report.Us(report.Quantile(r.worldTicks, 0.5)), report.Us(report.Quantile(r.worldTicks, 0.99)), j.TicksPerSec, j.TicksPerSec/broadside.TickRate)
	fmt.Fprintf(tw, "world tick CPU (4 steps summed)\tp50 %.0f µs, p99 %.0f µs -> %.0f ticks/s on one core\t\n",
		report.Us(report.Quantile(r.stepSums, 0.5)), report.Us(report.Quantile(r.stepSums, 0.99)), perSec(report.Quantile(r.stepSums, 0.5)))
	fmt.Fprintf(tw, "capture pause (per shard)\tp50 %.1f µs, p99 %.1f µs, max %.1f µs over %d captures (%d full: p99 %.1f µs); %d skipped (writer busy)\t\n",
		report.Us(report.Quantile(r.captures, 0.5)), report.Us(report.Quantile(r.captures, 0.99)), report.Us(report.Quantile(r.captures, 1)), len(r.captures),
		len(r.fullCaps), report.Us(report.Quantile(r.fullCaps, 0.99)), r.skipped)
	ratio := 0.0
	if j.SnapshotFullBytes > 0 {
		ratio = 100 * j.SnapshotIncrementalBytes / j.SnapshotFullBytes
	}
	fmt.Fprintf(tw, "snapshot size (per shard, median)\tfull %s (raw %s), incremental %s (raw %s) = %.1f%% of full; %d full, %d incremental\t\n",
		report.Bytes(j.SnapshotFullBytes), report.Bytes(report.ValueQuantile(r.fullRaw, 0.5, 1)), report.Bytes(j.SnapshotIncrementalBytes), report.Bytes(report.ValueQuantile(r.deltaRaw, 0.5, 1)), ratio,
		len(r.fullSizes), len(r.deltaSizes))
	var alone []float64
	for i, d := range r.shardReplay {
		alone = append(alone, float64(r.replayedTicks[i])/d.Seconds()/broadside.TickRate)
	}
	fmt.Fprintf(tw, "replay (x real time)\twhole world in parallel %.0fx (%d ticks); one shard alone: median %.0fx, min %.0fx\t\n",
		j.ReplaySpeedup, r.replayTicks, report.ValueQuantile(alone, 0.5, 0.1), minOf(alone))
	if r.replayTicks > 0 && r.worldReplay > 0 {
		fmt.Fprintf(tw, "replay CPU (whole world)\t%.0f µs of process CPU per world tick (%.2f cores busy over the replay)\t\n",
			report.Us(r.worldCPU)/float64(r.replayTicks), r.worldCPU.Seconds()/r.worldReplay.Seconds())
	}
	for _, m := range simMinutes {
		rs := r.recoveries[m]
		var ds []time.Duration
		var replayed, restore []float64
		for _, rec := range rs {
			ds = append(ds, rec.Duration)
			replayed = append(replayed, float64(rec.Replayed))
			restore = append(restore, report.Ms(rec.Load.Read+rec.Load.Restore))
		}
		fmt.Fprintf(tw, "recovery, %g min recording (key %q)\tmedian %.1f ms, max %.1f ms over %d kills; restore median %.1f ms, replayed median %.0f ticks\t\n",
			float64(m)/float64(o.scale), fmt.Sprint(m), report.Ms(report.Quantile(ds, 0.5)), report.Ms(report.Quantile(ds, 1)), len(rs), report.ValueQuantile(restore, 0.5, 1e-3), report.ValueQuantile(replayed, 0.5, 1))
	}
	var liveRec []time.Duration
	for _, rec := range r.liveRecoveries {
		liveRec = append(liveRec, rec.Duration)
	}
	fmt.Fprintf(tw, "live recoveries of shard 0\t%d, median %.1f ms, max %.1f ms\t\n", len(liveRec), report.Ms(report.Quantile(liveRec, 0.5)), report.Ms(report.Quantile(liveRec, 1)))
	fmt.Fprintf(tw, "healthy shards' tick latency, quiet slots\tp50 %.0f µs, p99 %.0f µs, max %.0f µs (%d ticks); step p99 %.0f µs\t\n",
		report.Us(report.Quantile(r.liveQuiet, 0.5)), report.Us(report.Quantile(r.liveQuiet, 0.99)), report.Us(report.Quantile(r.liveQuiet, 1)), len(r.liveQuiet), report.Us(report.Quantile(r.liveStepQuiet, 0.99)))
	fmt.Fprintf(tw, "healthy shards' tick latency, slots with a recovery\tp50 %.0f µs, p99 %.0f µs, max %.0f µs (%d ticks; %d during a recovery, p99 %.0f µs); step p99 %.0f µs\t\n",
		report.Us(report.Quantile(r.liveRecover, 0.5)), report.Us(report.Quantile(r.liveRecover, 0.99)), report.Us(report.Quantile(r.liveRecover, 1)), len(r.liveRecover),
		len(r.liveDuring), report.Us(report.Quantile(r.liveDuring, 0.99)), report.Us(report.Quantile(r.liveStepRecover, 0.99)))
	fmt.Fprintf(tw, "healthy tick p99 ratio (with / without recovery)\t%.3f\t\n", j.HealthyTickP99Ratio)
}

// writePNG draws recovery time against recording length and the healthy
// shards' tick latency percentiles without and with recoveries.
func (r *simResults) writePNG(path string) error {
	rec := plot.New()
	rec.Title.Text = "Recovery time (kill to live) vs recording length"
	rec.X.Label.Text = "recording length (simulated minutes)"
	rec.Y.Label.Text = "ms (median of 4 shards; dashed: target)"
	vals := plotter.Values{}
	names := []string{}
	for _, m := range simMinutes {
		vals = append(vals, report.Ms(r.recoveryMedian(m)))
		names = append(names, fmt.Sprintf("%g", float64(m)/float64(r.opts.scale)))
	}
	bars, err := plotter.NewBarChart(vals, vg.Points(40))
	if err != nil {
		return err
	}
	bars.Color = plotutil.Color(0)
	rec.Add(bars, plotter.NewGrid())
	rec.NominalX(names...)
	target, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: report.Ms(r.opts.recoveryTarget)}, {X: float64(len(vals)) - 0.5, Y: report.Ms(r.opts.recoveryTarget)}})
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
			xys = append(xys, plotter.XY{X: float64(i), Y: report.Ms(report.Quantile(series.d, q))})
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

	return report.Chart{Plots: []*plot.Plot{rec, lat}}.WritePNG(path)
}
