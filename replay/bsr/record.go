package bsr

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"time"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/lineage"
	"github.com/anoptic/broadside/netcode/wire"
	"github.com/anoptic/broadside/netcode/wire/fb"
	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/snapshot"
	"github.com/anoptic/broadside/replay/table"
	flatbuffers "github.com/google/flatbuffers/go"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// DefaultSeekTarget is the seek time the Recorder's default snapshot policy
// aims for: any tick of a recording in under one 60 Hz frame.
const DefaultSeekTarget = 16 * time.Millisecond

// SnapshotPolicy says when Record captures snapshots. The zero value is the
// adaptive default.
type SnapshotPolicy struct {
	// FullEvery, if not 0, fixes the schedule: a full snapshot of every
	// shard every FullEvery ticks and, if DeltaEvery is not 0, a delta
	// every DeltaEvery ticks in between. Fixed schedules make recordings
	// of the same log byte-identical (but for Header.Created).
	FullEvery, DeltaEvery uint64
	// SeekTarget is the adaptive policy's bound on a seek to any tick
	// (default DefaultSeekTarget). The policy estimates a seek as the
	// restore of the newest snapshot chain plus the replay of the ticks
	// since, from the step times measured while recording, and captures a
	// delta when the estimate would pass 40 % of the target (the rest is
	// headroom: a seek that gets half the machine's cores still takes
	// under 80 % of the target), and a new full snapshot when the chain
	// grows past four full snapshots' worth of bytes or its restore past
	// half the estimate.
	SeekTarget time.Duration
	// Parallelism is the number of shards a seek restores and replays at
	// once (default min(GOMAXPROCS, shards)): the estimate divides the
	// work of all shards by it.
	Parallelism int
	// MaxInterval bounds the ticks between snapshots (default 60 seconds
	// of ticks).
	MaxInterval uint64
	// RestoreNsPerByte is the initial estimate of a restore's cost per raw
	// snapshot byte (decompress, decode, rebuild, rehash; default 4).
	RestoreNsPerByte float64
}

// RecordConfig configures Record.
type RecordConfig struct {
	// Source delivers the log from its first position (position 1: the
	// start of the world); Record fast-forwards through the ticks before
	// FromTick without recording them. Required.
	Source replay.Source
	// Writer receives the recording; its Header.Shards says how many
	// shards to run. Record does not close it. Required.
	Writer *Writer
	// NewSim returns a fresh sim of shard at the start of the world.
	// Required unless Sims is set.
	NewSim func(shard uint32) (replay.TableSim, error)
	// FromTick and ToTick bound the recorded ticks (0: from the start of
	// the world, to the end of the log). The recording starts from the
	// state after tick FromTick-1 (a full snapshot of every shard), or
	// after the first tick the log marked at or beyond it.
	FromTick, ToTick uint64
	// CommandKind, if set, gives the lineage kind of a command (0
	// otherwise); KindNames names the kinds.
	CommandKind func(replay.Command) uint8
	KindNames   map[uint8]string
	// Sims and Start, if Sims is set, give every shard's sim already at
	// checkpoint Start (the same for all shards; for example restored from
	// a world's snapshots and replayed to a common tick) instead of fresh
	// sims from NewSim: Source then delivers the log from Start.Pos+1 on,
	// and the recording starts at Start.Tick (or FromTick-1 if later) with
	// a full snapshot of every shard. This is how a recording starts after
	// the beginning of the log was trimmed.
	Sims  []replay.TableSim
	Start replay.Checkpoint
	// Progress, if set, is called after every tick stepped (fast-forward
	// included), on Record's goroutine.
	Progress func(tick uint64)
	// Snapshots is the snapshot policy (zero: adaptive to DefaultSeekTarget).
	Snapshots SnapshotPolicy
	// FlushTicks bounds the ticks buffered before a commands chunk is
	// written (default one second of ticks): a crash loses at most that.
	FlushTicks uint64
	// Logger receives the runners' warnings (nil: slog.Default()).
	Logger *slog.Logger
	// Signer, if set, makes a signed recording: Record keeps the Merkle
	// tree of the log entries it reads and writes a checkpoint signed by
	// Signer after every commands chunk (FlushTicks is then at most five
	// seconds of ticks) and at the end. The tree covers the world's log
	// from position 1 unless Sims is set, in which case it starts at
	// Start.Pos+1.
	Signer note.Signer
	// NoFieldSums records no field sums (40 bytes per shard and tick
	// less; verify then names a divergence from the next snapshot, or by
	// re-simulating twice when the re-simulation is nondeterministic).
	NoFieldSums bool
	// OnTick, if set, is called on Record's goroutine after every tick
	// of every shard (during the runner's Observer: info's slices may be
	// read only then). Forks use it to splice the sims' outputs into the
	// log they feed back.
	OnTick func(info replay.TickInfo)
	// LinkSizes are tree sizes of earlier checkpoints (an earlier
	// segment's last one) to which a signed recording carries consistency
	// proofs from the tree it starts from; sizes beyond that tree are
	// ignored.
	LinkSizes []int64
}

