package natsworld

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anoptic/broadside/lineage"
	"github.com/anoptic/broadside/netcode/wire"
	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/snapshot"
	"github.com/anoptic/broadside/replay/world"
)

// TickerLease is the sector number of the lease of the world's Ticker: the
// one worker (or front end) holding it appends the world's TICK markers.
// No game has this many sectors (world.MaxShards).
const TickerLease = math.MaxUint32

// TickerSecondLease is the sector number of the lease of the world's
// second Ticker, in the Ticker's bucket: its holder, not holding
// TickerLease, runs a hot replay.Standby that appends every marker on the
// world's shared schedule at the moment the holder's Ticker does (the log
// drops one of each pair), so that the holder's death costs the world no
// tick (WorkerConfig.NoSecondTicker).
const TickerSecondLease = math.MaxUint32 - 1

// DefaultMaxChain bounds a sector's snapshot chains on the shared store:
// every link is a NATS round trip when a worker restores it.
const DefaultMaxChain = 16

// Publisher publishes a message on a NATS subject (*nats.Conn is one; it
// copies data before returning).
type Publisher interface {
	Publish(subject string, data []byte) error
}

// WorkerConfig configures a Worker.
type WorkerConfig struct {
	// World is the world id (required).
	World uint32
	// Game is the game the world runs (required); every worker of a world
	// must run the same one (its configuration included).
	Game world.Game
	// Log is the world's command log (required): a cmdlog.RemoteClient of
	// the logd cluster.
	Log world.Log
	// Leases is this worker's view of the lease bucket (required); its
	// worker id names the worker.
	Leases *Leases
	// Snapshots is the snapshot store every worker of the world shares
	// (required): a SnapshotStore on NATS.
	Snapshots snapshot.Store
	// Lineage, if set, is the lineage store every worker of the world
	// shares (a LineageStore on NATS): a sector's owner records its
	// lineage there, and a new owner resumes it where the previous one's
	// last flush (at most LineageFlushTicks before its newest snapshot)
	// left it.
	Lineage lineage.Store
	// Publisher receives the frames and takeover reports (required).
	Publisher Publisher
	// Policy decides when the sectors' runners snapshot (MaxChain
	// defaults to DefaultMaxChain).
	Policy snapshot.Policy
	// KeepChains is how many snapshot chains each sector keeps (see
	// snapshot.WriterConfig; default 2).
	KeepChains int
	// Ticker makes the worker compete for the world's Ticker lease
	// (TickerLease) and append the tick markers while it holds it.
	Ticker bool
	// TickerLeases, if set, holds the Ticker's lease instead of Leases: a
	// bucket of its own (OpenTickerLeases), whose TTL can be set apart
	// from the sectors'.
	TickerLeases *Leases
	// TickerGrace is how late the next tick marker may be before this
	// worker, competing for the Ticker's lease without holding it,
	// bridges the ticks itself (a replay.Standby fed by its runners'
	// ticks): 0 means replay.DefaultStandbyGrace periods, a negative
	// value no bridging.
	TickerGrace time.Duration
	// NoSecondTicker turns the always-on second Ticker off: no process
	// competes for TickerSecondLease, so the world's markers are appended
	// once, and a dead holder's ticks are bridged only after TickerGrace.
	// With it on (the default, with a standby: TickerGrace not negative),
	// every marker is appended twice while both Tickers live: one more
	// append of a ~20-byte record per tick, which the sequencer drops as a
	// duplicate of the holder's.
	NoSecondTicker bool
	// Standby makes the worker run a hot copy of every sector it does not
	// own (no lease, no appends, no snapshots, no frames): when it claims
	// one, it starts from the copy's state instead of restoring and
	// replaying (it falls back to the shared store if the copy is ahead of
	// what the previous owner got into the log).
	Standby bool
	// FramePart, if set, returns the game's part of a sector's frame after
	// a tick (SectorFrame.Payload); it runs on the sector's runner
	// goroutine and must copy what it needs from sim.
	FramePart func(shard uint32, sim replay.Sim) []byte
	// OnTakeover, if set, is told every sector this worker took over, once
	// it is live.
	OnTakeover func(TakeoverReport)
	// Logger receives the worker's messages (nil: slog.Default()).
	Logger *slog.Logger
	// NoPacing turns the takeover's pacing off: a sector taken over (or a
	// hot copy) then replays as fast as it can, on the cores the worker's
	// live sectors step on. With pacing (the default), each tick a
	// takeover replays (for 150 ms of waiting at most in all), and each
	// step, large snapshot link's decode and sim restore of a hot copy,
	// waits until the worker's live sectors have stepped the newest tick
	// and runs only in the two thirds of a period after that
	// (replay.Pacer).
	NoPacing bool
}

// Worker is a sector worker: one process of a world spread over many. It
// registers itself in the lease bucket and, through a Keeper, owns the
// sectors the deterministic assignment gives it among the live workers.
// For each sector it claims, it appends the lease claim to the log,
// restores the sector from the shared snapshot store (the newest usable
// chain, whoever wrote it) and runs its Runner from there under the
// lease's fencing epoch: the runner replays the log to the present, then
// runs live, appending its migrations tagged with the epoch, snapshotting
// into the shared store and publishing each tick's frame on NATS
// (SectorSubject). A sector whose lease is lost, or assigned to another
// worker, stops at once; a worker that was paused past its leases writes
// no snapshot and publishes no frame on waking (Keeper.Valid), and what
// it appends to the log carries a stale epoch, which every runner ignores.
type Worker struct {
	cfg    WorkerConfig
	log    *slog.Logger
	keeper *Keeper

	ctx     context.Context // Run's
	mu      sync.Mutex
	sectors map[uint32]*sectorRun
	hot     map[uint32]*hotCopy // Standby's copies of the sectors not owned
	wg      sync.WaitGroup

	// ticks, while runTicker runs with a standby, is told of every tick
	// marker this process's runners step.
	ticks atomic.Pointer[replay.Standby]
	// pacer paces the catch-up work behind the live sectors' ticks (nil:
	// WorkerConfig.NoPacing).
	pacer *replay.Pacer
}

