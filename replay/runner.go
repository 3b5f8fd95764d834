package replay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/lineage"
	"github.com/anoptic/broadside/netcode/wire"
	"github.com/anoptic/broadside/replay/snapshot"
	"github.com/anoptic/broadside/replay/table"
)

// BroadcastShard is the Shard of a migration envelope addressed to every
// shard of the world. Outputs carry no destination (Output has none), so a
// Runner appends them with BroadcastShard and delivers every migration
// envelope addressed to its shard or to BroadcastShard; the sim ignores
// the ones that are not for it.
const BroadcastShard = ^uint32(0)

// DefaultMaxTickGap is the default largest jump between consecutive tick
// markers a Runner accepts (one minute of ticks at the default rate).
const DefaultMaxTickGap = 60 * DefaultTickRate

// ErrKilled is returned by a Runner stopped with Kill (a simulated crash).
var ErrKilled = errors.New("replay: runner killed")

// ErrSimPanic is wrapped by the error of a Runner whose sim panicked.
var ErrSimPanic = errors.New("replay: sim panicked")

// Checkpoint is where a shard's execution stands between ticks: the last
// tick stepped, the log position of its marker (the next entry to read is
// the one after it) and the number of outputs produced so far. The zero
// value is the start of a world.
type Checkpoint struct {
	Tick      uint64
	Pos       uint64
	OutputSeq uint64
	// Fences is the fencing state at Pos (snapshot.Meta.Fences).
	Fences []snapshot.Fence
}

// CheckpointOf returns the checkpoint a snapshot was taken at.
func CheckpointOf(m snapshot.Meta) Checkpoint {
	return Checkpoint{Tick: m.Tick, Pos: m.Pos, OutputSeq: m.OutputSeq, Fences: m.Fences}
}

// SnapshotKind says whether a tick ended with a capture.
type SnapshotKind uint8

// Snapshot kinds of TickInfo.
const (
	NoSnapshot SnapshotKind = iota
	DeltaSnapshot
	FullSnapshot
)

// TickInfo is what a Runner publishes after each tick.
type TickInfo struct {
	Shard uint32
	Tick  uint64
	// Pos is the log position of the TICK(Tick) marker.
	Pos  uint64
	Hash uint64
	// Inputs and Outputs count the tick's commands and outputs.
	Inputs, Outputs int
	// Step is the duration of Sim.Step; Capture the tick loop's pause for
	// a snapshot capture (0 if none), of kind Snapshot.
	Step, Capture time.Duration
	Snapshot      SnapshotKind
	// Gap is true for a tick stepped with no input because the log's next
	// marker skipped it.
	Gap bool
	// Commands are the tick's inputs and Sim the shard's sim after the
	// step; both may be read only during the Observer call (the runner
	// reuses the commands and steps the sim right after). A game server
	// copies what its clients need from them.
	Commands []Command
	Sim      Sim
	// Produced are the outputs the step returned (readable only during
	// the Observer call), before the runner appends them; what-if forks
	// splice them into their own log.
	Produced []Output
}

// SnapshotConfig makes a Runner snapshot its sim (which must be a
// TableSim).
type SnapshotConfig struct {
	// Store keeps the snapshots (required).
	Store snapshot.Store
	// Policy decides when to capture (zero value: defaults).
	Policy snapshot.Policy
	// Codec compresses (nil: one of the runner's own).
	Codec *snapshot.Codec
	// Tip is the snapshot the sim was restored from, whose chain the next
	// delta extends; nil for a sim that starts from scratch (the first
	// capture is then full).
	Tip *snapshot.Meta
	// Restore, if set, is the measured load of Tip (it calibrates the
	// policy's restore cost).
	Restore *snapshot.LoadStats
	// Buffers, KeepChains and PruneEvery tune the writer (see
	// snapshot.WriterConfig).
	Buffers, KeepChains, PruneEvery int
	// OnStored, if set, is called from the writer's goroutine for every
	// snapshot stored or dropped.
	OnStored func(snapshot.Stored)
}