// RecordStats describes a recording made by Record.
type RecordStats struct {
	// BaseTick is the tick the recording starts from; FirstTick..LastTick
	// the ticks recorded (Ticks of them; none if LastTick == BaseTick).
	BaseTick, FirstTick, LastTick, Ticks uint64
	// FastForward counts the ticks stepped before FromTick.
	FastForward uint64
	// Entries counts the log entries recorded.
	Entries uint64
	// FullSnapshots and DeltaSnapshots count snapshot chunks (all
	// shards); SnapshotRaw their uncompressed bytes.
	FullSnapshots, DeltaSnapshots int
	SnapshotRaw                   int64
	// Step is the total time of the sims' steps; Took Record's wall time.
	Step, Took time.Duration
	// Stopped says why Record stopped: "to-tick", "end of log" or
	// "context".
	Stopped string
}

// Record runs one offline replay.Runner per shard over cfg.Source and
// writes to cfg.Writer the recorded ticks' log entries, every tick's
// per-shard state hashes, periodic snapshots (full, and incremental deltas
// between them, placed so that a seek stays within the policy's target)
// and the lineage of every tick. It works live, following a running
// server's log (it waits at the tail like any subscriber), and offline,
// exporting a stored log. It stops at ToTick, at the end of the log or when
// ctx ends, and in every case writes out what is complete: after
// Writer.Close the file holds every tick up to where it stopped. It returns
// an error only for a failure (of the source, a sim or the file).
func Record(ctx context.Context, cfg RecordConfig) (RecordStats, error) {
	if cfg.Source == nil || cfg.Writer == nil || (cfg.NewSim == nil && cfg.Sims == nil) {
		return RecordStats{}, errors.New("bsr: record: Source, Writer and NewSim (or Sims) are required")
	}
	if cfg.ToTick > 0 && cfg.ToTick < cfg.FromTick {
		return RecordStats{}, fmt.Errorf("bsr: record: to tick %d before from tick %d", cfg.ToTick, cfg.FromTick)
	}
	r, err := newRecorder(cfg)
	if err != nil {
		return RecordStats{}, err
	}
	start := time.Now()
	err = r.run(ctx)
	if ferr := r.finish(context.WithoutCancel(ctx)); err == nil {
		err = ferr
	}
	r.stats.Took = time.Since(start)
	return r.stats, err
}

type recorder struct {
	cfg    RecordConfig
	w      *Writer
	shards int
	world  uint32
	log    *slog.Logger

	sims    []replay.TableSim
	runners []*replay.Runner
	feeds   []*feedSource
	obs     [][]replay.TickInfo
	fsums   [][]table.FieldSums // per shard, the observed ticks' field sums (tracking)
	lin     *lineage.Log
	linSt   *writerLineage

	base      uint64 // first tick recorded - 1
	recording bool
	cur       uint64 // last tick stepped
	curPos    uint64 // position of its marker

	feed     []msg.Entry // entries not yet given to the runners
	entries  []msg.Entry // entries of the chunk being built
	complete int         // entries[:complete] belong to stepped ticks
	ticks    []TickRecord
	hashes   []uint64          // backing of ticks' Hashes
	sums     []table.FieldSums // the ticks' field sums, tick-major (tracking)
	tracking bool              // the sims keep field sums
	prevPos  uint64            // position of the marker before the chunk

	policy   *snapPolicy
	caps     []*table.SetCapture
	encBuf   []byte
	lastSnap uint64
	// broken is set when a runner failed mid-tick: the sims may be
	// between ticks of different shards, so no snapshot is taken.
	broken bool
	stats  RecordStats

	tree       *logTree // nil: unsigned
	lastSigned int64    // tree size of the last checkpoint written
}