// pacedStore is a snapshot store whose reads of a large snapshot wait,
// once read, for catch-up work's turn (replay.Pacer): a hot copy's
// restore decodes its chain one link at a time between the live sectors'
// ticks. The read itself (a NATS round trip) and a small link's decode
// do not wait.
type pacedStore struct {
	snapshot.Store
	pace func(context.Context) error // nil: none
}

// pacedDecodeBytes is the size from which a snapshot's decode waits for
// its turn.
const pacedDecodeBytes = 16 << 10

// Get implements snapshot.Store.
func (s pacedStore) Get(ctx context.Context, shard uint32, tick uint64) ([]byte, error) {
	b, err := s.Store.Get(ctx, shard, tick)
	if err == nil && s.pace != nil && len(b) >= pacedDecodeBytes {
		err = s.pace(ctx)
	}
	return b, err
}

// takeoverPace returns the pacing of one takeover's replay: the pacer's
// Wait, waiting at most maxTakeoverPacing in all (nil without a pacer).
func (w *Worker) takeoverPace() func(context.Context) error {
	if w.pacer == nil {
		return nil
	}
	return w.pacer.Bounded(maxTakeoverPacing)
}

// maxTakeoverPacing bounds how much a takeover's pacing delays its
// replay: the sector must be live again within 1 s of its owner's death,
// of which the lease's expiry takes about half.
const maxTakeoverPacing = 150 * time.Millisecond

// pacedSim returns a sector's new sim once catch-up work may run (pace;
// nil: at once): a restore builds and restores it right after.
func (w *Worker) pacedSim(ctx context.Context, sector uint32, pace func(context.Context) error) func() (replay.TableSim, error) {
	return func() (replay.TableSim, error) {
		if pace == nil {
			return w.cfg.Game.NewSim(sector)
		}
		if err := pace(ctx); err != nil {
			return nil, err
		}
		return w.cfg.Game.NewSim(sector)
	}
}

// observeTick tells the Ticker's standby, if any, that tick's marker
// arrived (a runner stepped it).
func (w *Worker) observeTick(tick uint64) {
	if sb := w.ticks.Load(); sb != nil {
		sb.Observe(tick)
	}
}

// hotCopy is a standby's copy of a sector it does not own: a runner
// without appender, snapshots or frames, following the log.
type hotCopy struct {
	cancel context.CancelFunc
	done   chan struct{}
	runner atomic.Pointer[replay.Runner]
	// recent are the frames of its last ticks (hotFrames at most, oldest
	// first), written by its runner's goroutine: the successor publishes
	// them, so that players miss no tick stepped between the previous
	// owner's last frame and the takeover.
	recent []SectorFrame
	// local keeps the copy's own snapshots (with WorkerConfig.Lineage):
	// a takeover starts from one at or before the shared lineage's last
	// tick, so that the ticks after it are recorded again.
	local snapshot.Store
}

// hotFrames is how many recent frames a hot copy keeps (4 s at 30 Hz).
const hotFrames = 128

// hotState is where a hot copy stood when it was stopped.
type hotState struct {
	sim    replay.TableSim
	cp     replay.Checkpoint
	recent []SectorFrame
	local  snapshot.Store // the copy's own snapshots (nil without lineage)
}

type sectorRun struct {
	lease   Lease
	cancel  context.CancelFunc
	done    chan struct{}
	stopped atomic.Bool
	runner  atomic.Pointer[replay.Runner]
}

// NewWorker returns a worker; Run runs it.
func NewWorker(cfg WorkerConfig) (*Worker, error) {
	if err := cfg.Game.Validate(); err != nil {
		return nil, err
	}
	switch {
	case cfg.World == 0:
		return nil, errors.New("natsworld: worker: world 0")
	case cfg.Log == nil || cfg.Leases == nil || cfg.Snapshots == nil || cfg.Publisher == nil:
		return nil, errors.New("natsworld: worker: a log, leases, a snapshot store and a publisher are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.KeepChains == 0 {
		cfg.KeepChains = 2
	}
	if cfg.Policy.MaxChain == 0 {
		cfg.Policy.MaxChain = DefaultMaxChain
	}
	w := &Worker{cfg: cfg, log: cfg.Logger.With("worker", cfg.Leases.Worker()), sectors: map[uint32]*sectorRun{}, hot: map[uint32]*hotCopy{}}
	if !cfg.NoPacing {
		w.pacer = replay.NewPacer(replay.PacerConfig{Rate: cfg.Game.TickRate})
	}
	k, err := NewKeeper(KeeperConfig{Leases: cfg.Leases, Sectors: cfg.Game.Shards, OnAcquire: w.acquire, OnLose: w.lose, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	w.keeper = k
	return w, nil
}

// Keeper returns the worker's lease keeper.
func (w *Worker) Keeper() *Keeper { return w.keeper }

// Run runs the worker until ctx ends; then it stops its sectors and
// releases their leases (and the Ticker's), so that the other workers
// take over at once. It returns ctx.Err().
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	w.ctx = ctx
	w.mu.Unlock()
	tickerDone, standbyDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(tickerDone)
		if w.cfg.Ticker {
			w.runTicker(ctx, w.tailWhenIdle)
		}
	}()
	go func() {
		defer close(standbyDone)
		if w.cfg.Standby {
			w.runStandby(ctx)
		}
	}()
	// The keeper outlives ctx until every sector has stopped: a stopping
	// sector writes its last lineage under its lease, and only then are
	// the leases released.
	kctx, kcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer kcancel()
	kdone := make(chan error, 1)
	go func() { kdone <- w.keeper.Run(kctx) }()
	<-tickerDone
	<-standbyDone
	<-ctx.Done()
	w.wg.Wait()
	kcancel()
	<-kdone
	return ctx.Err()
}

// acquire starts a sector the keeper claimed (OnAcquire).
func (w *Worker) acquire(l Lease) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ctx == nil || w.ctx.Err() != nil {
		return
	}
	ctx, cancel := context.WithCancel(w.ctx)
	sr := &sectorRun{lease: l, cancel: cancel, done: make(chan struct{})}
	w.sectors[l.Sector] = sr
	hc := w.hot[l.Sector]
	delete(w.hot, l.Sector)
	acquired := time.Now()
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer cancel()
		// A hot copy stops before the claim is appended: its checkpoint is
		// then before the claim, as a snapshot's is.
		w.runSector(ctx, sr, acquired, stopHot(hc))
	}()
}

