package world

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anoptic/broadside/cmdlog"
	"github.com/anoptic/broadside/lineage"
	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/snapshot"
	"github.com/prometheus/client_golang/prometheus"
)

// Log is what a running world needs of the command log: *cmdlog.Client
// (an embedded cluster) and *cmdlog.RemoteClient (an external one) both
// are.
type Log interface {
	replay.TickLog
	Append(ctx context.Context, data []byte) error
	Subscribe(from uint64) *cmdlog.Subscription
	Trim(ctx context.Context, upTo uint64) (uint64, error)
}

// Config configures a running world.
type Config struct {
	// ID is the world id (default DefaultID).
	ID uint32
	// Game is the game the world runs (required).
	Game Game
	// Dir holds the snapshot and lineage stores (Pebble) (required).
	Dir string
	// Log is the command log (required).
	Log Log
	// Frames assembles the frames of the state fan-out; nil: a new one
	// from Game.NewFrame.
	Frames *Frames
	// HistoryTicks is how many ticks of hashes the supervisor keeps per
	// shard (a whole match, to check it afterwards); it is raised to reach
	// past Retain.
	HistoryTicks int
	// RecoveryTarget tunes the snapshot policy (default 200 ms);
	// MinSnapshotInterval, if set, is the least number of ticks between
	// two captures.
	RecoveryTarget      time.Duration
	MinSnapshotInterval uint64
	// Logger receives the world's messages (nil: slog.Default()); Registry
	// its metrics (nil: a registry of its own).
	Logger   *slog.Logger
	Registry prometheus.Registerer
	// OnRecovery, if set, is called when a shard is live again.
	OnRecovery func(replay.Recovery)
	// OnFrame, if set, is called from the world's publisher goroutine with
	// the newest complete tick whenever one completes (a publisher that
	// fell behind skips to the present).
	OnFrame func(tick uint64)
	// Retain, if not 0, trims the log (and the lineage with it) to about
	// this much play behind the newest tick, never past what the shards'
	// snapshots need to recover; 0 keeps everything.
	Retain time.Duration
	// TrimStep is the least number of positions a trim removes (default
	// 1024), so that trims stay large and rare.
	TrimStep uint64
	// BeforeSnapshotPut, if set, is called with every snapshot the world
	// is about to store, on the writer's goroutine (a fault-injection
	// point: the crash tests kill the process there, in the middle of a
	// snapshot write).
	BeforeSnapshotPut func(snapshot.Meta)
	// BeforeSnapshotGet, if set, is called before every snapshot the world
	// reads back (a recovery restoring a shard: the crash tests kill the
	// process there, in the middle of a recovery).
	BeforeSnapshotGet func(shard uint32, tick uint64)
}

// hookedStore calls its hooks ahead of every Put and Get.
type hookedStore struct {
	snapshot.Store
	beforePut func(snapshot.Meta)
	beforeGet func(shard uint32, tick uint64)
}

// Put implements snapshot.Store.
func (s hookedStore) Put(ctx context.Context, meta snapshot.Meta, b []byte) error {
	if s.beforePut != nil {
		s.beforePut(meta)
	}
	return s.Store.Put(ctx, meta, b)
}

// Get implements snapshot.Store.
func (s hookedStore) Get(ctx context.Context, shard uint32, tick uint64) ([]byte, error) {
	if s.beforeGet != nil {
		s.beforeGet(shard, tick)
	}
	return s.Store.Get(ctx, shard, tick)
}

// World is a running world on the command log: a Ticker, a recovery
// Supervisor with one Runner per shard (snapshots and lineage in Pebble
// under Config.Dir), the trim behind them, and the per-tick frames that
// feed the state fan-out.
type World struct {
	cfg     Config
	snaps   *snapshot.PebbleStore
	linDB   *lineage.PebbleStore
	sup     *replay.Supervisor
	ticker  *replay.Ticker
	frames  *Frames
	metrics metrics

	storesMu sync.RWMutex  // held to read linDB from other goroutines, and to close it
	trimmed  atomic.Uint64 // the log is trimmed up to this position

	cancelTicker, cancelSup context.CancelFunc
	tickerDone, supDone     chan error
	publishDone, trimDone   chan struct{}

	lastFrame atomic.Int64 // unix nanos of the newest complete tick

	mu         sync.Mutex
	recoveries []replay.Recovery
	stored     map[uint32]uint64 // log position of the newest full snapshot stored, per shard
	// lin is the lineage recorder of each shard's current runner (a new
	// one per runner: a killed runner may leave its tick open).
	lin map[uint32]*lineage.Log
}