func newRecorder(cfg RecordConfig) (*recorder, error) {
	h := cfg.Writer.Header()
	r := &recorder{cfg: cfg, w: cfg.Writer, shards: int(h.Shards), world: h.World, log: cfg.Logger}
	if r.log == nil {
		r.log = slog.Default()
	}
	if r.cfg.FlushTicks == 0 {
		r.cfg.FlushTicks = uint64(h.TickRate)
	}
	r.base = cfg.Start.Tick
	if cfg.FromTick > 1 {
		r.base = max(r.base, cfg.FromTick-1)
	}
	r.cur, r.curPos = cfg.Start.Tick, cfg.Start.Pos
	r.linSt = &writerLineage{w: cfg.Writer}
	if cfg.Signer != nil {
		r.tree, _ = newLogTree(0, nil)
		r.cfg.FlushTicks = min(r.cfg.FlushTicks, 5*uint64(h.TickRate))
	}
	r.policy = newSnapPolicy(cfg.Snapshots, r.shards, h.TickRate)
	if cfg.Sims != nil && len(cfg.Sims) != r.shards {
		return nil, fmt.Errorf("bsr: record: %d sims for %d shards", len(cfg.Sims), r.shards)
	}
	for s := range r.shards {
		var sim replay.TableSim
		if cfg.Sims != nil {
			sim = cfg.Sims[s]
		} else {
			var err error
			if sim, err = cfg.NewSim(uint32(s)); err != nil {
				return nil, fmt.Errorf("bsr: record: new sim of shard %d: %w", s, err)
			}
		}
		r.sims = append(r.sims, sim)
		r.feeds = append(r.feeds, &feedSource{})
		r.caps = append(r.caps, new(table.SetCapture))
	}
	r.obs = make([][]replay.TickInfo, r.shards)
	r.fsums = make([][]table.FieldSums, r.shards)
	if r.base == cfg.Start.Tick {
		if err := r.startRecording(cfg.Start); err != nil {
			return nil, err
		}
		return r, nil
	}
	cps := make([]replay.Checkpoint, r.shards)
	for s := range cps {
		cps[s] = cfg.Start
	}
	if err := r.makeRunners(cps, nil); err != nil {
		return nil, err
	}
	return r, nil
}

// makeRunners (re)creates the shards' runners from the checkpoints.
func (r *recorder) makeRunners(cps []replay.Checkpoint, rec lineage.Recorder) error {
	r.runners = r.runners[:0]
	for s := range r.shards {
		obs, fs, sim := &r.obs[s], &r.fsums[s], r.sims[s]
		run, err := replay.NewRunner(replay.RunnerConfig{
			World: r.world, Shard: uint32(s), Sim: r.sims[s], Source: r.feeds[s], Start: cps[s],
			Recorder: rec, CommandKind: r.cfg.CommandKind, HistoryTicks: 64, Logger: r.log,
			Observer: func(info replay.TickInfo) {
				*obs = append(*obs, info)
				if r.cfg.OnTick != nil {
					r.cfg.OnTick(info)
				}
				if r.tracking {
					*fs = append(*fs, sim.Tables().FieldSums())
				}
			},
		})
		if err != nil {
			return fmt.Errorf("bsr: record: %w", err)
		}
		r.runners = append(r.runners, run)
	}
	return nil
}

// startRecording switches to recording at the runners' checkpoint cp: it
// writes the base snapshots (unless the world is at its start) and gives
// the runners a lineage recorder.
func (r *recorder) startRecording(cp replay.Checkpoint) error {
	r.recording = true
	r.base, r.prevPos = cp.Tick, cp.Pos
	r.stats.BaseTick, r.stats.FirstTick, r.stats.LastTick = cp.Tick, cp.Tick+1, cp.Tick
	if len(r.cfg.KindNames) > 0 {
		if err := lineage.PutKindNames(context.Background(), r.linSt, r.cfg.KindNames); err != nil {
			return err
		}
	}
	r.lin = lineage.NewLog(lineage.LogOptions{Store: r.linSt})
	cps := make([]replay.Checkpoint, r.shards)
	for s := range cps {
		cps[s] = cp
		if len(r.runners) > 0 {
			cps[s] = r.runners[s].Checkpoint()
		}
	}
	if err := r.writeTreeBase(cp); err != nil {
		return err
	}
	if fs := fenceEpochsOf(cps[0].Fences).list(); len(fs) > 0 && cp.Tick > 0 {
		// A recording that starts after lease claims keeps the epochs
		// they set (BaseFences): its log no longer holds them.
		if err := r.w.WriteMeta(fenceMetaName, appendFences(nil, fs)); err != nil {
			return err
		}
	}
	if err := r.trackFields(); err != nil {
		return err
	}
	if cp.Tick > 0 {
		if err := r.snapshot(cp.Tick, cp.Pos, true); err != nil {
			return err
		}
	}
	return r.makeRunners(cps, r.lin)
}

