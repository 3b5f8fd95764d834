package main

import (
	"context"
	"fmt"
	"log/slog"
	"math/bits"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anoptic/broadside/cmdlog"
	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/lineage"
	"github.com/anoptic/broadside/netcode/server"
	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/snapshot"
	"github.com/prometheus/client_golang/prometheus"
)

// defaultWorldID is the world id of 'serve' and 'demo' (tick marker and
// output record ids derive from it).
const defaultWorldID = 1

// worldLog is what a game world needs of the command log: *cmdlog.Client
// (embedded cluster) and *cmdlog.RemoteClient (external) both are.
type worldLog interface {
	replay.TickLog
	Append(ctx context.Context, data []byte) error
	Subscribe(from uint64) *cmdlog.Subscription
	Trim(ctx context.Context, upTo uint64) (uint64, error)
}

// gameWorldConfig configures a running world.
type gameWorldConfig struct {
	World uint32
	Game  broadside.Config
	// Dir holds the snapshot and lineage stores (Pebble).
	Dir string
	// Log is the command log; Server receives the state fan-out.
	Log    worldLog
	Server *server.Server
	// Hub assembles the frames of the state fan-out (the Server's
	// StateSource); nil: a new one.
	Hub *frameHub
	// HistoryTicks is how many ticks of hashes the supervisor keeps per
	// shard (a whole match for 'demo', to check it).
	HistoryTicks int
	// RecoveryTarget tunes the snapshot policy; MinSnapshotInterval, if
	// set, is the least number of ticks between two captures.
	RecoveryTarget      time.Duration
	MinSnapshotInterval uint64
	Logger              *slog.Logger
	Registry            prometheus.Registerer
	// OnRecovery, if set, is called when a shard is live again.
	OnRecovery func(replay.Recovery)
	// Retain, if not 0, trims the log (and the lineage with it) to about
	// this much play behind the newest tick, never past what the
	// sectors' snapshots need to recover; 0 keeps everything.
	Retain time.Duration
	// TrimStep is the least number of positions a trim removes (default
	// 1024), so that trims stay large and rare.
	TrimStep uint64
}

// gameWorld runs a Broadside world on the command log: a Ticker, a
// recovery Supervisor with one Runner per sector (snapshots in Pebble,
// lineage in Pebble), and the per-tick frames that feed the state fan-out.
type gameWorld struct {
	cfg     gameWorldConfig
	snaps   *snapshot.PebbleStore
	linDB   *lineage.PebbleStore
	sup     *replay.Supervisor
	ticker  *replay.Ticker
	hub     *frameHub
	metrics worldMetrics

	storesMu sync.RWMutex  // held to read linDB from other goroutines, and to close it
	trimmed  atomic.Uint64 // the log is trimmed up to this position

	cancelTicker, cancelSup context.CancelFunc
	tickerDone, supDone     chan error
	publishDone, trimDone   chan struct{}

	mu         sync.Mutex
	recoveries []replay.Recovery
	stored     map[uint32]uint64 // log position of the newest full snapshot stored, per shard
	// lin is the lineage recorder of each shard's current runner (a new
	// one per runner: a killed runner may leave its tick open).
	lin map[uint32]*lineage.Log
}

type worldMetrics struct {
	step      prometheus.Histogram
	overruns  prometheus.Counter
	tick      prometheus.Gauge
	recovered prometheus.Counter
}

// newShardSims returns the NewSim of each sector of cfg.
func sectorSpecs(cfg broadside.Config) []replay.ShardSpec {
	var specs []replay.ShardSpec
	for i := range cfg.Sectors() {
		specs = append(specs, replay.ShardSpec{Shard: uint32(i), NewSim: func() (replay.TableSim, error) {
			return broadside.NewSector(cfg, i)
		}})
	}
	return specs
}

// commandKind is the lineage kind of a log record (replay.CommandKind).
func commandKind(c replay.Command) uint8 { return linKindOf(&c) }