// stopHot stops a hot copy and returns where it stood (nil if it was not
// running).
func stopHot(hc *hotCopy) *hotState {
	if hc == nil {
		return nil
	}
	hc.cancel()
	if r := hc.runner.Load(); r != nil {
		r.Kill()
	}
	<-hc.done
	r := hc.runner.Load()
	if r == nil {
		return nil
	}
	sim, ok := r.Sim().(replay.TableSim)
	if !ok {
		return nil
	}
	cp := r.Checkpoint()
	// Only a copy that read a lease claim of its sector counts, from the
	// log, the outputs validly there (unfenced, it counts those it
	// computed, which its successor's claim would then take as logged).
	if !slices.ContainsFunc(cp.Fences, func(f snapshot.Fence) bool { return f.Shard == r.Shard() && f.Epoch != 0 }) {
		return nil
	}
	return &hotState{sim: sim, cp: cp, recent: hc.recent, local: hc.local}
}

// runStandby keeps a hot copy of every sector this worker does not own.
func (w *Worker) runStandby(ctx context.Context) {
	t := time.NewTicker(w.cfg.Leases.TTL() / 4)
	defer t.Stop()
	for {
		w.mu.Lock()
		for s := range uint32(w.cfg.Game.Shards) {
			if hc := w.hot[s]; hc != nil {
				select {
				case <-hc.done: // it stopped on an error: start another
					delete(w.hot, s)
				default:
					continue
				}
			}
			if w.sectors[s] != nil {
				continue
			}
			hctx, cancel := context.WithCancel(ctx)
			hc := &hotCopy{cancel: cancel, done: make(chan struct{})}
			w.hot[s] = hc
			go w.runHot(hctx, s, hc)
		}
		w.mu.Unlock()
		select {
		case <-ctx.Done():
			w.mu.Lock()
			hot := w.hot
			w.hot = map[uint32]*hotCopy{}
			w.mu.Unlock()
			for _, hc := range hot {
				stopHot(hc)
			}
			return
		case <-t.C:
		}
	}
}

// runHot runs a hot copy of sector s: restored from the shared store, it
// follows the log and writes nothing anywhere.
func (w *Worker) runHot(ctx context.Context, s uint32, hc *hotCopy) {
	defer close(hc.done)
	defer hc.cancel()
	var pace func(context.Context) error
	if w.pacer != nil {
		pace = w.pacer.Wait
	}
	res, err := replay.RestoreShard(ctx, pacedStore{Store: w.cfg.Snapshots, pace: pace}, nil, s, w.pacedSim(ctx, s, pace))
	if err != nil {
		if ctx.Err() == nil {
			w.log.Warn("hot copy: restore", "sector", s, "err", err)
			sleep(ctx, time.Second)
		}
		return
	}
	var local *replay.SnapshotConfig
	if w.cfg.Lineage != nil {
		hc.local = snapshot.NewMemStore()
		local = &replay.SnapshotConfig{Store: hc.local, Policy: w.cfg.Policy, KeepChains: 2}
	}
	// Every step of a hot copy is paced: it goes after the owned
	// sectors' steps of the same tick.
	r, err := replay.NewRunner(replay.RunnerConfig{World: w.cfg.World, Shard: s, Sim: res.Sim, Source: w.cfg.Log.Subscribe(res.Start.Pos + 1),
		Start: res.Start, HistoryTicks: 1, Logger: w.cfg.Logger, Snapshots: local, Pace: pace, PaceUntil: math.MaxUint64,
		Observer: func(info replay.TickInfo) {
			w.observeTick(info.Tick)
			f := SectorFrame{World: w.cfg.World, Sector: s, Tick: info.Tick, Pos: info.Pos, Hash: info.Hash}
			f.Applied = appliedOf(info, nil)
			if w.cfg.FramePart != nil {
				f.Payload = w.cfg.FramePart(s, info.Sim)
			}
			if len(hc.recent) == hotFrames {
				hc.recent = append(hc.recent[:0], hc.recent[1:]...)
			}
			hc.recent = append(hc.recent, f)
		}})
	if err != nil {
		w.log.Warn("hot copy", "sector", s, "err", err)
		return
	}
	hc.runner.Store(r)
	if err := r.Run(ctx); err != nil && ctx.Err() == nil && !errors.Is(err, replay.ErrKilled) {
		w.log.Warn("hot copy stopped", "sector", s, "err", err)
		sleep(ctx, time.Second)
	}
}