// run reads the source until a stop.
func (r *recorder) run(ctx context.Context) error {
	for {
		if r.cfg.ToTick > 0 && r.recording && r.cur >= r.cfg.ToTick {
			r.stats.Stopped = "to-tick"
			return nil
		}
		e, err := r.cfg.Source.Next(ctx)
		switch {
		case errors.Is(err, replay.ErrEndOfLog):
			r.stats.Stopped = "end of log"
			return nil
		case err != nil && ctx.Err() != nil:
			r.stats.Stopped = "context"
			return nil
		case err != nil:
			r.stats.Stopped = "source error"
			return fmt.Errorf("bsr: record: read the log after tick %d: %w", r.cur, err)
		}
		r.feed = append(r.feed, e)
		if r.tree != nil {
			if err := r.tree.add(leafHash(e)); err != nil {
				return fmt.Errorf("bsr: record: log tree at position %d: %w", e.Pos, err)
			}
		}
		if r.recording {
			r.entries = append(r.entries, e)
		}
		if _, ok := markerTick(e.Record.Data); !ok {
			continue
		}
		if err := r.step(e.Pos); err != nil {
			return err
		}
	}
}

// markerTick returns the tick of a TICK marker record.
func markerTick(b []byte) (uint64, bool) {
	if len(b) > wire.MaxEnvelopeSize || wire.VerifyEnvelope(b) != nil {
		return 0, false
	}
	var t fb.Envelope
	t.Init(b, flatbuffers.GetUOffsetT(b))
	if wire.EnvelopeKind(t.Kind()) != wire.EnvelopeTick {
		return 0, false
	}
	return t.Tick(), true
}

// step gives the buffered entries, ending with a tick marker at pos, to
// every runner, and records the ticks they stepped.
func (r *recorder) step(pos uint64) error {
	bg := context.Background() // a runner always finishes its finite feed
	for s, run := range r.runners {
		r.feeds[s].reset(r.feed)
		r.obs[s] = r.obs[s][:0]
		r.fsums[s] = r.fsums[s][:0]
		if err := run.Run(bg); err != nil {
			r.broken = true
			return fmt.Errorf("bsr: record: shard %d at tick %d: %w", s, r.cur, err)
		}
	}
	clear(r.feed)
	r.feed = r.feed[:0]
	n := len(r.obs[0])
	for s := range r.shards {
		if len(r.obs[s]) != n || r.runners[s].Tick() != r.runners[0].Tick() {
			r.broken = true
			return fmt.Errorf("bsr: record: shards disagree after position %d: shard 0 at tick %d, shard %d at %d", pos, r.runners[0].Tick(), s, r.runners[s].Tick())
		}
	}
	if n == 0 {
		return nil // a stale or malformed marker: its tick is not a new one
	}
	for i := range n {
		tick := r.obs[0][i].Tick
		var stepSum time.Duration
		for s := range r.shards {
			stepSum += r.obs[s][i].Step
		}
		r.stats.Step += stepSum
		if r.recording {
			r.policy.observeStep(stepSum)
			for s := range r.shards {
				r.hashes = append(r.hashes, r.obs[s][i].Hash)
				if r.tracking {
					r.sums = append(r.sums, r.fsums[s][i])
				}
			}
			r.ticks = append(r.ticks, TickRecord{Tick: tick, Pos: pos, Gap: r.obs[0][i].Gap})
			r.stats.Ticks++
		} else {
			r.stats.FastForward++
		}
		if r.cfg.Progress != nil {
			r.cfg.Progress(tick)
		}
	}
	r.cur, r.curPos = r.obs[0][n-1].Tick, pos
	if !r.recording {
		if r.cur >= r.base {
			return r.startRecording(replay.Checkpoint{Tick: r.cur, Pos: pos})
		}
		return nil
	}
	r.complete = len(r.entries)
	r.stats.LastTick = r.cur
	if take, full := r.policy.decide(r.cur, r.dirtyBytes()); take {
		return r.snapshot(r.cur, pos, full)
	}
	if uint64(len(r.ticks)) >= r.cfg.FlushTicks || r.entryBytes() >= 8<<20 {
		return r.flush()
	}
	return nil
}