// RunnerConfig configures a Runner.
type RunnerConfig struct {
	// World and Shard name the shard; the ids of its outputs derive from
	// them (OutputClientID).
	World, Shard uint32
	// Sim is the shard's simulation, at Start (required).
	Sim Sim
	// Source delivers the log from Start.Pos+1 on (required); entries at
	// or before Start.Pos are skipped.
	Source Source
	// Start is where Sim stands (zero: the start of the world).
	Start Checkpoint
	// Epoch is the fencing epoch of the lease under which this runner
	// runs its shard (0: unfenced, a world in one process). A fenced
	// runner tags its outputs with it, appends none until it has read its
	// own lease claim (LeaseClaimRecord) from the log, and stops with
	// ErrFenced when it reads a claim of its shard with a higher epoch.
	// Every runner, fenced or not, ignores an output whose epoch is not
	// the one its source shard's latest claim (in log order) announced.
	Epoch uint64
	// Appender receives the sim's outputs; nil drops them (offline replay
	// of a log that already holds them).
	Appender Appender
	// Recorder receives lineage (nil: lineage.Nop). If it is a
	// lineage.TickRecorder (lineage.Log is), the runner brackets every Step
	// with BeginTick and EndTick and reports the tick's inputs; if it also
	// has a Flush(ctx) error method, the runner calls it when it captures
	// a full snapshot, and when it captures a delta at least
	// LineageFlushTicks after the previous flush, so that recovery from a
	// snapshot finds the lineage of the ticks before it (up to that many
	// ticks may be missing).
	Recorder lineage.Recorder
	// LineageFlushTicks bounds how often the recorder is flushed for
	// delta snapshots (default 32; deltas can be taken every tick, and a
	// flush rewrites the recorder's partial range).
	LineageFlushTicks uint64
	// CommandKind, if set, gives the lineage kind of a command (the game
	// knows it; 0 otherwise).
	CommandKind func(Command) uint8
	// Observer, if set, is called on the runner's goroutine after every
	// tick; it must return quickly.
	Observer func(TickInfo)
	// HistoryTicks is the length of the runner's hash history (default
	// DefaultHistoryTicks).
	HistoryTicks int
	// Snapshots, if set, makes the runner snapshot its sim.
	Snapshots *SnapshotConfig
	// MaxTickGap is the largest jump between consecutive tick markers
	// accepted (default DefaultMaxTickGap); a marker further ahead is
	// ignored as malformed (every runner of the log ignores it alike).
	MaxTickGap uint64
	// Logger receives warnings (nil: slog.Default()).
	Logger *slog.Logger
	// Clock is the runner's time source: the time of its last progress
	// (LastProgress) and the measured step and capture durations that feed
	// the snapshot policy (nil: SystemClock).
	Clock Clock
	// Synchronous makes the runner start no goroutine of its own: after
	// every tick it appends the tick's outputs and stores a captured
	// snapshot itself, on the tick loop, before it reads the next entry.
	// The tick loop then waits for the log and the snapshot store, so a
	// live server leaves it false; the replay simulator (internal/replaydst)
	// and offline tools set it so that a run is a function of its inputs.
	Synchronous bool

	// Pace, if set, is called before the runner steps a tick whose marker
	// is at or before the log position PaceUntil: the ticks a shard taken
	// over replays to catch up, paced behind the process's live runners
	// (Pacer.Wait). It changes only when those ticks are stepped; if it
	// fails (ctx ended), the runner stops before the tick, as between two
	// ticks.
	Pace      func(ctx context.Context) error
	PaceUntil uint64

	// bugs are the supervisor's injected bugs (SupervisorConfig.Bugs).
	bugs Bugs
}

// RunnerStats counts what a Runner consumed and produced.
type RunnerStats struct {
	// Entries is the number of log entries read; Commands and Migrations
	// those delivered to the sim; Ignored the well-formed ones that were
	// not (control records, migrations for other shards, stale tick
	// markers); Malformed the ones skipped as undecodable or invalid.
	Entries, Commands, Migrations, Ignored, Malformed uint64
	// Stale counts the outputs ignored for a stale lease epoch (fencing);
	// Claims the lease claims read.
	Stale, Claims uint64
	// Ticks counts steps; GapTicks those stepped empty for a skipped
	// marker.
	Ticks, GapTicks uint64
	// Outputs counts the sim's outputs; Appended those appended,
	// AlreadyLogged those found in the log already (after a recovery),
	// Dropped those that could not be appended; PendingOutputs is the
	// queue's current length.
	Outputs, Appended, AlreadyLogged, Dropped uint64
	PendingOutputs                            int
	// Captures counts snapshot captures; SkippedCaptures the captures due
	// while the writer had no free buffer.
	Captures, SkippedCaptures uint64
}

