package bsr

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sort"
	"sync"
	"time"

	"github.com/anoptic/broadside/lineage"
	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/snapshot"
	"github.com/anoptic/broadside/replay/table"
)

// SeekStats describes the last Seek or Step.
type SeekStats struct {
	// Tick is where the seek went; Took its wall time.
	Tick uint64
	Took time.Duration
	// Restored counts the shards restored from snapshots (the others
	// continued from where they were); Snapshots the snapshot chunks
	// applied and RawBytes their size.
	Restored, Snapshots int
	RawBytes            int64
	// Replayed is the most ticks a shard re-simulated.
	Replayed uint64
	// Restore and Replay are the slowest shard's times in each phase.
	Restore, Replay time.Duration
}

// Seeker re-creates a recording's world at any tick: it restores each
// shard from its newest snapshot chain at or before the tick and replays
// the recorded log from there with a replay.Runner (or, when that is
// shorter, keeps replaying from where the shard already is), shards in
// parallel. It is not safe for concurrent use; several Seekers may share a
// Reader.
type Seeker struct {
	r      *Reader
	newSim func(shard uint32) (replay.TableSim, error)
	shards []*seekShard
	tick   uint64
	par    int
	last   SeekStats
	quiet  *slog.Logger
	// fences is the fencing state at the base (BaseFences).
	fences []snapshot.Fence
}

type seekShard struct {
	id      uint32
	sim     replay.TableSim
	initial *table.SetCapture // the fresh sim's state, for a recording from tick 0
	runner  *replay.Runner    // nil: make one from (tick, pos)
	src     *entrySource
	tick    uint64 // the tick the sim is at
	pos     uint64 // the position of the last marker it consumed
	valid   bool
	stats   SeekStats
}

// NewSeeker returns a seeker over r with one sim per shard from newSim,
// positioned at the recording's base tick.
func NewSeeker(r *Reader, newSim func(shard uint32) (replay.TableSim, error)) (*Seeker, error) {
	if newSim == nil {
		return nil, errors.New("bsr: seeker: newSim is required")
	}
	s := &Seeker{r: r, newSim: newSim, par: max(1, min(runtime.GOMAXPROCS(0), int(r.h.Shards))),
		quiet: slog.New(slog.DiscardHandler)}
	var err error
	if s.fences, err = r.BaseFences(); err != nil {
		return nil, err
	}
	for i := range r.h.Shards {
		sim, err := newSim(i)
		if err != nil {
			return nil, fmt.Errorf("bsr: seeker: new sim of shard %d: %w", i, err)
		}
		sh := &seekShard{id: i, sim: sim}
		if r.base == 0 {
			sh.initial = sim.Tables().CaptureFull()
			sh.valid = true
		}
		s.shards = append(s.shards, sh)
	}
	if err := s.Seek(r.base); err != nil {
		return nil, err
	}
	return s, nil
}

// Sims returns the shards' sims, at Tick. Callers read them (for
// Broadside, type-assert to *broadside.Sector); they must not step them.
func (s *Seeker) Sims() []replay.TableSim {
	out := make([]replay.TableSim, len(s.shards))
	for i, sh := range s.shards {
		out[i] = sh.sim
	}
	return out
}

// Tick returns the tick the sims are at.
func (s *Seeker) Tick() uint64 { return s.tick }

// LastSeek describes the last Seek or Step.
func (s *Seeker) LastSeek() SeekStats { return s.last }

// Reset makes the next Seek restore every shard from snapshots rather
// than continue from the current tick (benchmarks measure cold seeks).
func (s *Seeker) Reset() {
	for _, sh := range s.shards {
		sh.valid = false
	}
}

// Step advances one tick (playback). At the last tick it returns an error
// wrapping ErrOutOfRange.
func (s *Seeker) Step() error { return s.Seek(s.tick + 1) }

