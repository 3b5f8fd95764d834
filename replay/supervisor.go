package replay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anoptic/broadside/lineage"
	"github.com/anoptic/broadside/replay/snapshot"
)

// ErrWedged is the cause of a recovery of a runner that stopped making
// progress while the log advanced.
var ErrWedged = errors.New("replay: runner wedged")

// ShardSpec describes one shard a Supervisor runs.
type ShardSpec struct {
	Shard uint32
	// NewSim returns a fresh sim of the shard at the start of the world;
	// recovery restores snapshots into it.
	NewSim func() (TableSim, error)
}

// SupervisorConfig configures a Supervisor.
type SupervisorConfig struct {
	// World names the world (output ids derive from it).
	World uint32
	// Shards are the shards to run (required, distinct).
	Shards []ShardSpec
	// Open returns a Source delivering the log from position from on
	// (required); for cmdlog, client.Subscribe(from).
	Open func(ctx context.Context, shard uint32, from uint64) (Source, error)
	// Appender receives the shards' outputs (nil: dropped).
	Appender Appender
	// Store keeps snapshots; nil disables them (recovery then replays the
	// log from its start).
	Store snapshot.Store
	// Codec is shared by loads (nil: snapshot.DefaultCodec); writers have
	// their own.
	Codec *snapshot.Codec
	// Policy decides when runners capture.
	Policy snapshot.Policy
	// KeepChains and PruneEvery tune snapshot retention (see
	// snapshot.WriterConfig).
	KeepChains, PruneEvery int
	// Recorder returns the lineage recorder of a shard's runner (nil:
	// lineage.Nop); it is called for every new runner (see
	// RunnerConfig.Recorder).
	Recorder func(shard uint32) lineage.Recorder
	// CommandKind gives the lineage kind of a command (see RunnerConfig).
	CommandKind func(Command) uint8
	// OnTick, if set, is called on the runner's goroutine after every tick
	// of every shard; it must return quickly.
	OnTick func(TickInfo)
	// OnRecovery, if set, is called when a shard that died is live again
	// (or its recovery failed and will be retried).
	OnRecovery func(Recovery)
	// OnDivergence, if set, is called when a shard publishes a hash for a
	// tick that differs from the one published for it before.
	OnDivergence func(Divergence)
	// OnStored, if set, is called for every snapshot stored or dropped.
	OnStored func(snapshot.Stored)
	// WedgeTimeout is how long a runner may go without stepping while the
	// log advances before it is declared wedged (default 2 s).
	WedgeTimeout time.Duration
	// LogTail, if set, returns the log's tail: a silent runner is wedged
	// when the log advanced past it. Without it (and in any case), a
	// silent runner is wedged when another shard stepped further.
	LogTail func(ctx context.Context) (uint64, error)
	// RestartBackoff is the wait before restarting a shard that died
	// again before it was live (doubling, up to MaxRestartBackoff; default
	// 50 ms and 5 s). The first restart is immediate.
	RestartBackoff, MaxRestartBackoff time.Duration
	// HistoryTicks is the length of each shard's hash history (default
	// DefaultHistoryTicks).
	HistoryTicks int
	// Logger receives events (nil: slog.Default()).
	Logger *slog.Logger
	// Clock is the supervisor's and its runners' time source: death and
	// live times, the wedge check's period and timeout, and the restart
	// backoff (nil: SystemClock).
	Clock Clock
	// Synchronous makes the runners start no helper goroutines (see
	// RunnerConfig.Synchronous); the replay simulator sets it.
	Synchronous bool
	// Bugs injects known recovery bugs, to prove that the replay simulator
	// catches them (never set outside its tests).
	Bugs Bugs
}

// Recovery reports one recovery of a shard.
type Recovery struct {
	Shard uint32
	// Cause is why the previous runner stopped (ErrKilled, ErrWedged, a
	// wrapped ErrSimPanic, a source error).
	Cause error
	// Died is when the death was detected; Live when the new runner had
	// replayed to the tick the world had reached (Duration between them).
	Died, Live time.Time
	Duration   time.Duration
	// Snapshot is the snapshot restored (nil: replayed from the log's
	// start) and Load its load.
	Snapshot *snapshot.Meta
	Load     snapshot.LoadStats
	// Fallback is set when snapshots existed but none was usable.
	Fallback error
	// From is the checkpoint replay started from, LiveTick the tick at
	// which the shard was live again, Replayed the ticks in between.
	From     Checkpoint
	LiveTick uint64
	Replayed uint64
	// Checked counts replayed ticks whose hash was compared with the hash
	// published before the death; Mismatched those that differed.
	Checked, Mismatched uint64
	// Err is set when the recovery itself failed (it is retried).
	Err error
}