// startGameWorld opens the stores and starts the world. Stop stops it.
func startGameWorld(ctx context.Context, cfg gameWorldConfig) (*gameWorld, error) {
	if cfg.World == 0 {
		cfg.World = defaultWorldID
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
	if err := cfg.Game.Validate(); err != nil {
		return nil, err
	}
	if cfg.Game.Sectors() > maxHubShards {
		return nil, fmt.Errorf("a world of %d sectors: the server runs at most %d", cfg.Game.Sectors(), maxHubShards)
	}
	// The supervisor's hash history must reach back past the retention
	// (the trim finds the position of a tick there).
	retainTicks := int(cfg.Retain / (time.Second / broadside.TickRate))
	if cfg.HistoryTicks == 0 {
		cfg.HistoryTicks = replay.DefaultHistoryTicks
	}
	cfg.HistoryTicks = max(cfg.HistoryTicks, retainTicks+60*broadside.TickRate)
	srv := cfg.Server
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	w := &gameWorld{cfg: cfg, stored: map[uint32]uint64{}, lin: map[uint32]*lineage.Log{}}
	var err error
	if w.snaps, err = snapshot.OpenPebble(filepath.Join(cfg.Dir, "snapshots"), snapshot.PebbleOptions{Logger: quietLogger()}); err != nil {
		return nil, fmt.Errorf("snapshot store: %w", err)
	}
	if w.linDB, err = lineage.OpenPebble(filepath.Join(cfg.Dir, "lineage"), lineage.PebbleOptions{Logger: quietLogger()}); err != nil {
		w.snaps.Close()
		return nil, fmt.Errorf("lineage store: %w", err)
	}
	if err := lineage.PutKindNames(ctx, w.linDB, linKindNames); err != nil {
		w.closeStores()
		return nil, err
	}
	w.hub = cfg.Hub
	if w.hub == nil {
		w.hub = newFrameHub(cfg.Game.Sectors(), 0)
	}
	if srv != nil {
		// Players learn which of their commands a tick applied with
		// that tick's state: noted when the tick's frame is complete.
		w.hub.onApplied = srv.NoteApplied
	}
	w.metrics = worldMetrics{
		step: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "broadside", Subsystem: "world", Name: "step_seconds",
			Help: "Duration of one sector's Step.", Buckets: prometheus.ExponentialBuckets(10e-6, 2, 14)}),
		overruns: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "broadside", Subsystem: "world", Name: "tick_overruns_total",
			Help: "Sector steps longer than a tick period."}),
		tick: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "broadside", Subsystem: "world", Name: "tick",
			Help: "Newest tick every sector has stepped."}),
		recovered: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "broadside", Subsystem: "world", Name: "recoveries_total",
			Help: "Sim shard recoveries."}),
	}
	cfg.Registry.MustRegister(w.metrics.step, w.metrics.overruns, w.metrics.tick, w.metrics.recovered)

	period := time.Second / broadside.TickRate
	w.sup, err = replay.NewSupervisor(replay.SupervisorConfig{
		World: cfg.World, Shards: sectorSpecs(cfg.Game), Appender: cfg.Log, Store: w.snaps,
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
		CommandKind:  commandKind,
		HistoryTicks: cfg.HistoryTicks,
		Logger:       cfg.Logger,
		OnTick: func(info replay.TickInfo) {
			w.metrics.step.Observe(info.Step.Seconds())
			if info.Step > period {
				w.metrics.overruns.Inc()
			}
			w.hub.add(info)
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
	})
	if err != nil {
		w.closeStores()
		return nil, err
	}
	w.ticker, err = replay.NewTicker(replay.TickerConfig{World: cfg.World, Log: cfg.Log, Rate: broadside.TickRate})
	if err != nil {
		w.closeStores()
		return nil, err
	}
	sctx, cancelSup := context.WithCancel(context.WithoutCancel(ctx))
	tctx, cancelTicker := context.WithCancel(context.WithoutCancel(ctx))
	w.cancelSup, w.cancelTicker = cancelSup, cancelTicker
	w.supDone, w.tickerDone, w.publishDone = make(chan error, 1), make(chan error, 1), make(chan struct{})
	go func() { w.supDone <- w.sup.Run(sctx) }()
	go func() { w.tickerDone <- w.ticker.Run(tctx) }()
	w.trimDone = make(chan struct{})
	go func() {
		defer close(w.trimDone)
		if cfg.Retain > 0 {
			w.trimLoop(sctx)
		}
	}()
	go func() {
		defer close(w.publishDone)
		for {
			select {
			case <-sctx.Done():
				return
			case <-w.hub.ready:
				// Publish the newest complete tick: a publisher that
				// fell behind skips to the present.
				tick := w.hub.latest()
				w.metrics.tick.Set(float64(tick))
				if srv != nil {
					srv.Publish(tick)
				}
			}
		}
	}()
	return w, nil
}