type metrics struct {
	step      prometheus.Histogram
	overruns  prometheus.Counter
	tick      prometheus.Gauge
	recovered prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) metrics {
	m := metrics{
		step: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "broadside", Subsystem: "world", Name: "step_seconds",
			Help: "Duration of one sector's Step.", Buckets: prometheus.ExponentialBuckets(10e-6, 2, 14)}),
		overruns: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "broadside", Subsystem: "world", Name: "tick_overruns_total",
			Help: "Tick periods that passed without the world completing a tick: ticks completed more than a period late on the tick-rate schedule, and ticks that never completed (see World's doc)."}),
		tick: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "broadside", Subsystem: "world", Name: "tick",
			Help: "Newest tick every sector has stepped."}),
		recovered: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "broadside", Subsystem: "world", Name: "recoveries_total",
			Help: "Sim shard recoveries."}),
	}
	reg.MustRegister(m.step, m.overruns, m.tick, m.recovered)
	return m
}

// Sector states of the broadside_world_sector_state gauge.
const (
	stateLive       = 0
	stateRecovering = 1
	stateStopped    = 2
)

// registerSectorStates adds a gauge of each shard's state (0 live, 1
// recovering, 2 stopped) to reg.
func (w *World) registerSectorStates(reg prometheus.Registerer) {
	for shard := range w.cfg.Game.Shards {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "broadside", Subsystem: "world", Name: "sector_state",
			Help:        "State of a sector's runner: 0 live, 1 recovering, 2 stopped.",
			ConstLabels: prometheus.Labels{"sector": fmt.Sprint(shard)}},
			func() float64 { return float64(w.shardState(uint32(shard))) }))
	}
}

func (w *World) shardState(shard uint32) int {
	for _, st := range w.sup.Status() {
		if st.Shard == shard {
			switch {
			case st.Done:
				return stateStopped
			case st.Recovering:
				return stateRecovering
			}
			return stateLive
		}
	}
	return stateStopped
}

// Ready says whether the world serves: the log answers within a second,
// every shard is live, and a tick completed within the last second (the
// world ticks). The error says what is not.
func (w *World) Ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, err := w.cfg.Log.CheckTail(ctx); err != nil {
		return fmt.Errorf("the command log does not answer: %w", err)
	}
	for _, st := range w.sup.Status() {
		switch {
		case st.Done:
			return fmt.Errorf("sector %d stopped", st.Shard)
		case st.Recovering:
			return fmt.Errorf("sector %d is recovering (runner %d)", st.Shard, st.Incarnation)
		}
	}
	last := w.lastFrame.Load()
	if last == 0 {
		return errors.New("no tick completed yet")
	}
	if age := time.Since(time.Unix(0, last)); age > time.Second {
		return fmt.Errorf("no tick completed for %v (last: tick %d)", age.Round(time.Millisecond), w.Tick())
	}
	return nil
}