// Divergence reports a replayed tick whose hash differs from the one
// published for it before.
type Divergence struct {
	Shard     uint32
	Tick      uint64
	Want, Got uint64
}

// ShardStatus is a shard's state in a Supervisor.
type ShardStatus struct {
	Shard uint32
	// Tick is the last tick its current runner stepped; Published the
	// highest tick any of its runners published.
	Tick, Published uint64
	// Incarnation counts the shard's runners; Deaths the ones that died.
	Incarnation, Deaths int
	// Recovering is true until a restarted runner is live again.
	Recovering bool
	// Done is true when the shard's log ended.
	Done bool
}

// Supervisor runs a world's shard runners, each in its own goroutine, and
// recovers any that dies (returns an error, panics, is killed) or wedges
// (no progress while the log advances): it restores the newest snapshot
// chain into a fresh sim, replays the log from the snapshot to where the
// world is, checks every replayed hash against the hash published before,
// and resumes live play. The other shards keep ticking throughout.
type Supervisor struct {
	cfg    SupervisorConfig
	log    *slog.Logger
	shards []*shardState

	changedMu sync.Mutex
	changed   chan struct{}

	running  atomic.Bool
	wg       sync.WaitGroup // incarnations that were not abandoned
	abandonN atomic.Int64   // abandoned incarnations still running
}

type shardState struct {
	spec ShardSpec
	hist *HashHistory

	mu       sync.Mutex
	runner   *Runner
	cur      *incarnation
	count    int            // incarnations started
	recovery *recoveryState // non-nil until the current runner is live
	deaths   int
	failures int // deaths since the shard was last live
	done     bool

	published atomic.Uint64
}

// incarnation is one goroutine running a shard's runners. The fields are
// guarded by the shard's mu.
type incarnation struct {
	cancel context.CancelFunc
	// exited is set when the goroutine returns; abandoned when it was
	// replaced as wedged (it then counts in Supervisor.abandonN instead of
	// Supervisor.wg).
	exited, abandoned bool
}

// recoveryState tracks a restarted runner until it is live.
type recoveryState struct {
	report  Recovery
	target  uint64
	checked atomic.Uint64
	bad     atomic.Uint64
}

// NewSupervisor returns a supervisor; Run runs it.
func NewSupervisor(cfg SupervisorConfig) (*Supervisor, error) {
	if len(cfg.Shards) == 0 || cfg.Open == nil {
		return nil, fmt.Errorf("replay: supervisor of world %d: shards and Open are required", cfg.World)
	}
	if cfg.WedgeTimeout <= 0 {
		cfg.WedgeTimeout = 2 * time.Second
	}
	if cfg.RestartBackoff <= 0 {
		cfg.RestartBackoff = 50 * time.Millisecond
	}
	if cfg.MaxRestartBackoff <= 0 {
		cfg.MaxRestartBackoff = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = SystemClock{}
	}
	s := &Supervisor{cfg: cfg, log: cfg.Logger.With("world", cfg.World), changed: make(chan struct{})}
	seen := map[uint32]bool{}
	for _, sp := range cfg.Shards {
		if err := checkShard(sp.Shard); err != nil {
			return nil, err
		}
		if seen[sp.Shard] || sp.NewSim == nil {
			return nil, fmt.Errorf("replay: supervisor of world %d: shard %d duplicated or without NewSim", cfg.World, sp.Shard)
		}
		seen[sp.Shard] = true
		s.shards = append(s.shards, &shardState{spec: sp, hist: NewHashHistory(cfg.HistoryTicks)})
	}
	return s, nil
}

// Run runs every shard until ctx ends (it returns ctx.Err()) or every
// shard's log ended (nil). It waits for its runners, except those
// abandoned as wedged inside Step (see Abandoned).
func (s *Supervisor) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return fmt.Errorf("replay: supervisor of world %d is already running", s.cfg.World)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	clock := s.cfg.Clock
	for _, sh := range s.shards {
		s.startIncarnation(ctx, sh, nil, clock.Now())
	}
	allDone := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(allDone)
	}()
	period := max(s.cfg.WedgeTimeout/4, time.Millisecond)
	check := clock.After(period)
	for {
		select {
		case <-ctx.Done():
			<-allDone
			return ctx.Err()
		case <-allDone:
			return nil
		case <-check:
			s.checkWedged(ctx)
			check = clock.After(period)
		}
	}
}