// lose stops a sector at once (OnLose): its runner is killed (queued
// outputs and snapshots dropped: the next owner produces them again).
func (w *Worker) lose(l Lease, cause error) {
	w.mu.Lock()
	sr := w.sectors[l.Sector]
	if sr != nil && sr.lease.Epoch == l.Epoch {
		delete(w.sectors, l.Sector)
	} else {
		sr = nil
	}
	w.mu.Unlock()
	if sr == nil {
		return
	}
	sr.stopped.Store(true)
	sr.cancel()
	if r := sr.runner.Load(); r != nil {
		r.Kill()
	}
	select {
	case <-sr.done:
	case <-time.After(2 * time.Second):
		w.log.Error("sector runner did not stop within 2s; it can no longer publish or snapshot", "sector", l.Sector)
	}
	w.log.Info("stopped sector", "sector", l.Sector, "epoch", l.Epoch, "cause", cause)
}

// runSector runs a claimed sector until ctx ends or a newer claim fences
// it out.
func (w *Worker) runSector(ctx context.Context, sr *sectorRun, acquired time.Time, hot *hotState) {
	defer close(sr.done)
	s, epoch := sr.lease.Sector, sr.lease.Epoch
	log := w.log.With("sector", s, "epoch", epoch)
	// The claim goes into the log first: from its position on, every
	// runner ignores the outputs of older epochs, and this one learns
	// there how many of the sector's outputs are validly in the log.
	claim := replay.LeaseClaimRecord(s, epoch)
	// The restore reads only the shared store: it runs while the claim is
	// appended.
	type restored struct {
		res replay.Restored
		err error
	}
	if hot != nil && w.cfg.Lineage != nil {
		hot = w.rewindHot(ctx, s, hot)
	}
	// The takeover's replay is paced behind the worker's live sectors,
	// for maxTakeoverPacing at most. Its restore is not: mostly NATS round
	// trips, and pacing its decode lengthened the restore's median by
	// 58-94 ms in 3 of 4 cluster-test comparisons (docs/benchmarks.md,
	// session 11).
	pace := w.takeoverPace()
	var prefetch chan restored
	var pwg sync.WaitGroup
	defer pwg.Wait()
	if hot == nil {
		prefetch = make(chan restored, 1)
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			res, err := w.restore(ctx, s, w.sectorStore(s, epoch), nil)
			prefetch <- restored{res, err}
		}()
	}
	for {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := w.cfg.Log.Append(actx, claim)
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		log.Warn("append the lease claim; retrying", "err", err)
		if !sleep(ctx, 50*time.Millisecond) {
			return
		}
	}
	var tail uint64
	for {
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		t, err := w.cfg.Log.CheckTail(tctx)
		cancel()
		if err == nil {
			tail = t
			break
		}
		if ctx.Err() != nil || !sleep(ctx, 50*time.Millisecond) {
			return
		}
	}
	rep := TakeoverReport{World: w.cfg.World, Sector: s, Epoch: epoch, Worker: w.cfg.Leases.Worker(), Acquired: acquired.UnixNano(),
		Claimed: time.Now().UnixNano()}
	var first *replay.Restored
	var recent []SectorFrame
	standby := hot != nil
	if hot != nil {
		first, recent = &replay.Restored{Sim: hot.sim, Start: hot.cp}, hot.recent
	} else if r := <-prefetch; r.err == nil {
		first = &r.res
	} else if ctx.Err() == nil {
		log.Warn("restore; retrying", "err", r.err)
	}
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		err := w.runOnce(ctx, sr, &rep, tail, first, standby, recent, pace)
		first, recent = nil, nil
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, replay.ErrFenced):
			log.Warn("fenced out by a newer lease claim: stopping the sector", "err", err)
			return
		case standby && errors.Is(err, replay.ErrSnapshotAheadOfFence):
			// The hot copy had stepped ticks whose outputs the previous
			// owner never got into the log before the claim: restore.
			log.Info("hot copy ahead of the previous owner's outputs: restoring from the shared store instead")
			standby, rep.Restored, rep.Standby = false, 0, false
			continue
		}
		standby = false
		log.Warn("sector runner stopped; restoring it again", "err", err)
		if !sleep(ctx, backoff) {
			return
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// sectorStore is the shared snapshot store as the owner of sector at
// epoch writes it.
func (w *Worker) sectorStore(sector uint32, epoch uint64) fencedStore {
	return fencedStore{Store: w.cfg.Snapshots, valid: func() bool { return w.keeper.Valid(sector, epoch) }}
}

// restore restores sector from the shared store and drops the snapshots
// newer than the one restored: they were not usable (a previous owner
// died writing them), and no chain may mix owners.
//
// With lineage, it restores from a snapshot at or before the last tick
// the shared lineage store holds of the sector (if there is one): the
// previous owner flushed its lineage at most LineageFlushTicks before its
// newest snapshot, and the ticks in between must be recorded again, not
// left empty.
func (w *Worker) restore(ctx context.Context, sector uint32, store fencedStore, pace func(context.Context) error) (replay.Restored, error) {
	var src snapshot.Store = store
	if w.cfg.Lineage != nil {
		// The sector comes first: without the bound its lineage may miss
		// (or hold empty) the ticks after the last flush.
		if last, err := w.lineageTail(ctx, sector); err != nil {
			w.log.Warn("restore: the shared lineage's last tick unknown; restoring from the newest snapshot", "sector", sector, "err", err)
		} else {
			src = boundedStore{Store: store, max: last}
		}
	}
	res, err := replay.RestoreShard(ctx, pacedStore{Store: src, pace: pace}, nil, sector, w.pacedSim(ctx, sector, pace))
	if err != nil {
		return replay.Restored{}, err
	}
	if err := store.DeleteRange(ctx, sector, res.Start.Tick+1, math.MaxUint64); err != nil {
		return replay.Restored{}, fmt.Errorf("natsworld: sector %d: drop unusable snapshots: %w", sector, err)
	}
	return res, nil
}

// runOnce restores the sector from the shared store and runs its runner
// until it stops.
func (w *Worker) runOnce(ctx context.Context, sr *sectorRun, rep *TakeoverReport, tail uint64, start *replay.Restored, standby bool, recent []SectorFrame, pace func(context.Context) error) error {
	s, epoch := sr.lease.Sector, sr.lease.Epoch
	valid := func() bool { return w.keeper.Valid(s, epoch) }
	store := w.sectorStore(s, epoch)
	var res replay.Restored
	if start != nil {
		// Restored meanwhile, or a hot copy's state (whose first snapshot
		// will then be a full one).
		res = *start
	} else {
		var err error
		if res, err = w.restore(ctx, s, store, nil); err != nil {
			return err
		}
	}
	rep.Standby = standby
	if rep.Restored == 0 {
		rep.Restored, rep.SnapshotTick = time.Now().UnixNano(), res.Start.Tick
	}
	snaps := &replay.SnapshotConfig{Store: store, Policy: w.cfg.Policy, Tip: res.Tip, KeepChains: w.cfg.KeepChains}
	if res.Tip != nil {
		snaps.Restore = &res.Load
	}
	subject := SectorSubject(w.cfg.World, s)
	var buf []byte
	var applied []Applied
	rec := lineage.Nop
	var lin *lineage.Log
	flushed := false // this owner's first tick's lineage
	if w.cfg.Lineage != nil {
		lin = lineage.NewLog(lineage.LogOptions{Store: fencedLineage{Store: w.cfg.Lineage, valid: valid}, Background: true})
		defer func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := lin.Close(cctx); err != nil && !errors.Is(err, errNotOwner) {
				w.log.Warn("lineage: close", "sector", s, "err", err)
			}
		}()
		rec = lin
	}
	r, err := replay.NewRunner(replay.RunnerConfig{
		World: w.cfg.World, Shard: s, Sim: res.Sim, Source: w.cfg.Log.Subscribe(res.Start.Pos + 1), Start: res.Start,
		Epoch: epoch, Appender: w.cfg.Log, CommandKind: w.cfg.Game.CommandKind, HistoryTicks: 64, Snapshots: snaps,
		Recorder: rec, Logger: w.cfg.Logger,
		// The ticks through the log's tail at the claim are the
		// takeover's replay: paced behind the live sectors'.
		Pace: pace, PaceUntil: tail,
		Observer: func(info replay.TickInfo) {
			w.observeTick(info.Tick)
			if w.pacer != nil && info.Pos > tail {
				// Live: the worker's catch-up work waits for its ticks.
				defer w.pacer.Stepped(s, info.Tick)
			}
			if !valid() {
				return // paused past the lease: publish nothing
			}
			if lin != nil && !flushed {
				// Where this owner's lineage begins goes out at once: a
				// successor's restore is bounded by it (restore), even if
				// this owner dies before its first snapshot.
				flushed = true
				if err := lin.Flush(ctx); err != nil {
					w.log.Debug("lineage: first flush", "sector", s, "err", err)
				}
			}
			f := SectorFrame{World: w.cfg.World, Sector: s, Epoch: epoch, Tick: info.Tick, Pos: info.Pos, Hash: info.Hash,
				Published: time.Now().UnixNano()}
			applied = appliedOf(info, applied[:0])
			f.Applied = applied
			if w.cfg.FramePart != nil {
				f.Payload = w.cfg.FramePart(s, info.Sim)
			}
			buf = AppendSectorFrame(buf[:0], f)
			if err := w.cfg.Publisher.Publish(subject, buf); err != nil {
				w.log.Debug("publish frame", "sector", s, "tick", info.Tick, "err", err)
			}
			if rep.Live == 0 && info.Pos > tail {
				rep.Live, rep.LiveTick = time.Now().UnixNano(), info.Tick
				rep.Replayed = info.Tick - min(info.Tick, rep.SnapshotTick)
				w.report(*rep)
			}
		},
	})
	if err != nil {
		return err
	}
	sr.runner.Store(r)
	if w.pacer != nil {
		defer w.pacer.Leave(s)
	}
	if sr.stopped.Load() {
		r.Kill()
	}
	// A hot copy's last frames, now under this lease.
	for _, f := range recent {
		if !valid() {
			break
		}
		f.Epoch, f.Published = epoch, time.Now().UnixNano()
		buf = AppendSectorFrame(buf[:0], f)
		_ = w.cfg.Publisher.Publish(subject, buf)
	}
	err = r.Run(ctx)
	if errors.Is(err, replay.ErrSnapshotAheadOfFence) && res.Tip != nil {
		// The snapshot counts outputs this claim fenced out: restore from
		// an older one next time.
		if derr := store.DeleteRange(ctx, s, res.Tip.Tick, math.MaxUint64); derr != nil {
			return errors.Join(err, derr)
		}
	}
	return err
}