// Start opens the stores and starts the world; Stop stops it.
func Start(ctx context.Context, cfg Config) (*World, error) {
	if err := cfg.Game.Validate(); err != nil {
		return nil, err
	}
	if cfg.Log == nil || cfg.Dir == "" {
		return nil, fmt.Errorf("world: a log and a directory are required")
	}
	if cfg.ID == 0 {
		cfg.ID = DefaultID
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	if cfg.RecoveryTarget == 0 {
		cfg.RecoveryTarget = 200 * time.Millisecond
	}
	if cfg.TrimStep == 0 {
		cfg.TrimStep = 1024
	}
	// The supervisor's hash history must reach back past the retention
	// (the trim finds the position of a tick there).
	if cfg.HistoryTicks == 0 {
		cfg.HistoryTicks = replay.DefaultHistoryTicks
	}
	cfg.HistoryTicks = max(cfg.HistoryTicks, cfg.retainTicks()+60*cfg.Game.TickRate)
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	w := &World{cfg: cfg, stored: map[uint32]uint64{}, lin: map[uint32]*lineage.Log{}, frames: cfg.Frames}
	if w.frames == nil {
		w.frames = NewFrames(cfg.Game.Shards, cfg.Game.NewFrame)
	}
	w.metrics = newMetrics(cfg.Registry)
	w.watchOverruns(time.Now)
	quiet := cfg.Logger.With("store", "pebble")
	var err error
	if w.snaps, err = snapshot.OpenPebble(filepath.Join(cfg.Dir, "snapshots"), snapshot.PebbleOptions{Logger: quiet}); err != nil {
		return nil, fmt.Errorf("snapshot store: %w", err)
	}
	if w.linDB, err = lineage.OpenPebble(filepath.Join(cfg.Dir, "lineage"), lineage.PebbleOptions{Logger: quiet}); err != nil {
		w.snaps.Close()
		return nil, fmt.Errorf("lineage store: %w", err)
	}
	if len(cfg.Game.KindNames) > 0 {
		if err := lineage.PutKindNames(ctx, w.linDB, cfg.Game.KindNames); err != nil {
			w.closeStores()
			return nil, err
		}
	}
	if w.sup, err = replay.NewSupervisor(w.supervisorConfig()); err != nil {
		w.closeStores()
		return nil, err
	}
	w.registerSectorStates(cfg.Registry)
	if w.ticker, err = replay.NewTicker(replay.TickerConfig{World: cfg.ID, Log: cfg.Log, Rate: cfg.Game.TickRate}); err != nil {
		w.closeStores()
		return nil, err
	}
	sctx, cancelSup := context.WithCancel(context.WithoutCancel(ctx))
	tctx, cancelTicker := context.WithCancel(context.WithoutCancel(ctx))
	w.cancelSup, w.cancelTicker = cancelSup, cancelTicker
	w.supDone, w.tickerDone = make(chan error, 1), make(chan error, 1)
	w.publishDone, w.trimDone = make(chan struct{}), make(chan struct{})
	// The world's goroutines carry the pprof label component=sim (the
	// Runners, snapshots, the Ticker; what OnFrame does relabels itself).
	go pprof.Do(sctx, pprof.Labels("component", "sim"), func(ctx context.Context) { w.supDone <- w.sup.Run(ctx) })
	go pprof.Do(tctx, pprof.Labels("component", "sim"), func(ctx context.Context) { w.tickerDone <- w.ticker.Run(ctx) })
	go func() {
		defer close(w.trimDone)
		if cfg.Retain > 0 {
			w.trimLoop(sctx)
		}
	}()
	go pprof.Do(sctx, pprof.Labels("component", "sim"), w.publish)
	return w, nil
}

func (c Config) retainTicks() int {
	return int(c.Retain / (time.Second / time.Duration(c.Game.TickRate)))
}

func (w *World) period() time.Duration { return time.Second / time.Duration(w.cfg.Game.TickRate) }

func (w *World) supervisorConfig() replay.SupervisorConfig {
	cfg := w.cfg
	var store snapshot.Store = w.snaps
	if cfg.BeforeSnapshotPut != nil || cfg.BeforeSnapshotGet != nil {
		store = hookedStore{Store: w.snaps, beforePut: cfg.BeforeSnapshotPut, beforeGet: cfg.BeforeSnapshotGet}
	}
	return replay.SupervisorConfig{
		World: cfg.ID, Shards: cfg.Game.Specs(), Appender: cfg.Log, Store: store,
		Policy: snapshot.Policy{RecoveryTarget: cfg.RecoveryTarget, MinInterval: cfg.MinSnapshotInterval},
		Open: func(_ context.Context, _ uint32, from uint64) (replay.Source, error) {
			return cfg.Log.Subscribe(from), nil
		},
		LogTail: cfg.Log.CheckTail,
		Recorder: func(shard uint32) lineage.Recorder {
			l := lineage.NewLog(lineage.LogOptions{Store: w.linDB})
			w.mu.Lock()
			w.lin[shard] = l
			w.mu.Unlock()
			return l
		},
		CommandKind:  cfg.Game.CommandKind,
		HistoryTicks: cfg.HistoryTicks,
		Logger:       cfg.Logger,
		OnTick: func(info replay.TickInfo) {
			w.metrics.step.Observe(info.Step.Seconds())
			w.frames.Add(info)
		},
		OnRecovery: func(r replay.Recovery) {
			w.metrics.recovered.Inc()
			w.mu.Lock()
			w.recoveries = append(w.recoveries, r)
			w.mu.Unlock()
			if cfg.OnRecovery != nil {
				cfg.OnRecovery(r)
			}
		},
		OnStored: func(st snapshot.Stored) {
			if st.Err == nil && st.Meta.Full {
				w.mu.Lock()
				w.stored[st.Meta.Shard] = max(w.stored[st.Meta.Shard], st.Meta.Pos)
				w.mu.Unlock()
			}
		},
	}
}

// publish announces complete ticks until ctx ends.
func (w *World) publish(ctx context.Context) {
	defer close(w.publishDone)
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.frames.Ready():
			w.lastFrame.Store(time.Now().UnixNano())
			tick := w.frames.Latest()
			w.metrics.tick.Set(float64(tick))
			if w.cfg.OnFrame != nil {
				w.cfg.OnFrame(tick)
			}
		}
	}
}