// trimLoop trims the log behind the snapshots every few seconds, keeping
// cfg.Retain of play, in large steps; the lineage follows the log.
func (w *gameWorld) trimLoop(ctx context.Context) {
	retainTicks := uint64(w.cfg.Retain / (time.Second / broadside.TickRate))
	var shards []uint32
	for _, sh := range sectorSpecs(w.cfg.Game) {
		shards = append(shards, sh.Shard)
	}
	step := w.cfg.TrimStep
	if step == 0 {
		step = 1024
	}
	every := time.NewTicker(min(max(w.cfg.Retain/10, 100*time.Millisecond), 30*time.Second))
	defer every.Stop()
	var trimmed uint64
	for {
		select {
		case <-ctx.Done():
			return
		case <-every.C:
		}
		tick := w.Tick()
		if tick <= retainTicks {
			continue
		}
		keep, ok := w.sup.Hashes(0).Get(tick - retainTicks)
		if !ok {
			continue
		}
		w.storesMu.RLock()
		if w.snaps == nil {
			w.storesMu.RUnlock()
			return
		}
		now, err := replay.SafeTrim(ctx, w.cfg.Log, w.snaps, shards, []uint64{keep.Pos}, trimmed, step)
		if err == nil && now > trimmed {
			// The lineage of the ticks whose inputs were trimmed goes too:
			// find the newest tick whose marker is at or below the trim.
			cut := tick - retainTicks
			for cut > 0 {
				th, ok := w.sup.Hashes(0).Get(cut)
				if !ok || th.Pos <= now {
					break
				}
				cut--
			}
			err = lineage.Trim(ctx, w.linDB, lineage.Retention{BeforeTick: cut})
			if err == nil {
				w.cfg.Logger.Info("trimmed the log and its lineage", "up_to", now, "keeping_from_tick", tick-retainTicks)
			}
			trimmed = now
		}
		w.storesMu.RUnlock()
		w.trimmed.Store(trimmed)
		if err != nil && ctx.Err() == nil {
			w.cfg.Logger.Warn("trim", "err", err)
		}
	}
}

// Tick returns the newest tick every sector has stepped.
func (w *gameWorld) Tick() uint64 { return w.hub.latest() }

// Recoveries returns the recoveries so far.
func (w *gameWorld) Recoveries() []replay.Recovery {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]replay.Recovery(nil), w.recoveries...)
}