// Runner runs one simulation shard as a function of the log: it reads
// entries in order from a Source, buffers each tick's commands and steps
// the sim at every TICK marker, appends the sim's outputs with
// deterministic ids without blocking the tick loop, publishes every tick's
// hash and, if configured, snapshots the sim in the background. Live play,
// recovery and offline replay are all a Runner, started from a different
// checkpoint and run to a different end.
type Runner struct {
	cfg     RunnerConfig
	dsrc    DecodedSource // cfg.Source, if it decodes them too
	env     wire.Envelope // the entry consume decodes itself
	sim     Sim
	set     *table.Set
	rec     lineage.Recorder
	tickRec lineage.TickRecorder
	flusher interface{ Flush(context.Context) error }
	log     *slog.Logger
	hist    *HashHistory
	clock   Clock
	outs    *outputQueue
	writer  *snapshot.Writer
	sched   *snapshot.Scheduler
	// forceFull asks for a full capture at the next tick (SnapshotNext).
	forceFull atomic.Bool

	// Tick-loop state.
	cp             Checkpoint
	lineageFlushed uint64 // tick of the last recorder flush
	pos            uint64 // last entry read
	pending        []Command
	fences         fenceTable
	// cpFences is the fence table as it was at cp (the table moves on as
	// entries past cp are read); fencesChanged says it changed since.
	cpFences      []snapshot.Fence
	fencesChanged bool
	fencedOut     bool
	aheadOfFence  bool
	// paceStopped: the runner stopped while its Pace waited, before a
	// tick it then did not step; it cannot run again.
	paceStopped bool

	running  atomic.Bool
	killed   atomic.Bool
	mu       sync.Mutex
	cancel   context.CancelFunc
	dead     error         // set when the runner stopped on an error; guarded by mu
	progress atomic.Int64  // unix nanos of the last tick
	atTick   atomic.Uint64 // last tick stepped
	atPos    atomic.Uint64 // last position read

	entries, commands, migrations, ignored, malformed atomic.Uint64
	stale, claims                                     atomic.Uint64
	lineageErrs                                       atomic.Uint64
	ticks, gapTicks, outputs, captures, skippedCaps   atomic.Uint64
}