func (r *recorder) dirtyBytes() int {
	n := 0
	for _, sim := range r.sims {
		n += sim.Tables().DirtyBytes()
	}
	return n
}

func (r *recorder) entryBytes() int {
	n := 0
	for _, e := range r.entries[:r.complete] {
		n += len(e.Record.Data) + 16
	}
	return n
}

// flush writes the buffered ticks and their entries as a ticks chunk and
// a commands chunk.
func (r *recorder) flush() error {
	if len(r.ticks) == 0 {
		return nil
	}
	// Attach each tick's hashes (r.hashes grows, so slices are taken now).
	for i := range r.ticks {
		r.ticks[i].Hashes = r.hashes[i*r.shards : (i+1)*r.shards]
	}
	first, last := r.ticks[0].Tick, r.ticks[len(r.ticks)-1].Tick
	ref := chunkRef{Kind: KindTicks, First: first, Last: last, Aux1: r.prevPos, Aux2: r.curPos}
	r.encBuf = appendTicks(r.encBuf[:0], r.prevPos, r.ticks)
	if err := r.w.writeChunk(ref, r.encBuf); err != nil {
		return err
	}
	done := r.entries[:r.complete]
	ref.Kind = KindCommands
	r.encBuf = appendEntries(r.encBuf[:0], r.prevPos, done)
	if err := r.w.writeChunk(ref, r.encBuf); err != nil {
		return err
	}
	if r.tracking {
		ref.Kind = KindFields
		r.encBuf = appendFields(r.encBuf[:0], r.sums)
		if err := r.w.writeChunk(ref, r.encBuf); err != nil {
			return err
		}
	}
	r.stats.Entries += uint64(len(done))
	rest := copy(r.entries, r.entries[r.complete:])
	clear(r.entries[rest:])
	r.entries, r.complete = r.entries[:rest], 0
	r.ticks, r.hashes, r.sums = r.ticks[:0], r.hashes[:0], r.sums[:0]
	r.prevPos = r.curPos
	return r.checkpoint(last, false)
}

// writeTreeBase writes the KindTree chunk of a signed recording starting
// after the marker of cp: the tree of the entries read so far (fast-forward
// included) and the links to cfg.LinkSizes.
func (r *recorder) writeTreeBase(cp replay.Checkpoint) error {
	if r.tree == nil {
		return nil
	}
	tb := treeBase{Size: r.tree.n}
	var err error
	if tb.Frontier, err = r.tree.frontier(); err != nil {
		return fmt.Errorf("bsr: record: log tree: %w", err)
	}
	for _, n := range r.cfg.LinkSizes {
		if n <= 0 || n > tb.Size || len(tb.Links) == maxTreeLinks {
			continue
		}
		l := TreeLink{Size: n}
		if l.Root, err = r.tree.root(n); err == nil {
			l.Proof, err = tlog.ProveTree(tb.Size, n, r.tree)
		}
		if err != nil {
			return fmt.Errorf("bsr: record: consistency proof from tree size %d: %w", n, err)
		}
		tb.Links = append(tb.Links, l)
	}
	r.lastSigned = -1
	ref := chunkRef{Kind: KindTree, First: cp.Tick, Last: cp.Tick, Aux1: cp.Pos, Aux2: uint64(tb.Size)}
	return r.w.writeChunk(ref, appendTreeBase(nil, &tb))
}