// trimLoop trims the log behind the snapshots every few seconds, keeping
// Config.Retain of play, in large steps; the lineage follows the log.
func (w *World) trimLoop(ctx context.Context) {
	retainTicks := uint64(w.cfg.retainTicks())
	shards := make([]uint32, w.cfg.Game.Shards)
	for i := range shards {
		shards[i] = uint32(i)
	}
	every := time.NewTicker(min(max(w.cfg.Retain/10, 100*time.Millisecond), 30*time.Second))
	defer every.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-every.C:
		}
		if err := w.trimOnce(ctx, retainTicks, shards); err != nil && ctx.Err() == nil {
			w.cfg.Logger.Warn("trim", "err", err)
		}
	}
}

// trimOnce trims the log to keep retainTicks of play, if that frees at
// least TrimStep positions, and the lineage of the ticks trimmed.
func (w *World) trimOnce(ctx context.Context, retainTicks uint64, shards []uint32) error {
	tick := w.Tick()
	if tick <= retainTicks {
		return nil
	}
	keep, ok := w.sup.Hashes(0).Get(tick - retainTicks)
	if !ok {
		return nil
	}
	w.storesMu.RLock()
	defer w.storesMu.RUnlock()
	if w.snaps == nil {
		return nil
	}
	trimmed := w.trimmed.Load()
	now, err := replay.SafeTrim(ctx, w.cfg.Log, w.snaps, shards, []uint64{keep.Pos}, trimmed, w.cfg.TrimStep)
	if err != nil || now <= trimmed {
		return err
	}
	w.trimmed.Store(now)
	// The lineage of the ticks whose inputs were trimmed goes too: find
	// the newest tick whose marker is at or below the trim.
	cut := tick - retainTicks
	for cut > 0 {
		th, ok := w.sup.Hashes(0).Get(cut)
		if !ok || th.Pos <= now {
			break
		}
		cut--
	}
	if err := lineage.Trim(ctx, w.linDB, lineage.Retention{BeforeTick: cut}); err != nil {
		return err
	}
	w.cfg.Logger.Info("trimmed the log and its lineage", "up_to", now, "keeping_from_tick", tick-retainTicks)
	return nil
}

// ID returns the world id.
func (w *World) ID() uint32 { return w.cfg.ID }

// Game returns the game the world runs.
func (w *World) Game() Game { return w.cfg.Game }

// Log returns the world's command log.
func (w *World) Log() Log { return w.cfg.Log }

// Frames returns the world's frame assembler.
func (w *World) Frames() *Frames { return w.frames }

// Tick returns the newest tick every shard has stepped.
func (w *World) Tick() uint64 { return w.frames.Latest() }

// Shards returns how many shards (sectors) the world runs.
func (w *World) Shards() int { return w.cfg.Game.Shards }

// Trimmed returns the position the log is trimmed up to.
func (w *World) Trimmed() uint64 { return w.trimmed.Load() }

// Kill stops shard's runner as a crash would; the supervisor recovers it.
func (w *World) Kill(shard uint32) bool { return w.sup.Kill(shard) }

// Hashes returns shard's hash history across its runners.
func (w *World) Hashes(shard uint32) *replay.HashHistory { return w.sup.Hashes(shard) }

// Status returns the state of every shard.
func (w *World) Status() []replay.ShardStatus { return w.sup.Status() }

// Recoveries returns the recoveries so far.
func (w *World) Recoveries() []replay.Recovery {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]replay.Recovery(nil), w.recoveries...)
}

// LineageStore returns the lineage store (nil once the world stopped); the
// caller must call release after use.
func (w *World) LineageStore() (s lineage.Store, release func()) {
	w.storesMu.RLock()
	if w.linDB == nil {
		return nil, w.storesMu.RUnlock
	}
	return w.linDB, w.storesMu.RUnlock
}