// NewRunner returns a runner; Run or RunUntil runs it.
func NewRunner(cfg RunnerConfig) (*Runner, error) {
	if cfg.Sim == nil || cfg.Source == nil {
		return nil, fmt.Errorf("replay: runner of shard %d: sim and source are required", cfg.Shard)
	}
	if err := checkShard(cfg.Shard); err != nil {
		return nil, err
	}
	if cfg.Recorder == nil {
		cfg.Recorder = lineage.Nop
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxTickGap == 0 {
		cfg.MaxTickGap = DefaultMaxTickGap
	}
	if cfg.LineageFlushTicks == 0 {
		cfg.LineageFlushTicks = 32
	}
	if cfg.Clock == nil {
		cfg.Clock = SystemClock{}
	}
	r := &Runner{
		cfg:    cfg,
		sim:    cfg.Sim,
		rec:    cfg.Recorder,
		log:    cfg.Logger.With("shard", cfg.Shard),
		hist:   NewHashHistory(cfg.HistoryTicks),
		clock:  cfg.Clock,
		cp:     cfg.Start,
		pos:    cfg.Start.Pos,
		outs:   newOutputQueue(OutputClientID(cfg.World, cfg.Shard), cfg.Start.Tick, cfg.Clock),
		dsrc:   asDecoded(cfg.Source),
		fences: fenceTableOf(cfg.Start.Fences),
	}
	r.cpFences = r.fences.list()
	if cfg.Epoch != 0 {
		r.outs.fenced = true
		r.outs.fencedClient = FencedOutputClientID(cfg.World, cfg.Shard, cfg.Epoch)
		r.outs.gate = make(chan struct{})
		if f, ok := r.fences[cfg.Shard]; ok && f.Epoch == cfg.Epoch {
			r.outs.open(f.Base) // its claim is before the checkpoint
		}
	}
	r.tickRec, _ = cfg.Recorder.(lineage.TickRecorder)
	r.flusher, _ = cfg.Recorder.(interface{ Flush(context.Context) error })
	r.outs.seen.Store(cfg.Start.OutputSeq)
	if f, ok := r.fences[cfg.Shard]; ok {
		// A fenced shard: its outputs through the checkpoint are durable,
		// but only those read back as valid count (an output of a stale
		// owner is appended again).
		r.outs.seen.Store(f.Seen)
	}
	r.atTick.Store(cfg.Start.Tick)
	r.atPos.Store(cfg.Start.Pos)
	r.progress.Store(r.clock.Now().UnixNano())
	if sc := cfg.Snapshots; sc != nil {
		ts, ok := cfg.Sim.(TableSim)
		if !ok {
			return nil, fmt.Errorf("replay: runner of shard %d: snapshots need a TableSim, have %T", cfg.Shard, cfg.Sim)
		}
		r.set = ts.Tables()
		w, err := snapshot.NewWriter(snapshot.WriterConfig{
			Store: sc.Store, Shard: cfg.Shard, Codec: sc.Codec, Buffers: sc.Buffers,
			KeepChains: sc.KeepChains, PruneEvery: sc.PruneEvery, OnStored: sc.OnStored, Logger: r.log,
		})
		if err != nil {
			return nil, fmt.Errorf("replay: runner of shard %d: %w", cfg.Shard, err)
		}
		r.writer, r.sched = w, snapshot.NewScheduler(sc.Policy)
		if sc.Tip != nil {
			if sc.Tip.Tick != cfg.Start.Tick || sc.Tip.Shard != cfg.Shard {
				return nil, fmt.Errorf("replay: runner of shard %d at tick %d: snapshot tip is shard %d tick %d", cfg.Shard, cfg.Start.Tick, sc.Tip.Shard, sc.Tip.Tick)
			}
			w.Continue(*sc.Tip)
			var baseRaw uint64
			if sc.Restore != nil {
				baseRaw = sc.Restore.BaseRawBytes
				r.sched.ObserveRestore(sc.Restore.Restore+sc.Restore.Read, sc.Restore.RawBytes)
			}
			r.sched.Restored(*sc.Tip, baseRaw)
		}
	}
	return r, nil
}

// Shard returns the runner's shard.
func (r *Runner) Shard() uint32 { return r.cfg.Shard }

// Sim returns the runner's sim. It must not be used while the runner runs.
func (r *Runner) Sim() Sim { return r.sim }

// Hashes returns the runner's hash history.
func (r *Runner) Hashes() *HashHistory { return r.hist }

// Tick returns the last tick stepped.
func (r *Runner) Tick() uint64 { return r.atTick.Load() }

// Position returns the position of the last log entry read.
func (r *Runner) Position() uint64 { return r.atPos.Load() }

// LastProgress returns when the runner last stepped (or was created), by
// its clock.
func (r *Runner) LastProgress() time.Time { return time.Unix(0, r.progress.Load()) }

// Checkpoint returns where the runner stands, with its fencing state at
// that point (a runner started from it, a hot standby's successor, knows
// every lease claim up to its position, and none past it: a runner
// stopped between two ticks has read entries past its checkpoint). It
// must not be called while the runner runs.
func (r *Runner) Checkpoint() Checkpoint {
	cp := r.cp
	cp.Fences = slices.Clone(r.cpFences)
	return cp
}

// Stats returns the runner's counters.
func (r *Runner) Stats() RunnerStats {
	return RunnerStats{
		Entries: r.entries.Load(), Commands: r.commands.Load(), Migrations: r.migrations.Load(),
		Ignored: r.ignored.Load(), Malformed: r.malformed.Load(), Stale: r.stale.Load(), Claims: r.claims.Load(),
		Ticks: r.ticks.Load(), GapTicks: r.gapTicks.Load(),
		Outputs: r.outputs.Load(), Appended: r.outs.appended.Load(), AlreadyLogged: r.outs.skipped.Load(),
		Dropped: r.outs.dropped.Load(), PendingOutputs: r.outs.pending(),
		Captures: r.captures.Load(), SkippedCaptures: r.skippedCaps.Load(),
	}
}

// SnapshotNext makes the runner capture a full snapshot after its next
// tick (whatever its policy says), as a server does before it stops.
func (r *Runner) SnapshotNext() { r.forceFull.Store(true) }

// Kill stops the runner as a crash would: at once, dropping queued outputs
// and snapshots. Run then returns ErrKilled and the runner cannot run
// again. It is the supervisor's test hook.
func (r *Runner) Kill() {
	r.killed.Store(true)
	r.mu.Lock()
	if r.cancel != nil {
		r.cancel()
	}
	r.mu.Unlock()
}

// Run runs the runner until ctx ends (it returns ctx.Err()), the source
// ends (nil, after the outputs and snapshots in flight are stored), Kill
// (ErrKilled) or an error of the source or the sim.
func (r *Runner) Run(ctx context.Context) error { return r.run(ctx, 0) }

// RunUntil runs the runner until it has stepped tick (then it waits for the
// outputs and snapshots in flight, and returns nil) or any end of Run. A
// runner may be run again after RunUntil returns nil.
func (r *Runner) RunUntil(ctx context.Context, tick uint64) error {
	if tick == 0 {
		return nil
	}
	return r.run(ctx, tick)
}

func (r *Runner) run(parent context.Context, until uint64) (err error) {
	r.mu.Lock()
	dead := r.dead
	r.mu.Unlock()
	if dead != nil {
		return dead
	}
	if !r.running.CompareAndSwap(false, true) {
		return fmt.Errorf("replay: runner of shard %d is already running", r.cfg.Shard)
	}
	defer r.running.Store(false)
	ctx, cancel := context.WithCancel(parent)
	r.mu.Lock()
	r.cancel = cancel
	r.mu.Unlock()
	defer cancel()
	if r.killed.Load() {
		return ErrKilled
	}

	var helpers sync.WaitGroup
	if r.cfg.Appender != nil && !r.cfg.Synchronous {
		helpers.Add(1)
		go func() {
			defer helpers.Done()
			_ = r.outs.run(ctx, r.cfg.Appender, r.log)
		}()
	}
	if r.writer != nil && !r.cfg.Synchronous {
		helpers.Add(1)
		go func() {
			defer helpers.Done()
			_ = r.writer.Run(ctx)
		}()
	}
	clean := false
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: shard %d tick %d: %v\n%s", ErrSimPanic, r.cfg.Shard, r.cp.Tick+1, p, debug.Stack())
			clean = false
		}
		if clean {
			err = r.drain(ctx)
		}
		cancel()
		helpers.Wait()
		if r.killed.Load() {
			err = ErrKilled
		}
		if err != nil {
			// A runner that stopped on an error cannot run again: its sim
			// may be broken (a panic), or its queued outputs and snapshots
			// were dropped with the helpers.
			r.mu.Lock()
			r.dead = err
			r.mu.Unlock()
		}
	}()

	for until == 0 || r.cp.Tick < until {
		if r.killed.Load() {
			return ErrKilled
		}
		e, err := r.cfg.Source.Next(ctx)
		if err != nil {
			if errors.Is(err, ErrEndOfLog) {
				clean = true
				return nil
			}
			if r.killed.Load() {
				return ErrKilled
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("replay: shard %d: read after %d: %w", r.cfg.Shard, r.pos, err)
		}
		r.consume(ctx, e)
		if r.paceStopped {
			if r.killed.Load() {
				return ErrKilled
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			return fmt.Errorf("replay: shard %d: pacing before the tick at position %d failed", r.cfg.Shard, e.Pos)
		}
		if r.fencedOut {
			return fmt.Errorf("replay: shard %d at position %d: %w", r.cfg.Shard, e.Pos, ErrFenced)
		}
		if r.aheadOfFence {
			return fmt.Errorf("replay: shard %d at its claim (position %d): %w", r.cfg.Shard, e.Pos, ErrSnapshotAheadOfFence)
		}
	}
	clean = true
	return nil
}

// drain waits until the outputs through the current tick are durable and
// the submitted snapshots stored.
func (r *Runner) drain(ctx context.Context) error {
	if r.cfg.Appender != nil {
		if err := r.outs.acked.wait(ctx, r.cp.Tick); err != nil {
			return fmt.Errorf("replay: shard %d: waiting for outputs: %w", r.cfg.Shard, err)
		}
	}
	if r.writer != nil {
		if err := r.writer.Flush(ctx); err != nil {
			return fmt.Errorf("replay: shard %d: waiting for snapshots: %w", r.cfg.Shard, err)
		}
	}
	return nil
}

// consume handles one log entry.
func (r *Runner) consume(ctx context.Context, e msg.Entry) {
	if e.Pos <= r.pos {
		return // delivered twice, or before the checkpoint
	}
	r.pos = e.Pos
	r.atPos.Store(e.Pos)
	r.entries.Add(1)
	if e.Record.ID.Client == r.outs.client && e.Record.ID.Seq > r.outs.seen.Load() && r.fences[r.cfg.Shard].Epoch == 0 {
		r.outs.seen.Store(e.Record.ID.Seq) // an unfenced output of this shard
	}
	env, ok := r.lastDecoded()
	if !ok {
		env = &r.env
		if err := decodeRecord(e.Record.Data, env); err != nil {
			r.malformed.Add(1)
			return
		}
	}
	switch env.Kind {
	case wire.EnvelopeTick:
		r.tickMarker(ctx, env.Tick, e.Pos)
	case wire.EnvelopePlayerCommand:
		if env.Player == 0 {
			r.malformed.Add(1) // player 0 would pose as the engine
			return
		}
		r.commands.Add(1)
		r.pending = append(r.pending, Command{Pos: e.Pos, Player: env.Player, ClientSeq: env.ClientSeq, Payload: env.Payload})
	case wire.EnvelopeControl:
		if isLeaseClaim(env) {
			r.leaseClaim(env.Shard, env.Epoch)
			return
		}
		r.ignored.Add(1)
	case wire.EnvelopeMigration:
		if env.Epoch != 0 || r.fences[sourceOf(e.Record.ID.Client)].Epoch != 0 {
			// A fenced output, or an unfenced one of a shard now fenced.
			src := env.Source
			if env.Epoch == 0 {
				src = sourceOf(e.Record.ID.Client)
			}
			if r.fences[src].Epoch != env.Epoch {
				r.stale.Add(1)
				return
			}
			if f := r.fences[src]; src == r.cfg.Shard && env.ClientSeq > f.Seen {
				f.Seen = env.ClientSeq
				r.fences[src] = f
				r.fencesChanged = true
				if env.ClientSeq > r.outs.seen.Load() {
					r.outs.seen.Store(env.ClientSeq)
				}
			}
		}
		if env.Shard != r.cfg.Shard && env.Shard != BroadcastShard {
			r.ignored.Add(1)
			return
		}
		r.migrations.Add(1)
		r.pending = append(r.pending, Command{Pos: e.Pos, ClientSeq: env.ClientSeq, Payload: env.Payload})
	default:
		r.ignored.Add(1)
	}
}

// sourceOf returns the shard of an unfenced output's client id
// (OutputClientID), or BroadcastShard for any other id.
func sourceOf(client uint64) uint32 {
	if client&(0xFFFF<<48) != engineClientTag|outputClientKind {
		return BroadcastShard
	}
	return uint32(client & (MaxShards - 1))
}

// leaseClaim takes the claim of shard's lease at epoch: a newer epoch
// fences out every older one from here on.
func (r *Runner) leaseClaim(shard uint32, epoch uint64) {
	r.claims.Add(1)
	f := r.fences[shard]
	if epoch <= f.Epoch {
		r.ignored.Add(1) // a stale or repeated claim
		return
	}
	f.Shard, f.Epoch = shard, epoch
	if shard == r.cfg.Shard {
		// Every valid output of this shard before the claim was read:
		// they are appended in order, each durable before the next.
		if _, ok := r.fences[shard]; !ok {
			f.Seen = r.outs.seen.Load() // the unfenced outputs so far
		}
		f.Base = f.Seen
	}
	r.fences[shard] = f
	r.fencesChanged = true
	if shard != r.cfg.Shard || r.cfg.Epoch == 0 {
		return
	}
	switch {
	case epoch == r.cfg.Epoch && f.Base < r.cfg.Start.OutputSeq:
		// The snapshot this runner started from counts outputs that never
		// became valid (its previous owner appended them after this
		// claim): starting after their tick, it would never produce them
		// again. Stop rather than lose them.
		r.aheadOfFence = true
	case epoch == r.cfg.Epoch:
		r.outs.open(f.Base)
	case epoch > r.cfg.Epoch:
		r.fencedOut = true
	}
}

// decodeRecord is wire.DecodeEnvelope without the copy of the payload,
// which aliases b (log entries are never modified): it verifies b and
// reads the fields in one pass (wire.ParseEnvelope, which accepts exactly
// what wire.VerifyEnvelope does, so no accessor can panic). That pass
// costs less than the generated accessors alone, so an entry its source
// already verified (VerifiedSource) is decoded the same way.
func decodeRecord(b []byte, env *wire.Envelope) error {
	if len(b) > wire.MaxEnvelopeSize {
		return fmt.Errorf("replay: record of %d bytes: %w", len(b), wire.ErrMalformed)
	}
	if err := wire.ParseEnvelope(b, env); err != nil {
		return err
	}
	if !env.Kind.Valid() {
		return fmt.Errorf("replay: record kind %d: %w", env.Kind, wire.ErrMalformed)
	}
	if len(env.Payload) == 0 {
		env.Payload = nil
	}
	return nil
}

func (r *Runner) lastDecoded() (*wire.Envelope, bool) {
	if r.dsrc == nil {
		return nil, false
	}
	return r.dsrc.LastEnvelope()
}

func asDecoded(s Source) DecodedSource {
	d, _ := s.(DecodedSource)
	return d
}

// tickMarker steps the sim for TICK(n) at position pos.
func (r *Runner) tickMarker(ctx context.Context, n, pos uint64) {
	cur := r.cp.Tick
	switch {
	case n <= cur:
		r.ignored.Add(1) // a stale marker: its tick is past
		return
	case n-cur > r.cfg.MaxTickGap:
		r.malformed.Add(1)
		return
	}
	if r.cfg.Pace != nil && pos <= r.cfg.PaceUntil && r.cfg.Pace(ctx) != nil {
		// Stopped while waiting: as if between two ticks (the checkpoint
		// is the previous tick's); the run loop returns at once.
		r.paceStopped = true
		return
	}
	for t := cur + 1; t < n; t++ {
		// The log skipped these ticks: they pass with no input, and no
		// snapshot is taken (a checkpoint must sit on a real marker).
		r.gapTicks.Add(1)
		r.step(ctx, t, nil, pos, true)
	}
	r.step(ctx, n, r.pending, pos, false)
	clear(r.pending)
	r.pending = r.pending[:0]
}

// step runs one tick and everything that follows it.
func (r *Runner) step(ctx context.Context, tick uint64, cmds []Command, pos uint64, gap bool) {
	if r.tickRec != nil {
		r.lineageErr(r.tickRec.BeginTick(ctx, lineage.ShardID(r.cfg.Shard), tick), tick)
		for i := range cmds {
			c := &cmds[i]
			var kind uint8
			if r.cfg.CommandKind != nil {
				kind = r.cfg.CommandKind(*c)
			}
			r.tickRec.Input(lineage.CommandInfo{Pos: c.Pos, Player: c.Player, Tick: tick, Kind: kind})
		}
	}
	start := r.clock.Now()
	outs := r.sim.Step(tick, cmds, r.rec)
	stepDur := r.clock.Now().Sub(start)
	if r.tickRec != nil {
		r.lineageErr(r.tickRec.EndTick(ctx), tick)
	}
	hash := r.sim.Hash()
	r.cp.Tick, r.cp.Pos = tick, pos
	if r.fencesChanged {
		r.cpFences, r.fencesChanged = r.fences.list(), false
	}
	info := TickInfo{Shard: r.cfg.Shard, Tick: tick, Pos: pos, Hash: hash, Inputs: len(cmds), Outputs: len(outs), Step: stepDur, Gap: gap,
		Commands: cmds, Sim: r.sim, Produced: outs}

	for _, o := range outs {
		if len(o.Payload) > wire.MaxEnvelopeSize-256 {
			r.log.Error("output too large, dropped", "tick", tick, "bytes", len(o.Payload))
			r.outs.dropped.Add(1)
			continue
		}
		r.cp.OutputSeq++
		r.outputs.Add(1)
		if r.cfg.Appender == nil {
			continue
		}
		env := wire.Envelope{Kind: wire.EnvelopeMigration, Tick: tick, Shard: BroadcastShard, ClientSeq: r.cp.OutputSeq, Payload: o.Payload}
		if r.cfg.Epoch != 0 {
			env.Epoch, env.Source = r.cfg.Epoch, r.cfg.Shard
		}
		data := wire.EncodeEnvelope(nil, env)
		r.outs.push(outItem{tick: tick, seq: r.cp.OutputSeq, data: data})
	}
	if r.cfg.Appender != nil {
		r.outs.push(outItem{tick: tick})
	} else {
		r.outs.acked.raise(tick)
	}

	if r.writer != nil {
		r.sched.ObserveStep(stepDur)
		if !gap {
			info.Capture, info.Snapshot = r.maybeCapture(tick, pos, hash)
			if r.flusher != nil && (info.Snapshot == FullSnapshot ||
				(info.Snapshot == DeltaSnapshot && tick >= r.lineageFlushed+r.cfg.LineageFlushTicks)) {
				r.lineageErr(r.flusher.Flush(ctx), tick)
				r.lineageFlushed = tick
			}
		}
	}

	if r.cfg.Synchronous {
		r.storeNow(ctx)
	}
	if r.killed.Load() {
		// A killed runner publishes nothing more: it may be one abandoned
		// as wedged whose Step returned long after its replacement took
		// over.
		return
	}
	r.ticks.Add(1)
	r.atTick.Store(tick)
	r.progress.Store(r.clock.Now().UnixNano())
	r.hist.Put(TickHash{Tick: tick, Pos: pos, Hash: hash})
	if r.cfg.Observer != nil {
		r.cfg.Observer(info)
	}
}

// storeNow does the helpers' work on the tick loop (Synchronous): it
// appends the queued outputs, then stores the submitted snapshots (whose
// Ready waits for those outputs). A killed runner stores nothing more, as a
// crash would; what is left queued is dropped with it.
func (r *Runner) storeNow(ctx context.Context) {
	if r.killed.Load() {
		return
	}
	if r.writer != nil && r.cfg.bugs.SnapshotBeforeOutputs {
		_ = r.writer.Drain(ctx)
	}
	if r.cfg.Appender != nil {
		if err := r.outs.appendQueued(ctx, r.cfg.Appender, r.log); err != nil {
			return
		}
	}
	if r.writer != nil && !r.killed.Load() {
		_ = r.writer.Drain(ctx)
	}
}

// lineageErr logs a lineage recording error: lineage is an index of the
// execution, not part of it, so the shard keeps running.
func (r *Runner) lineageErr(err error, tick uint64) {
	if err != nil && r.lineageErrs.Add(1) <= 10 {
		r.log.Warn("lineage", "tick", tick, "err", err)
	}
}

// maybeCapture captures a snapshot after tick if the policy says so and the
// writer has a free buffer; it returns the pause.
func (r *Runner) maybeCapture(tick, pos, hash uint64) (time.Duration, SnapshotKind) {
	needFull := r.writer.NeedFull()
	if needFull {
		r.sched.Broken()
	}
	forced := r.forceFull.Load()
	take, full := r.sched.Decide(tick, r.set.DirtyBytes(), needFull)
	if forced {
		take, full = true, true
	}
	if !take {
		return 0, NoSnapshot
	}
	buf := r.writer.Buffer()
	if buf == nil {
		r.skippedCaps.Add(1)
		return 0, NoSnapshot
	}
	if forced {
		r.forceFull.Store(false)
	}
	start := r.clock.Now()
	r.set.CaptureInto(buf, full)
	pause := r.clock.Now().Sub(start)
	raw := 0
	for _, tc := range buf.Tables {
		raw += tc.EncodedLen()
	}
	r.sched.Taken(tick, full, raw)
	r.captures.Add(1)
	acked := r.outs.acked
	ready := func(ctx context.Context) error { return acked.wait(ctx, tick) }
	if r.cfg.bugs.SnapshotBeforeOutputs {
		ready = nil
	}
	r.writer.Submit(snapshot.Job{
		Meta: snapshot.Meta{Shard: r.cfg.Shard, Tick: tick, Pos: pos, Hash: hash, OutputSeq: r.cp.OutputSeq, Full: full,
			Fences: r.fences.list()},
		Capture: buf,
		Ready:   ready,
	})
	kind := DeltaSnapshot
	if full {
		kind = FullSnapshot
	}
	return pause, kind
}