// Kill stops shard's current runner as a crash would (a test and chaos
// hook); the supervisor then recovers it. It reports whether a runner was
// running.
func (s *Supervisor) Kill(shard uint32) bool {
	sh := s.shard(shard)
	if sh == nil {
		return false
	}
	sh.mu.Lock()
	r := sh.runner
	sh.mu.Unlock()
	if r == nil {
		return false
	}
	r.Kill()
	return true
}

// SnapshotNext makes every shard's current runner capture a full snapshot
// after its next tick (see Runner.SnapshotNext); OnStored reports them.
func (s *Supervisor) SnapshotNext() {
	for _, sh := range s.shards {
		sh.mu.Lock()
		if r := sh.runner; r != nil {
			r.SnapshotNext()
		}
		sh.mu.Unlock()
	}
}

// Hashes returns the hash history of shard across its runners, or nil for
// an unknown shard.
func (s *Supervisor) Hashes(shard uint32) *HashHistory {
	if sh := s.shard(shard); sh != nil {
		return sh.hist
	}
	return nil
}

// Status returns the state of every shard.
func (s *Supervisor) Status() []ShardStatus {
	out := make([]ShardStatus, 0, len(s.shards))
	for _, sh := range s.shards {
		sh.mu.Lock()
		st := ShardStatus{Shard: sh.spec.Shard, Published: sh.published.Load(), Incarnation: sh.count,
			Deaths: sh.deaths, Recovering: sh.recovery != nil, Done: sh.done}
		if sh.runner != nil {
			st.Tick = sh.runner.Tick()
		}
		sh.mu.Unlock()
		out = append(out, st)
	}
	return out
}

// Stats returns the counters of shard's current runner.
func (s *Supervisor) Stats(shard uint32) (RunnerStats, bool) {
	sh := s.shard(shard)
	if sh == nil {
		return RunnerStats{}, false
	}
	sh.mu.Lock()
	r := sh.runner
	sh.mu.Unlock()
	if r == nil {
		return RunnerStats{}, false
	}
	return r.Stats(), true
}

// Abandoned returns the number of runners abandoned as wedged whose
// goroutine has not returned yet.
func (s *Supervisor) Abandoned() int { return int(s.abandonN.Load()) }