// report publishes and logs a takeover.
func (w *Worker) report(r TakeoverReport) {
	ms := func(a, b int64) float64 { return float64((b-a)/1000) / 1000 }
	var waits uint64
	var waited time.Duration
	if w.pacer != nil {
		waits, waited = w.pacer.Waited()
	}
	w.log.Info("sector live", "sector", r.Sector, "epoch", r.Epoch, "restore_ms", ms(r.Acquired, r.Restored),
		"replay_ms", ms(r.Restored, r.Live), "from_tick", r.SnapshotTick, "live_tick", r.LiveTick, "replayed", r.Replayed,
		"paced_waits", waits, "paced_ms", waited.Milliseconds())
	if b, err := json.Marshal(r); err == nil {
		_ = w.cfg.Publisher.Publish(TakeoverSubject(w.cfg.World), b)
	}
	if w.cfg.OnTakeover != nil {
		w.cfg.OnTakeover(r)
	}
}

// runTicker holds the world's Ticker lease when it can and runs the
// Ticker while it holds it.
//
// Unlike a sector's owner, the Ticker's holder stops only when it learns
// that another claimed the lease (ErrLost), not when it merely cannot
// renew it in time: two Tickers overlapping are harmless (each tick
// marker has a deterministic id, so the log stores each tick once), while
// a holder that stopped on a slow renewal would leave the world without
// ticks until someone claims the lease. So a short Ticker lease
// (OpenTickerLeases) costs a takeover only when the holder dies.
//
// And even then the world need not wait for the lease to expire: while
// it does not hold the lease, the process runs a replay.Standby (unless
// TickerGrace is negative) that keeps the holder's schedule from the
// markers arriving (its runners' ticks, or tail's) and, once a marker is
// TickerGrace overdue, appends the markers itself on that schedule. It
// stops bridging as soon as the lease was written again since the bridge
// began (its holder renewed it, alive after all, or someone claimed it);
// if this process claims it, its Ticker goes on from the bridge's next
// tick on the same schedule.
func (w *Worker) runTicker(ctx context.Context, tail func(ctx context.Context, observe func(uint64))) {
	l := w.cfg.Leases
	if w.cfg.TickerLeases != nil {
		l = w.cfg.TickerLeases
	}
	ttl := l.TTL()
	t := time.NewTicker(ttl / 4)
	defer t.Stop()
	// A KV operation may take longer than a short lease's half: it is
	// bounded by 200 ms at least (the next round waits for it).
	opTimeout := max(ttl/2, 200*time.Millisecond)
	var sb *replay.Standby
	bridgeBegan := make(chan struct{}, 1)
	if w.cfg.TickerGrace >= 0 {
		sb, _ = replay.NewStandby(replay.StandbyConfig{World: w.cfg.World, Log: w.cfg.Log, Rate: w.cfg.Game.TickRate, Grace: w.cfg.TickerGrace,
			OnBridge: func(bridging bool, from uint64) {
				if bridging && sb.Hot() {
					w.log.Info("the second Ticker appends the tick markers on the world's schedule", "from_tick", from)
				} else if bridging {
					w.log.Info("the tick markers are overdue: bridging them until the Ticker's lease is held again", "from_tick", from)
					select {
					case bridgeBegan <- struct{}{}:
					default:
					}
				}
			}})
	}
	var swg sync.WaitGroup
	if sb != nil {
		sctx, scancel := context.WithCancel(ctx)
		defer func() { scancel(); swg.Wait() }()
		swg.Add(1)
		go func() { defer swg.Done(); _ = sb.Run(sctx) }()
		if tail != nil {
			swg.Add(1)
			go func() { defer swg.Done(); tail(sctx, sb.Observe) }()
		}
		w.ticks.Store(sb)
		defer w.ticks.Store(nil)
	}
	var (
		held *Lease
		cur  struct {
			cancel context.CancelFunc
			done   chan struct{}
			tk     *replay.Ticker
			// durable is the last tick the Ticker made durable.
			durable *atomic.Uint64
		}
		// baseline is the lease's revision when the running bridge began
		// (0: not read yet).
		baseline uint64
		// second is the second Ticker's lease while this process holds it
		// (its standby is hot).
		second *Lease
	)
	stop := func(why string, err error) {
		cur.cancel()
		<-cur.done
		w.log.Warn("stopped the ticker", "why", why, "err", err)
		held = nil
		if sb != nil {
			sb.Follow(cur.durable.Load())
		}
	}
	// start runs a Ticker: from the standby's schedule if it has one (the
	// bridge's next tick), else from the last marker in the log. A stale
	// ticker's markers carry the same ids, so the log stores each tick
	// once.
	var failedAt time.Time
	start := func() {
		cfg := replay.TickerConfig{World: w.cfg.World, Log: w.cfg.Log, Rate: w.cfg.Game.TickRate}
		if sb != nil {
			if next, due, ok := sb.Lead(ctx); ok {
				cfg.Start, cfg.Due, cfg.Skip = next, due, sb.Seen
			}
			// The world's shared schedule, which the second Ticker keeps
			// too: their markers coincide.
			cfg.DueOf, cfg.Rebase = sb.DueOf, sb.Rebase
		}
		durable := &atomic.Uint64{}
		cfg.OnTick = func(tick uint64, _ time.Time) { durable.Store(tick) }
		tk, _ := replay.NewTicker(cfg)
		var tctx context.Context
		tctx, cur.cancel = context.WithCancel(ctx)
		done := make(chan struct{})
		cur.done, cur.tk, cur.durable = done, tk, durable
		go func() {
			defer close(done)
			if err := tk.Run(tctx); err != nil && tctx.Err() == nil {
				w.log.Error("ticker stopped", "err", err)
			}
		}()
	}
	for {
		octx, cancel := context.WithTimeout(ctx, opTimeout)
		if held != nil {
			if err := l.Renew(octx, held); errors.Is(err, ErrLost) {
				stop("lease lost", err)
			} else {
				// A Ticker that failed (the log not ready yet, say) is
				// started again, at most every 100 ms: the holder must
				// tick, or nobody does.
				select {
				case <-cur.done:
					if time.Since(failedAt) >= 100*time.Millisecond {
						failedAt = time.Now()
						w.log.Warn("restarting the ticker")
						start()
					}
				default:
				}
			}
		} else if lease, err := l.Claim(octx, TickerLease); err == nil {
			held = &lease
			start()
			w.log.Info("holding the ticker lease: ticking", "epoch", lease.Epoch, "from_tick", cur.tk.Next())
			if second != nil {
				// The holder is not its own second: another process may
				// take that role.
				sb.SetHot(false)
				_ = l.Release(octx, *second)
				second = nil
			}
		} else if sb != nil && !w.cfg.NoSecondTicker && second == nil {
			if lease, err := l.Claim(octx, TickerSecondLease); err == nil {
				second = &lease
				sb.SetHot(true)
				w.log.Info("holding the second Ticker's lease: appending every tick marker with the holder's", "epoch", lease.Epoch)
			}
		} else if second != nil {
			if err := l.Renew(octx, second); errors.Is(err, ErrLost) {
				second = nil
				sb.SetHot(false)
				w.log.Warn("lost the second Ticker's lease", "err", err)
			}
		} else if sb != nil && sb.Bridging() {
			// Bridging: until the lease is written again (renewed by a
			// holder alive after all, or claimed anew). A lease that
			// expired and is not claimed yet bridges on.
			if rev, err := l.revision(octx, TickerLease); err == nil && rev != 0 {
				if baseline == 0 {
					baseline = rev
				} else if rev != baseline {
					sb.StandDown()
					started, ticks := sb.Bridges()
					w.log.Info("the Ticker's lease is held again: stopped bridging", "bridges", started, "bridged_ticks", ticks)
					baseline = 0
				}
			}
		} else {
			baseline = 0
		}
		cancel()
		select {
		case <-ctx.Done():
			if held != nil {
				cur.cancel()
				<-cur.done
				rctx, rcancel := context.WithTimeout(context.Background(), ttl)
				_ = l.Release(rctx, *held)
				rcancel()
			}
			if second != nil {
				rctx, rcancel := context.WithTimeout(context.Background(), ttl)
				_ = l.Release(rctx, *second)
				rcancel()
			}
			return
		case <-t.C:
		case <-bridgeBegan:
			baseline = 0 // read the lease's revision at once
		}
	}
}