// Stop stops the world gracefully: every sector takes a full snapshot at
// a tick past the log's tail as Stop found it (so a restart replays
// nothing of what was acknowledged), then the ticker and the runners stop
// and the stores close. Call it after the server stopped intake
// (server.Server.Drain): then every acknowledged command is in the log
// below that tail, and in the snapshots.
func (w *gameWorld) Stop(ctx context.Context) (finalTick uint64, err error) {
	defer w.closeStores()
	tail, err := w.cfg.Log.CheckTail(ctx)
	if err != nil {
		err = fmt.Errorf("final snapshot: the log's tail: %w", err)
	}
	// The ticker keeps appending markers; each shard snapshots after a
	// tick whose marker is past tail. Ask again while waiting: a runner
	// started by a recovery meanwhile has not seen the first request.
	for _, sh := range sectorSpecs(w.cfg.Game) {
		for err == nil {
			w.mu.Lock()
			got := w.stored[sh.Shard]
			w.mu.Unlock()
			if got > tail {
				break
			}
			if ctx.Err() != nil {
				err = fmt.Errorf("final snapshot of sector %d: %w", sh.Shard, ctx.Err())
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
			err = fmt.Errorf("lineage of sector %d: %w", shard, cerr)
		}
	}
	w.mu.Unlock()
	return finalTick, err
}

// lineageStore returns the lineage store (nil once the world stopped)
// and must be released after use.
func (w *gameWorld) lineageStore() (lineage.Store, func()) {
	w.storesMu.RLock()
	if w.linDB == nil {
		return nil, w.storesMu.RUnlock
	}
	return w.linDB, w.storesMu.RUnlock
}

func (w *gameWorld) closeStores() {
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

// frameHub assembles each tick's Frame from the sectors' runners (each
// adds its sector after stepping) and keeps the recent ones for the state
// fan-out (server.StateSource).
type frameHub struct {
	shards int
	radius int64

	mu      sync.Mutex
	pending map[uint64]*pendingFrame
	ring    [hubFrames]*broadside.Frame
	last    uint64        // newest complete tick
	ready   chan struct{} // signalled when a tick is complete
	// onApplied, if set, is told each player command of a complete tick
	// (its player and client sequence), in log order.
	onApplied func(player uint32, seq uint64)

	enc broadside.StateEncoder // used by EncodeState only (one goroutine)
}

// hubFrames is how many recent ticks' frames the hub keeps: the bases of
// players' deltas (server.Config.MaxDeltaTicks) and the spectators'
// delay must fall within it.
const hubFrames = 128

// maxHubShards is the most sectors the hub assembles (a bit each).
const maxHubShards = 64

type pendingFrame struct {
	f       *broadside.Frame
	have    uint64 // bit per shard
	applied [][2]uint64
}

func newFrameHub(shards int, radius int64) *frameHub {
	return &frameHub{shards: shards, radius: radius, pending: map[uint64]*pendingFrame{}, ready: make(chan struct{}, 1)}
}

// add copies the sector of info (on its runner's goroutine, between two
// Steps); the tick's frame is sealed when every sector added its part.
func (h *frameHub) add(info replay.TickInfo) {
	sec, ok := info.Sim.(*broadside.Sector)
	if !ok || info.Shard >= maxHubShards {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if info.Tick <= h.last {
		return // a recovering shard replaying ticks already published
	}
	p := h.pending[info.Tick]
	if p == nil {
		if len(h.pending) >= 256 {
			// A sector stalled: give up the oldest incomplete ticks.
			oldest := info.Tick
			for t := range h.pending {
				oldest = min(oldest, t)
			}
			delete(h.pending, oldest)
		}
		p = &pendingFrame{f: broadside.NewFrame(info.Tick)}
		// Every sector reads the whole log: the first to finish the
		// tick says which player commands it applied.
		for i := range info.Commands {
			if c := &info.Commands[i]; c.Player != 0 {
				p.applied = append(p.applied, [2]uint64{uint64(c.Player), c.ClientSeq})
			}
		}
		h.pending[info.Tick] = p
	}
	bit := uint64(1) << info.Shard
	if p.have&bit != 0 {
		return
	}
	p.have |= bit
	p.f.AddSector(sec)
	if bits.OnesCount64(p.have) < h.shards {
		return
	}
	delete(h.pending, info.Tick)
	for t := range h.pending {
		if t < info.Tick {
			delete(h.pending, t) // can no longer complete in order
		}
	}
	var prev *broadside.Frame
	if h.last > 0 {
		prev = h.ring[h.last%uint64(len(h.ring))]
	}
	p.f.Seal(prev, h.radius)
	h.ring[info.Tick%uint64(len(h.ring))] = p.f
	h.last = info.Tick
	if h.onApplied != nil {
		for _, a := range p.applied {
			h.onApplied(uint32(a[0]), a[1])
		}
	}
	select {
	case h.ready <- struct{}{}:
	default: // a signal is pending already
	}
}

func (h *frameHub) latest() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.last
}

// frame returns the frame of tick if it is still held.
func (h *frameHub) frame(tick uint64) *broadside.Frame {
	h.mu.Lock()
	defer h.mu.Unlock()
	f := h.ring[tick%uint64(len(h.ring))]
	if f == nil || f.Tick != tick {
		return nil
	}
	return f
}

// EncodeState implements server.StateSource.
func (h *frameHub) EncodeState(dst []byte, viewer uint32, tick, base uint64) ([]byte, bool) {
	cur := h.frame(tick)
	if cur == nil {
		return dst, false
	}
	var b *broadside.Frame
	if base != 0 {
		if b = h.frame(base); b == nil {
			return dst, false
		}
	}
	return h.enc.Encode(dst, cur, b, viewer), true
}