// WaitAbandoned waits until every abandoned runner's goroutine returned.
func (s *Supervisor) WaitAbandoned(ctx context.Context) error {
	for s.abandonN.Load() > 0 {
		select {
		case <-s.cfg.Clock.After(5 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// WaitTick waits until every shard is live (not recovering) and has stepped
// tick, or its log ended.
func (s *Supervisor) WaitTick(ctx context.Context, tick uint64) error {
	for {
		s.changedMu.Lock()
		ch := s.changed
		s.changedMu.Unlock()
		ready := true
		for _, sh := range s.shards {
			sh.mu.Lock()
			ok := sh.done || (sh.recovery == nil && sh.runner != nil && sh.runner.Tick() >= tick)
			sh.mu.Unlock()
			if !ok {
				ready = false
				break
			}
		}
		if ready {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (s *Supervisor) notify() {
	s.changedMu.Lock()
	close(s.changed)
	s.changed = make(chan struct{})
	s.changedMu.Unlock()
}

func (s *Supervisor) shard(id uint32) *shardState {
	for _, sh := range s.shards {
		if sh.spec.Shard == id {
			return sh
		}
	}
	return nil
}

// worldTick returns the highest tick published by any shard.
func (s *Supervisor) worldTick() uint64 {
	var t uint64
	for _, sh := range s.shards {
		t = max(t, sh.published.Load())
	}
	return t
}

// startIncarnation starts a new runner goroutine for sh; cause is why the
// previous one stopped (nil at start).
func (s *Supervisor) startIncarnation(ctx context.Context, sh *shardState, cause error, died time.Time) {
	ictx, cancel := context.WithCancel(ctx)
	inc := &incarnation{cancel: cancel}
	sh.mu.Lock()
	sh.count++
	sh.cur = inc
	sh.runner = nil
	sh.recovery = &recoveryState{report: Recovery{Shard: sh.spec.Shard, Cause: cause, Died: died}, target: s.worldTick()}
	sh.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer cancel()
		s.incarnate(ictx, sh, inc)
		sh.mu.Lock()
		inc.exited = true
		abandoned := inc.abandoned
		sh.mu.Unlock()
		if abandoned {
			s.abandonN.Add(-1)
		} else {
			s.wg.Done()
		}
	}()
}

// current reports whether inc is sh's current incarnation.
func (sh *shardState) current(inc *incarnation) bool {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.cur == inc
}

// incarnate runs sh's runners for incarnation inc: restore, run, and on a
// death restore and run again, until ctx ends, the log ends or the
// incarnation is replaced.
func (s *Supervisor) incarnate(ctx context.Context, sh *shardState, inc *incarnation) {
	backoff := time.Duration(0)
	for {
		if backoff > 0 {
			select {
			case <-s.cfg.Clock.After(backoff):
			case <-ctx.Done():
				return
			}
		}
		err := s.runOnce(ctx, sh, inc)
		if !sh.current(inc) || ctx.Err() != nil {
			return
		}
		if err == nil {
			sh.mu.Lock()
			sh.done, sh.recovery = true, nil
			sh.mu.Unlock()
			s.notify()
			return
		}
		died := s.cfg.Clock.Now()
		sh.mu.Lock()
		sh.deaths++
		sh.failures++
		failures := sh.failures
		sh.runner = nil
		unfinished := sh.recovery
		sh.recovery = &recoveryState{report: Recovery{Shard: sh.spec.Shard, Cause: err, Died: died}, target: s.worldTick()}
		sh.mu.Unlock()
		if unfinished != nil && unfinished.report.Cause != nil && s.cfg.OnRecovery != nil {
			rep := unfinished.report
			rep.Err = fmt.Errorf("replay: shard %d: recovery did not complete: %w", sh.spec.Shard, err)
			rep.Checked, rep.Mismatched = unfinished.checked.Load(), unfinished.bad.Load()
			s.cfg.OnRecovery(rep)
		}
		s.notify()
		s.log.Warn("shard runner died; recovering", "shard", sh.spec.Shard, "err", err)
		backoff = 0
		if failures > 1 {
			backoff = min(s.cfg.RestartBackoff<<min(failures-2, 20), s.cfg.MaxRestartBackoff)
		}
	}
}

// runOnce restores sh and runs one runner until it stops.
func (s *Supervisor) runOnce(ctx context.Context, sh *shardState, inc *incarnation) error {
	shard := sh.spec.Shard
	rs := s.recoveryOf(sh)
	restored, err := RestoreShard(ctx, s.cfg.Store, s.cfg.Codec, shard, sh.spec.NewSim)
	if err == nil && s.cfg.Store != nil {
		// Snapshots newer than the one restored were not usable (or were
		// left by a runner that died mid-write): drop them so no chain
		// mixes incarnations.
		err = s.cfg.Store.DeleteRange(ctx, shard, restored.Start.Tick+1, math.MaxUint64)
	}
	var src Source
	if err == nil {
		src, err = s.cfg.Open(ctx, shard, restored.Start.Pos+1)
	}
	if err == nil && s.cfg.Bugs.SkipCommandsAfterSnapshot && restored.Tip != nil {
		src = &skipToMarker{src: src}
	}
	var r *Runner
	if err == nil {
		var snaps *SnapshotConfig
		if s.cfg.Store != nil {
			snaps = &SnapshotConfig{Store: s.cfg.Store, Policy: s.cfg.Policy, Tip: restored.Tip, KeepChains: s.cfg.KeepChains,
				PruneEvery: s.cfg.PruneEvery, OnStored: s.cfg.OnStored}
			if restored.Tip != nil {
				snaps.Restore = &restored.Load
			}
		}
		var rec lineage.Recorder
		if s.cfg.Recorder != nil {
			rec = s.cfg.Recorder(shard)
		}
		r, err = NewRunner(RunnerConfig{
			World: s.cfg.World, Shard: shard, Sim: restored.Sim, Source: src, Start: restored.Start,
			Appender: s.cfg.Appender, Recorder: rec, CommandKind: s.cfg.CommandKind, HistoryTicks: 1, Snapshots: snaps, Logger: s.cfg.Logger,
			Clock: s.cfg.Clock, Synchronous: s.cfg.Synchronous, bugs: s.cfg.Bugs,
			Observer: func(info TickInfo) { s.observe(sh, rs, info) },
		})
	}
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// incarnate reports the failed recovery and retries.
		return fmt.Errorf("replay: shard %d: restart: %w", shard, err)
	}
	if rs != nil {
		rs.report.Snapshot, rs.report.Load, rs.report.From, rs.report.Fallback = restored.Tip, restored.Load, restored.Start, restored.Fallback
	}
	sh.mu.Lock()
	if sh.cur != inc {
		sh.mu.Unlock()
		return nil
	}
	sh.runner = r
	sh.mu.Unlock()
	if rs != nil && restored.Start.Tick >= rs.target {
		s.live(sh, rs, restored.Start.Tick)
	}
	s.notify()
	return r.Run(ctx)
}

func (s *Supervisor) recoveryOf(sh *shardState) *recoveryState {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.recovery
}

// observe handles a tick published by one of sh's runners. rs is the
// runner's recovery state (nil if it started live).
func (s *Supervisor) observe(sh *shardState, rs *recoveryState, info TickInfo) {
	prev, had := sh.hist.Put(TickHash{Tick: info.Tick, Pos: info.Pos, Hash: info.Hash})
	if had {
		if rs != nil {
			rs.checked.Add(1)
		}
		if prev.Hash != info.Hash {
			if rs != nil {
				rs.bad.Add(1)
			}
			s.log.Error("replayed hash differs from the published one", "shard", info.Shard, "tick", info.Tick, "want", prev.Hash, "got", info.Hash)
			if s.cfg.OnDivergence != nil {
				s.cfg.OnDivergence(Divergence{Shard: info.Shard, Tick: info.Tick, Want: prev.Hash, Got: info.Hash})
			}
		}
	}
	if info.Tick > sh.published.Load() {
		sh.published.Store(info.Tick)
	}
	if rs != nil && s.recoveryOf(sh) == rs && info.Tick >= max(rs.target, s.othersTick(sh)) {
		s.live(sh, rs, info.Tick)
	}
	if s.cfg.OnTick != nil {
		s.cfg.OnTick(info)
	}
	s.notify()
}

// othersTick returns the highest tick published by the shards other than
// sh.
func (s *Supervisor) othersTick(sh *shardState) uint64 {
	var t uint64
	for _, o := range s.shards {
		if o != sh {
			t = max(t, o.published.Load())
		}
	}
	return t
}

// live marks sh's recovery rs complete at tick.
func (s *Supervisor) live(sh *shardState, rs *recoveryState, tick uint64) {
	sh.mu.Lock()
	if sh.recovery != rs {
		sh.mu.Unlock()
		return
	}
	sh.recovery = nil
	sh.failures = 0
	sh.mu.Unlock()
	rep := rs.report
	rep.Live = s.cfg.Clock.Now()
	rep.Duration = rep.Live.Sub(rep.Died)
	rep.LiveTick = tick
	rep.Replayed = tick - min(tick, rep.From.Tick)
	rep.Checked, rep.Mismatched = rs.checked.Load(), rs.bad.Load()
	if rep.Cause != nil {
		s.log.Info("shard recovered", "shard", sh.spec.Shard, "cause", rep.Cause, "ms", float64(rep.Duration.Microseconds())/1000,
			"from_tick", rep.From.Tick, "replayed", rep.Replayed, "checked", rep.Checked, "mismatched", rep.Mismatched)
		if s.cfg.OnRecovery != nil {
			s.cfg.OnRecovery(rep)
		}
	}
}

// checkWedged abandons and replaces runners that made no progress for
// WedgeTimeout while the log advanced past them.
func (s *Supervisor) checkWedged(ctx context.Context) {
	var tail uint64
	haveTail := false
	if s.cfg.LogTail != nil {
		if t, err := s.cfg.LogTail(ctx); err == nil {
			tail, haveTail = t, true
		}
	}
	now := s.cfg.Clock.Now()
	for _, sh := range s.shards {
		sh.mu.Lock()
		r, done := sh.runner, sh.done
		sh.mu.Unlock()
		if r == nil || done || now.Sub(r.LastProgress()) < s.cfg.WedgeTimeout {
			continue
		}
		advanced := s.othersTick(sh) > r.Tick() || (haveTail && tail > r.Position())
		if !advanced {
			continue
		}
		sh.mu.Lock()
		inc := sh.cur
		if sh.runner != r || inc == nil || inc.exited {
			sh.mu.Unlock()
			continue
		}
		// The wedged goroutine may never return (a Step that loops): it
		// leaves the supervisor's wait group for the abandoned count.
		inc.abandoned = true
		sh.runner = nil
		sh.deaths++
		sh.failures++
		s.abandonN.Add(1)
		sh.mu.Unlock()
		s.log.Warn("shard runner wedged; replacing it", "shard", sh.spec.Shard, "tick", r.Tick(), "silent", now.Sub(r.LastProgress()))
		r.Kill()
		inc.cancel()
		s.startIncarnation(ctx, sh, ErrWedged, now)
		s.wg.Done() // after the new incarnation's Add: Run must not see zero
	}
}