// Seek brings every shard to the state after tick (BaseTick..LastTick).
// It returns an error wrapping ErrDiverged if a shard's re-simulated state
// hash differs from the recorded one, ErrCorrupt for damaged chunks.
func (s *Seeker) Seek(tick uint64) error {
	start := time.Now()
	r := s.r
	if tick < r.base || tick > r.last {
		return fmt.Errorf("%w: tick %d (recording holds %d..%d)", ErrOutOfRange, tick, r.base, r.last)
	}
	// The replay runs to the last tick the log marked at or before tick;
	// the gap ticks after it are stepped empty, as a Runner steps them.
	marked, pos, err := s.lastMarked(tick)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, s.par)
	errs := make([]error, len(s.shards))
	for i, sh := range s.shards {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if errs[i] = s.seekShard(sh, tick, marked, pos); errs[i] != nil {
				sh.valid, sh.runner = false, nil
			}
		}()
	}
	wg.Wait()
	st := SeekStats{Tick: tick}
	for i, sh := range s.shards {
		if errs[i] != nil {
			return errs[i]
		}
		st.Restored += sh.stats.Restored
		st.Snapshots += sh.stats.Snapshots
		st.RawBytes += sh.stats.RawBytes
		st.Replayed = max(st.Replayed, sh.stats.Replayed)
		st.Restore = max(st.Restore, sh.stats.Restore)
		st.Replay = max(st.Replay, sh.stats.Replay)
	}
	s.tick = tick
	st.Took = time.Since(start)
	s.last = st
	return nil
}

// lastMarked returns the last tick at or before tick that had a marker of
// its own, and that marker's position.
func (s *Seeker) lastMarked(tick uint64) (uint64, uint64, error) {
	r := s.r
	for t := tick; t > r.base; t-- {
		rec, err := r.tickRecord(t)
		if err != nil {
			return 0, 0, err
		}
		if !rec.Gap {
			return t, rec.Pos, nil
		}
	}
	return r.base, r.basePos, nil
}

// tickRecord is Tick without the copy of the hashes.
func (r *Reader) tickRecord(tick uint64) (TickRecord, error) {
	i, ok := findRange(r.ticks, tick)
	if !ok || tick > r.last {
		return TickRecord{}, fmt.Errorf("%w: tick %d (recorded %d..%d)", ErrOutOfRange, tick, r.FirstTick(), r.last)
	}
	tc, err := r.ticksChunk(&r.ticks[i])
	if err != nil {
		return TickRecord{}, err
	}
	return tc.record(tick), nil
}

// seekShard brings one shard to tick.
func (s *Seeker) seekShard(sh *seekShard, tick, marked, pos uint64) error {
	sh.stats = SeekStats{}
	r := s.r
	sn := r.snaps[sh.id]
	k := sort.Search(len(sn), func(i int) bool { return sn[i].First > tick }) - 1
	tipTick := r.base
	if k >= 0 {
		tipTick = sn[k].First
	}
	if !sh.valid || sh.tick > tick || sh.tick < tipTick {
		if err := s.restore(sh, k); err != nil {
			return err
		}
	}
	if err := s.replay(sh, tick, marked, pos); err != nil {
		return err
	}
	if tick == 0 {
		return nil // the fresh state: no recorded hash
	}
	want, err := r.Hash(sh.id, tick)
	if err != nil {
		return err
	}
	if got := sh.sim.Hash(); got != want {
		return fmt.Errorf("%w: shard %d at tick %d: hash %#x, recorded %#x (run verify)", ErrDiverged, sh.id, tick, got, want)
	}
	return nil
}

// restore restores sh from the chain ending with snapshot k of its shard
// (k < 0: the recording's start).
func (s *Seeker) restore(sh *seekShard, k int) error {
	start := time.Now()
	r := s.r
	sh.runner, sh.valid = nil, false
	if k < 0 {
		if r.base != 0 {
			return fmt.Errorf("%w: shard %d has no snapshot at the base tick %d", ErrCorrupt, sh.id, r.base)
		}
		if err := sh.sim.Tables().Restore(sh.initial); err != nil {
			return fmt.Errorf("bsr: shard %d: restore the initial state: %w", sh.id, err)
		}
		if err := sh.sim.Restored(); err != nil {
			return fmt.Errorf("bsr: shard %d: restore the initial state: %w", sh.id, err)
		}
		sh.tick, sh.pos = 0, 0
	} else {
		chain, raw, err := r.loadChain(sh.id, k)
		if err != nil {
			return err
		}
		tip := &r.snaps[sh.id][k]
		if err := restoreChain(sh.sim, chain, tip); err != nil {
			return err
		}
		sh.tick, sh.pos = tip.First, tip.Aux1
		sh.stats.Snapshots, sh.stats.RawBytes = len(chain), raw
	}
	sh.valid = true
	sh.stats.Restored = 1
	sh.stats.Restore = time.Since(start)
	return nil
}