// checkpoint writes a signed checkpoint of the tree after tick (whose
// marker is the last entry flushed), unless the last one covers it.
func (r *recorder) checkpoint(tick uint64, final bool) error {
	if r.tree == nil {
		return nil
	}
	size := r.tree.n - int64(len(r.feed)) // the entries after the last marker are not flushed yet
	if size == r.lastSigned && !final {
		return nil
	}
	root, err := r.tree.root(size)
	if err != nil {
		return fmt.Errorf("bsr: record: log tree root at size %d: %w", size, err)
	}
	cp := Checkpoint{World: r.world, Tick: tick, Pos: r.prevPos, Size: size, Root: root, Final: final}
	b, err := signCheckpoint(cp, r.cfg.Signer)
	if err != nil {
		return err
	}
	ref := chunkRef{Kind: KindCheckpoint, First: tick, Last: tick, Aux1: cp.Pos, Aux2: uint64(size)}
	if err := r.w.writeChunk(ref, b); err != nil {
		return err
	}
	r.lastSigned = size
	if size == r.tree.n {
		// Nothing needs the older hashes any more (links were proved at
		// the start): keep the tree's memory bounded.
		if err := r.tree.prune(); err != nil {
			return fmt.Errorf("bsr: record: log tree: %w", err)
		}
	}
	return nil
}

// snapshot flushes the ticks so far and captures every shard after tick
// (whose marker is at pos).
func (r *recorder) snapshot(tick, pos uint64, full bool) error {
	if err := r.flush(); err != nil {
		return err
	}
	raw := 0
	for s, sim := range r.sims {
		c := r.caps[s]
		sim.Tables().CaptureInto(c, full)
		zeroFreeSlots(c)
		var err error
		if r.encBuf, err = c.AppendBinary(r.encBuf[:0]); err != nil {
			return fmt.Errorf("bsr: record: snapshot of shard %d at tick %d: %w", s, tick, err)
		}
		ref := chunkRef{Kind: KindSnapshot, Shard: uint32(s), First: tick, Last: tick, Aux1: pos, Aux2: sim.Hash()}
		if full {
			ref.Flags = FlagFull
			r.stats.FullSnapshots++
		} else {
			r.stats.DeltaSnapshots++
		}
		if err := r.w.writeChunk(ref, r.encBuf); err != nil {
			return err
		}
		raw += len(r.encBuf)
		r.stats.SnapshotRaw += int64(len(r.encBuf))
	}
	r.policy.taken(tick, full, raw)
	r.lastSnap = tick
	return nil
}

// finish writes out what is complete: the ticks stepped, a last snapshot
// (so verify has a state to compare the end with, and a seek to the end
// replays nothing) and the lineage ranges.
func (r *recorder) finish(ctx context.Context) error {
	if !r.recording {
		return nil
	}
	var err error
	if r.cur > r.base && r.lastSnap != r.cur && !r.broken {
		err = r.snapshot(r.cur, r.curPos, r.policy.needFull())
	} else {
		err = r.flush()
	}
	if err == nil && r.cur > r.base {
		err = r.checkpoint(r.cur, true)
	}
	if cerr := r.lin.Close(ctx); err == nil {
		err = cerr
	}
	return err
}

// feedSource is the Source of a recorder's runner: the entries it was
// last given, then ErrEndOfLog.
type feedSource struct {
	entries []msg.Entry
	next    int
}

func (f *feedSource) reset(entries []msg.Entry) { f.entries, f.next = entries, 0 }

// Next implements replay.Source.
func (f *feedSource) Next(context.Context) (msg.Entry, error) {
	if f.next >= len(f.entries) {
		return msg.Entry{}, replay.ErrEndOfLog
	}
	e := f.entries[f.next]
	f.next++
	return e, nil
}

// snapPolicy applies a SnapshotPolicy to the whole world: every shard is
// captured at the same ticks (so one replay of the log serves all shards)
// and the seek estimate is the world's work divided by the parallelism.
type snapPolicy struct {
	fixed          bool
	full, delta    uint64
	lastFull, last uint64
	any            bool
	sched          *snapshot.Scheduler
	par            float64
}