// idle reports whether the worker runs no runner (no sector owned, no hot
// copy): none of its runners tells the Ticker's standby of the markers.
func (w *Worker) idle() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.sectors) == 0 && len(w.hot) == 0
}

// tailWhenIdle tails the log's tick markers (tailTicks) while the worker
// runs no runner, so that a worker owning no sector still keeps the
// holder's schedule (and bridges, or runs the second Ticker); a worker
// with runners sees the markers from them.
func (w *Worker) tailWhenIdle(ctx context.Context, observe func(uint64)) {
	for ctx.Err() == nil {
		if !w.idle() {
			sleep(ctx, 100*time.Millisecond)
			continue
		}
		tctx, cancel := context.WithCancel(ctx)
		go func() {
			for sleep(tctx, 100*time.Millisecond) {
				if !w.idle() {
					cancel()
				}
			}
		}()
		tailTicks(tctx, w.cfg.Log, w.cfg.World, observe)
		cancel()
	}
}

// tailTicks tells observe of every tick marker of world appended to log
// from its tail on, until ctx ends: how a process with no runner of its
// own (a front end) sees the holder's schedule. It reads every entry, as
// a runner does (one more reader of the log per such process).
func tailTicks(ctx context.Context, log replay.TickLog, worldID uint32, observe func(uint64)) {
	id := replay.TickerClientID(worldID)
	for ctx.Err() == nil {
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		tail, err := log.CheckTail(tctx)
		cancel()
		if err != nil {
			sleep(ctx, 100*time.Millisecond)
			continue
		}
		// Read waits at the tail for the next entries.
		for from := tail + 1; ctx.Err() == nil; {
			entries, err := log.Read(ctx, from, 1024)
			if err != nil || len(entries) == 0 || entries[0].Pos != from {
				break // trimmed, or the log failed: start again at its tail
			}
			for _, e := range entries {
				if e.Record.ID.Client != id {
					continue
				}
				if env, err := wire.DecodeEnvelope(e.Record.Data); err == nil && env.Kind == wire.EnvelopeTick {
					observe(env.Tick)
				}
			}
			from = entries[len(entries)-1].Pos + 1
		}
		sleep(ctx, 100*time.Millisecond)
	}
}