// Stop stops the world gracefully: every shard takes a full snapshot at a
// tick past the log's tail as Stop found it (so a restart replays nothing
// of what was acknowledged), then the ticker and the runners stop and the
// stores close. Call it after intake stopped (netcode's Drain): then every
// acknowledged command is in the log below that tail, and in the
// snapshots. It returns the last complete tick.
func (w *World) Stop(ctx context.Context) (finalTick uint64, err error) {
	defer w.closeStores()
	tail, err := w.cfg.Log.CheckTail(ctx)
	if err != nil {
		err = fmt.Errorf("final snapshot: the log's tail: %w", err)
	}
	// The ticker keeps appending markers; each shard snapshots after a
	// tick whose marker is past tail. Ask again while waiting: a runner
	// started by a recovery meanwhile has not seen the first request.
	for shard := range uint32(w.cfg.Game.Shards) {
		for err == nil {
			w.mu.Lock()
			got := w.stored[shard]
			w.mu.Unlock()
			if got > tail {
				break
			}
			if ctx.Err() != nil {
				err = fmt.Errorf("final snapshot of shard %d: %w", shard, ctx.Err())
				break
			}
			w.sup.SnapshotNext()
			time.Sleep(10 * time.Millisecond)
		}
	}
	w.cancelTicker()
	<-w.tickerDone
	finalTick = w.Tick()
	w.cancelSup()
	<-w.supDone
	<-w.publishDone
	<-w.trimDone
	w.mu.Lock()
	for shard, l := range w.lin {
		if cerr := l.Close(context.WithoutCancel(ctx)); cerr != nil && err == nil {
			err = fmt.Errorf("lineage of shard %d: %w", shard, cerr)
		}
	}
	w.mu.Unlock()
	return finalTick, err
}

func (w *World) closeStores() {
	w.storesMu.Lock()
	defer w.storesMu.Unlock()
	if w.linDB != nil {
		w.linDB.Close()
		w.linDB = nil
	}
	if w.snaps != nil {
		w.snaps.Close()
		w.snaps = nil
	}
}

// watchOverruns counts the world's overruns (broadside_world_tick_overruns_total)
// from the moments its ticks complete, read from now.
//
// An overrun is a tick period that passed without the world completing a
// tick, whatever the cause (a slow log delaying the tick markers, a sector
// stepping slowly, a starved process): the world promises TickRate ticks
// a second, and a tick is complete when every sector stepped it. Each
// complete tick is placed on a schedule of one tick per period from an
// anchor; a tick completing more than one period after its slot counts
// the whole periods it is late by, and the schedule restarts from it
// (ticks that then arrive in a burst, catching up, count nothing more). A
// tick completing ahead of its slot moves the anchor earlier. Ticks that
// never complete (Frames gives up a tick a stalled sector never stepped)
// count one each. Jitter under a period counts nothing; a world running
// at 25 Hz counts 5 a second; the step time of a sector alone (which the
// step histogram shows) is not an overrun unless it delays a tick.
func (w *World) watchOverruns(now func() time.Time) {
	sched := tickSchedule{period: w.period()}
	w.frames.setOnComplete(func(tick uint64) {
		if n := sched.complete(tick, now()); n > 0 {
			w.metrics.overruns.Add(float64(n))
		}
	})
}

// tickSchedule places completed ticks on a schedule of one per period and
// counts the periods missed (see watchOverruns).
type tickSchedule struct {
	period     time.Duration
	anchor     time.Time // when anchorTick completed
	anchorTick uint64    // 0: no tick yet
	last       uint64    // newest tick completed
}

// complete records that tick completed at now (ticks in increasing order)
// and returns the overruns it reveals.
func (s *tickSchedule) complete(tick uint64, now time.Time) uint64 {
	var missed uint64
	if s.last != 0 && tick > s.last+1 {
		missed = tick - s.last - 1 // ticks that never completed
	}
	s.last = max(s.last, tick)
	if s.anchorTick == 0 || tick <= s.anchorTick {
		s.anchor, s.anchorTick = now, tick
		return missed
	}
	lag := now.Sub(s.anchor.Add(time.Duration(tick-s.anchorTick) * s.period))
	switch {
	case lag < 0:
		s.anchor, s.anchorTick = now, tick
	case lag > s.period:
		missed += uint64(lag / s.period)
		s.anchor, s.anchorTick = now, tick
	}
	return missed
}