// loadChain decodes the snapshot chain of shard ending with its snapshot
// k: the last full snapshot at or before it and the deltas after that.
func (r *Reader) loadChain(shard uint32, k int) ([]*table.SetCapture, int64, error) {
	sn := r.snaps[shard]
	b := k
	for b >= 0 && sn[b].Flags&FlagFull == 0 {
		b--
	}
	if b < 0 {
		return nil, 0, fmt.Errorf("%w: %s has no full snapshot before it", ErrCorrupt, sn[k].describe())
	}
	chain := make([]*table.SetCapture, 0, k-b+1)
	var raw int64
	bp := getBuf(0)
	defer putBuf(bp)
	for i := b; i <= k; i++ {
		c := &sn[i]
		data, err := r.readRawInto(c, *bp)
		if err != nil {
			return nil, 0, err
		}
		*bp = data // UnmarshalBinary copies what it keeps: reuse the buffer
		sc := new(table.SetCapture)
		if err := sc.UnmarshalBinary(data); err != nil {
			return nil, 0, fmt.Errorf("%w: %s: %v", ErrCorrupt, c.describe(), err)
		}
		if sc.Full != (c.Flags&FlagFull != 0) {
			return nil, 0, fmt.Errorf("%w: %s holds a capture with full=%v", ErrCorrupt, c.describe(), sc.Full)
		}
		chain = append(chain, sc)
		raw += int64(c.Raw)
	}
	return chain, raw, nil
}

// restoreChain restores sim's tables from chain and checks the result
// against the snapshot tip's recorded hash.
func restoreChain(sim replay.TableSim, chain []*table.SetCapture, tip *chunkRef) error {
	if err := sim.Tables().Restore(chain[0], chain[1:]...); err != nil {
		return fmt.Errorf("%w: shard %d: restore %s: %v", ErrCorrupt, tip.Shard, tip.describe(), err)
	}
	if err := sim.Restored(); err != nil {
		return fmt.Errorf("%w: shard %d: restore %s: %v", ErrCorrupt, tip.Shard, tip.describe(), err)
	}
	if h := sim.Hash(); h != tip.Aux2 {
		return fmt.Errorf("%w: shard %d: %s restores to hash %#x, recorded %#x", ErrCorrupt, tip.Shard, tip.describe(), h, tip.Aux2)
	}
	return nil
}

// replay runs sh from where it is to tick: a Runner over the recorded
// entries up to the marker of tick marked (at pos), then empty steps for
// the gap ticks after it.
func (s *Seeker) replay(sh *seekShard, tick, marked, pos uint64) error {
	start := time.Now()
	from := sh.tick
	if marked > sh.tick {
		if sh.runner == nil {
			sh.src = s.r.newEntrySource(sh.pos, pos)
			start := replay.Checkpoint{Tick: sh.tick, Pos: sh.pos}
			if sh.pos == s.r.basePos {
				start.Fences = s.fences
			} else {
				// From a snapshot (or a gap) inside the recording: the
				// claims made since the base fence older owners out.
				fs, err := s.r.fencesAt(context.Background(), sh.pos)
				if err != nil {
					return fmt.Errorf("bsr: shard %d: %w", sh.id, err)
				}
				start.Fences = fs
			}
			run, err := replay.NewRunner(replay.RunnerConfig{
				World: s.r.h.World, Shard: sh.id, Sim: sh.sim, Source: sh.src,
				Start: start, HistoryTicks: 8, Logger: s.quiet,
			})
			if err != nil {
				return fmt.Errorf("bsr: shard %d: %w", sh.id, err)
			}
			sh.runner = run
		} else {
			sh.src.to = pos
		}
		if err := sh.runner.Run(context.Background()); err != nil {
			return fmt.Errorf("bsr: shard %d: replay to tick %d: %w", sh.id, marked, err)
		}
		if got := sh.runner.Tick(); got != marked {
			return fmt.Errorf("%w: shard %d: replaying to the marker of tick %d (position %d) reached tick %d", ErrCorrupt, sh.id, marked, pos, got)
		}
		sh.tick, sh.pos = marked, pos
	}
	for t := max(sh.tick, marked) + 1; t <= tick; t++ {
		sh.sim.Step(t, nil, lineage.Nop)
		sh.runner, sh.tick = nil, t // a new runner starts from here
	}
	sh.stats.Replayed = tick - from
	sh.stats.Replay = time.Since(start)
	return nil
}