// fencedStore is the shared snapshot store as a sector's owner sees it:
// writes and deletions only while its lease is valid.
type fencedStore struct {
	snapshot.Store
	valid func() bool
}

// errNotOwner refuses a write of a sector whose lease is not valid.
var errNotOwner = errors.New("natsworld: write refused: the sector's lease is not valid")

// lineageTail returns the newest tick of sector the shared lineage store
// holds (0: none).
func (w *Worker) lineageTail(ctx context.Context, sector uint32) (uint64, error) {
	var infos []lineage.RangeInfo
	var err error
	if ls, ok := w.cfg.Lineage.(*LineageStore); ok {
		infos, err = ls.shardRanges(ctx, lineage.ShardID(sector))
	} else {
		infos, err = w.cfg.Lineage.Ranges(ctx)
	}
	if err != nil {
		return 0, fmt.Errorf("natsworld: sector %d: the shared lineage's last tick: %w", sector, err)
	}
	var last uint64
	for _, in := range infos {
		if uint32(in.Shard) == sector {
			last = max(last, in.LastTick)
		}
	}
	return last, nil
}

// rewindHot returns where a takeover from hot starts, with lineage: hot
// itself if it is not past the shared lineage's last tick of sector s,
// else the copy's own newest snapshot at or before that tick (its state
// then steps the ticks in between again, recording their lineage). It
// returns nil (restore from the shared store) if there is none usable.
func (w *Worker) rewindHot(ctx context.Context, s uint32, hot *hotState) *hotState {
	last, err := w.lineageTail(ctx, s)
	switch {
	case err != nil:
		w.log.Warn("standby: the shared lineage's last tick unknown; restoring from the shared store", "sector", s, "err", err)
		return nil
	case hot.cp.Tick <= last:
		return hot
	case last == 0 && hot.cp.Tick >= freshReplayTicks:
		return hot // no lineage of the sector yet, late in the world: it begins here
	case hot.local == nil || last == 0:
		return nil // a young world: the restore replays it from the start
	}
	res, err := replay.RestoreShard(ctx, boundedStore{Store: hot.local, max: last, strict: true}, nil, s,
		func() (replay.TableSim, error) { return w.cfg.Game.NewSim(s) })
	if err != nil || res.Tip == nil || !slices.ContainsFunc(res.Start.Fences, func(f snapshot.Fence) bool { return f.Shard == s && f.Epoch != 0 }) {
		return nil // no local snapshot at or before it, or one from before the copy read a claim of the sector
	}
	return &hotState{sim: res.Sim, cp: res.Start, recent: hot.recent}
}