func newSnapPolicy(p SnapshotPolicy, shards int, tickRate uint16) *snapPolicy {
	if p.FullEvery > 0 {
		return &snapPolicy{fixed: true, full: p.FullEvery, delta: p.DeltaEvery}
	}
	if p.SeekTarget <= 0 {
		p.SeekTarget = DefaultSeekTarget
	}
	if p.Parallelism <= 0 {
		p.Parallelism = min(runtime.GOMAXPROCS(0), shards)
	}
	if p.MaxInterval == 0 {
		p.MaxInterval = 60 * uint64(max(tickRate, 1))
	}
	if p.RestoreNsPerByte <= 0 {
		p.RestoreNsPerByte = 4
	}
	return &snapPolicy{par: float64(p.Parallelism), sched: snapshot.NewScheduler(snapshot.Policy{
		RecoveryTarget: p.SeekTarget, Headroom: 0.4, DeltaFraction: 1e12, ChainFactor: 4,
		MaxInterval: p.MaxInterval, RestoreNsPerByte: p.RestoreNsPerByte,
		FixedCost: time.Millisecond, ReplayFactor: 1.5,
	})}
}

func (p *snapPolicy) observeStep(worldStep time.Duration) {
	if p.sched != nil {
		p.sched.ObserveStep(time.Duration(float64(worldStep) / p.par))
	}
}

func (p *snapPolicy) decide(tick uint64, dirty int) (take, full bool) {
	if p.fixed {
		switch {
		case !p.any || tick-p.lastFull >= p.full:
			return tick-p.lastFull >= p.full, true
		case p.delta > 0 && tick-p.last >= p.delta:
			return true, false
		}
		return false, false
	}
	return p.sched.Decide(tick, int(float64(dirty)/p.par), false)
}

// needFull says whether a capture now must be full (no chain to extend).
func (p *snapPolicy) needFull() bool { return !p.any }

func (p *snapPolicy) taken(tick uint64, full bool, raw int) {
	p.any, p.last = true, tick
	if full {
		p.lastFull = tick
	}
	if p.sched != nil {
		p.sched.Taken(tick, full, int(float64(raw)/p.par))
	}
}

// writerLineage is the lineage.Store a recorder's lineage.Log writes to:
// every range it stores becomes a lineage chunk, every metadata value a
// meta chunk.
type writerLineage struct {
	w     *Writer
	infos []lineage.RangeInfo
	meta  map[string][]byte
}

var _ lineage.Store = (*writerLineage)(nil)

func (s *writerLineage) PutRange(_ context.Context, info lineage.RangeInfo, data []byte) error {
	if err := s.w.writeChunk(chunkRef{Kind: KindLineage, Shard: uint32(info.Shard), First: info.FirstTick, Last: info.LastTick}, data); err != nil {
		return err
	}
	s.infos = append(s.infos, info)
	return nil
}

func (s *writerLineage) Ranges(context.Context) ([]lineage.RangeInfo, error) {
	return append([]lineage.RangeInfo(nil), s.infos...), nil
}

func (s *writerLineage) GetRange(_ context.Context, shard lineage.ShardID, first uint64) ([]byte, error) {
	// The recorder's Log never goes back: a range is only looked up for
	// the first tick of a shard, which the recording never holds yet.
	return nil, fmt.Errorf("bsr: range %d/%d: %w", shard, first, lineage.ErrNotFound)
}

func (s *writerLineage) DeleteBefore(context.Context, lineage.ShardID, uint64) error { return nil }

func (s *writerLineage) PutMeta(_ context.Context, name string, value []byte) error {
	if err := s.w.WriteMeta(name, value); err != nil {
		return err
	}
	if s.meta == nil {
		s.meta = map[string][]byte{}
	}
	s.meta[name] = append([]byte(nil), value...)
	return nil
}

func (s *writerLineage) GetMeta(_ context.Context, name string) ([]byte, error) {
	if v, ok := s.meta[name]; ok {
		return append([]byte(nil), v...), nil
	}
	return nil, fmt.Errorf("bsr: meta %q: %w", name, lineage.ErrNotFound)
}

func (s *writerLineage) Close() error { return nil }

// zeroFreeSlots clears the bytes of the free slots in a capture's pages.
// They are unspecified (a table frees a slot without writing it, and
// Alloc zeroes it again), restore never reads them, and the hash does not
// cover them; left as they were they hold dead entities' records, which
// compress far worse than zeros.
func zeroFreeSlots(sc *table.SetCapture) {
	for _, tc := range sc.Tables {
		per, size := int(tc.RecordsPerPage), int(tc.RecordSize)
		for _, p := range tc.Pages {
			first := int(p.Index) * per
			for k := range per {
				slot := first + k
				if tc.Live[slot>>6]&(1<<(uint(slot)&63)) == 0 {
					clear(p.Data[k*size : (k+1)*size])
				}
			}
		}
	}
}