// boundedStore is a snapshot store whose List leaves out the snapshots
// after tick max: a restore from it starts at max at the latest. When
// none is at or before max, it lists nothing (a replay from the world's
// start) if the newest is under freshReplayTicks or strict, else all of
// them (a lineage gap rather than a long replay).
type boundedStore struct {
	snapshot.Store
	max    uint64
	strict bool
}

// freshReplayTicks is the age of a world (its newest snapshot's tick)
// under which a takeover rather replays it from its start than leaves a
// lineage gap (about half a minute of play: a fraction of a second to
// replay).
const freshReplayTicks = 1024

// List implements snapshot.Store.
func (s boundedStore) List(ctx context.Context, shard uint32) ([]snapshot.Meta, error) {
	metas, err := s.Store.List(ctx, shard)
	if err != nil {
		return nil, err
	}
	var out []snapshot.Meta
	for _, m := range metas {
		if m.Tick <= s.max {
			out = append(out, m)
		}
	}
	if len(out) == 0 && !s.strict && slices.ContainsFunc(metas, func(m snapshot.Meta) bool { return m.Tick >= freshReplayTicks }) {
		return metas, nil
	}
	return out, nil
}

// fencedLineage is the shared lineage store as a sector's owner sees it:
// writes and deletions only while its lease is valid (a stale owner's
// partial range would replace a longer one).
type fencedLineage struct {
	lineage.Store
	valid func() bool
}

// PutRange implements lineage.Store. A range that does not go out (NATS
// failing over, the lease not valid for a moment while a renewal is late)
// is tried again for up to lineageRetry: the lineage log does not write
// a sealed range twice, and a lost one leaves a gap.
func (s fencedLineage) PutRange(ctx context.Context, info lineage.RangeInfo, data []byte) error {
	return s.retry(ctx, func() error { return s.Store.PutRange(ctx, info, data) })
}

// lineageRetry bounds how long a lineage write is tried again.
const lineageRetry = 10 * time.Second

// retry runs put while the lease is valid, again after a failure or an
// invalid moment, with backoff, until it succeeds, ctx ends or
// lineageRetry has passed (then errNotOwner if the lease was never valid
// again, else put's error).
func (s fencedLineage) retry(ctx context.Context, put func() error) error {
	deadline := time.Now().Add(lineageRetry)
	backoff := 20 * time.Millisecond
	for {
		err := errNotOwner
		if s.valid() {
			if err = put(); err == nil {
				return nil
			}
		}
		if ctx.Err() != nil || time.Now().Add(backoff).After(deadline) || !sleep(ctx, backoff) {
			return err
		}
		backoff = min(2*backoff, time.Second)
	}
}

// DeleteBefore implements lineage.Store.
func (s fencedLineage) DeleteBefore(ctx context.Context, shard lineage.ShardID, firstTick uint64) error {
	if !s.valid() {
		return errNotOwner
	}
	return s.Store.DeleteBefore(ctx, shard, firstTick)
}

// PutMeta implements lineage.Store (tried again as PutRange).
func (s fencedLineage) PutMeta(ctx context.Context, name string, value []byte) error {
	return s.retry(ctx, func() error { return s.Store.PutMeta(ctx, name, value) })
}

// Close implements lineage.Store: the shared store outlives a sector.
func (s fencedLineage) Close() error { return nil }

// Put implements snapshot.Store.
func (s fencedStore) Put(ctx context.Context, meta snapshot.Meta, b []byte) error {
	if !s.valid() {
		return errNotOwner
	}
	return s.Store.Put(ctx, meta, b)
}

// DeleteRange implements snapshot.Store.
func (s fencedStore) DeleteRange(ctx context.Context, shard uint32, from, to uint64) error {
	if !s.valid() {
		return errNotOwner
	}
	return s.Store.DeleteRange(ctx, shard, from, to)
}

// Close implements snapshot.Store: the shared store outlives a sector.
func (s fencedStore) Close() error { return nil }

func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// appliedOf appends to dst the player commands info's tick applied.
func appliedOf(info replay.TickInfo, dst []Applied) []Applied {
	for i := range info.Commands {
		if c := &info.Commands[i]; c.Player != 0 {
			dst = append(dst, Applied{Player: c.Player, Seq: c.ClientSeq})
		}
	}
	return dst
}
