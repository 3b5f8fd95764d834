package lineage

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// DefaultRangeTicks is the number of ticks per stored Range when
// LogOptions.RangeTicks is 0: about 4 s of play at 30 ticks/s.
const DefaultRangeTicks = 128

// ErrNoTick is returned by EndTick without a matching BeginTick, and by
// BeginTick while a tick is open.
var ErrNoTick = errors.New("lineage: tick not begun or not ended")

// ErrLogClosed is returned by a Log's methods after Close.
var ErrLogClosed = errors.New("lineage: log is closed")

// LogOptions configures a Log.
type LogOptions struct {
	// Store receives the encoded ranges; nil means a new MemStore.
	Store Store
	// RangeTicks is the number of ticks per Range; 0 means
	// DefaultRangeTicks. Ranges are aligned: a range holds the ticks
	// [k·RangeTicks, (k+1)·RangeTicks) it saw.
	RangeTicks int
	// RetainTicks, if not 0, makes the Log delete a shard's ranges that
	// ended more than RetainTicks ticks before the last one it stored (in
	// steps of at least a quarter of RetainTicks, so deletions stay
	// large and rare). Trim deletes by log position instead.
	RetainTicks uint64
	// Background makes the Log encode and store ranges on a goroutine of
	// its own, as snapshots are persisted: the tick that completes a
	// range only hands its buffer over (and takes an empty one back), so
	// the tick loop never waits for zstd or the store, unless it gets two
	// ranges ahead. Errors of the background work are returned by a later
	// EndTick, Flush or Close. Close stops the goroutine.
	Background bool
}

// LogStats are a Log's running totals.
type LogStats struct {
	// Ticks, Inputs and Events count what was recorded (inputs and
	// events when their range is sealed).
	Ticks, Inputs, Events uint64
	// Ranges and Bytes count the ranges stored and their encoded size
	// (partial ranges written by Flush are not counted).
	Ranges, Bytes uint64
	// Dropped counts events reported outside BeginTick/EndTick and
	// inputs out of log order; both are bugs of the caller.
	Dropped uint64
}

// TickRecorder is a Recorder that must be told which shard and tick the
// events belong to and what was input to the tick. A Runner whose
// Recorder implements it (Log does) calls, for every Step, including ticks
// the log skipped (no inputs):
//
//	BeginTick(ctx, shard, tick)
//	Input(CommandInfo{Pos, Player, Kind}) for each record of the tick, in log order
//	Step(tick, cmds, rec)
//	EndTick(ctx)
//
// Input may equally come after Step, before EndTick. Kind comes from the
// game (0 for engine records such as migrations).
type TickRecorder interface {
	Recorder
	BeginTick(ctx context.Context, shard ShardID, tick uint64) error
	Input(c CommandInfo)
	EndTick(ctx context.Context) error
}

// Log is the engine's lineage Recorder (a TickRecorder). The caller (a
// replay.Runner) brackets each Step of a shard with BeginTick and EndTick
// and reports the tick's input records with Input:
//
//	log.BeginTick(ctx, shard, tick)
//	for _, c := range cmds { log.Input(CommandInfo{Pos: c.Pos, Player: c.Player, Kind: kindOf(c)}) }
//	outs := sim.Step(tick, cmds, log)
//	log.EndTick(ctx)
//
// Command and Derived append one 24-byte Event to a preallocated column:
// no map, no allocation once the buffers have grown to a range's size.
// At the last tick of every aligned window of RangeTicks ticks, EndTick
// seals the shard's Range: it encodes it and puts it in the Store, inline
// or (LogOptions.Background) on the Log's goroutine.
//
// One Log may record several shards, one tick at a time (it keeps a Range
// per shard); it is not safe for concurrent use, so Runners stepping in
// parallel each get their own Log and share the Store.
//
// Re-executing ticks (recovery after a crash, or a Runner restarted from a
// snapshot) is supported: when BeginTick goes back, or a shard's first
// tick is in the middle of a window, the Log reloads the stored range of
// that window, keeps its ticks before the new one, and records the rest
// again, so stored ranges never overlap. Flush, called when a snapshot is
// taken, bounds what a crash can lose.
type Log struct {
	store      Store
	rangeTicks uint64
	retain     uint64

	shards []*shardLog
	cur    *shardLog // the shard of the open tick; &idle outside ticks
	idle   shardLog  // absorbs (and counts) events outside a tick
	open   bool
	closed bool
	tick   uint64
	err    error // an Input error, returned by EndTick

	enc   Encoder // inline sealing and Flush
	buf   []byte
	stats LogStats
	bg    *sealer // nil: seal inline
}

type shardLog struct {
	r Range
	// loaded is set once the store was consulted for a partial range.
	loaded bool
	// trimmed is the first tick kept by the last retention trim.
	trimmed uint64
}

// sealer encodes and stores ranges on its own goroutine.
type sealer struct {
	jobs  chan sealJob
	spare chan *Range // emptied ranges, back to the tick loop
	done  chan struct{}

	failed  atomic.Bool // err is set
	mu      sync.Mutex
	err     error // the first error not yet returned
	ranges  uint64
	bytes   uint64
	trimmed map[ShardID]uint64
}

// sealJob is a full range to store, or (r nil) a barrier: the sealer
// closes reply when it reaches it.
type sealJob struct {
	r     *Range
	reply chan struct{}
}

var _ TickRecorder = (*Log)(nil)

// NewLog returns a Log writing to opts.Store. With opts.Background, Close
// must be called to stop its goroutine.
func NewLog(opts LogOptions) *Log {
	l := &Log{store: opts.Store, rangeTicks: uint64(opts.RangeTicks), retain: opts.RetainTicks}
	if l.store == nil {
		l.store = NewMemStore()
	}
	if opts.RangeTicks <= 0 {
		l.rangeTicks = DefaultRangeTicks
	}
	l.cur = &l.idle
	if opts.Background {
		l.bg = &sealer{jobs: make(chan sealJob, 1), spare: make(chan *Range, 2), done: make(chan struct{}), trimmed: map[ShardID]uint64{}}
		go l.bg.run(l)
	}
	return l
}

// Store returns the Log's store.
func (l *Log) Store() Store { return l.store }

// Stats returns the running totals.
func (l *Log) Stats() LogStats {
	st := l.stats
	if l.bg != nil {
		l.bg.mu.Lock()
		st.Ranges, st.Bytes = l.bg.ranges, l.bg.bytes
		l.bg.mu.Unlock()
	}
	return st
}

// Command implements Recorder.
func (l *Log) Command(e EntityID, pos uint64) {
	s := l.cur
	s.r.Events = append(s.r.Events, Event{Entity: e, Arg: pos, Kind: EventCommand})
}

// Derived implements Recorder.
func (l *Log) Derived(e, from EntityID) {
	s := l.cur
	s.r.Events = append(s.r.Events, Event{Entity: e, Arg: uint64(from), Kind: EventDerived})
}

// Input records a log record that is input to the open tick (its Tick
// field is set to the tick). Inputs of a shard must come in log order.
func (l *Log) Input(c CommandInfo) {
	if !l.open {
		l.stats.Dropped++
		return
	}
	r := &l.cur.r
	if n := len(r.Inputs); n > 0 && c.Pos <= r.Inputs[n-1].Pos {
		l.stats.Dropped++
		if l.err == nil {
			l.err = fmt.Errorf("%w: shard %d tick %d: input position %d after %d", ErrInvalidRange, r.Shard, l.tick, c.Pos, r.Inputs[n-1].Pos)
		}
		return
	}
	c.Tick = l.tick
	r.Inputs = append(r.Inputs, c)
}

func (l *Log) window(tick uint64) uint64 { return tick - tick%l.rangeTicks }

func (l *Log) shard(id ShardID) *shardLog {
	for _, s := range l.shards {
		if s.r.Shard == id {
			return s
		}
	}
	s := &shardLog{}
	s.r.Shard = id
	l.shards = append(l.shards, s)
	return s
}

// BeginTick opens tick of shard: the events reported until EndTick are
// this shard's for this tick.
func (l *Log) BeginTick(ctx context.Context, shard ShardID, tick uint64) error {
	if l.closed {
		return ErrLogClosed
	}
	if l.open {
		return fmt.Errorf("%w: BeginTick(%d, %d) while tick %d is open", ErrNoTick, shard, tick, l.tick)
	}
	if n := len(l.idle.r.Events); n > 0 {
		l.stats.Dropped += uint64(n)
		l.idle.r.Events = l.idle.r.Events[:0]
	}
	s := l.shard(shard)
	r := &s.r
	next := r.FirstTick + uint64(r.Ticks())
	switch {
	case !s.loaded || tick < r.FirstTick:
		// First tick of the shard, or going back before the buffer:
		// start from what the store holds for tick's window.
		if err := l.load(ctx, s, tick); err != nil {
			return err
		}
	case r.Ticks() == 0:
		r.FirstTick = tick
	case tick < next:
		truncate(r, tick) // re-executing ticks of this window
	case l.window(tick) != l.window(r.FirstTick):
		if err := l.seal(ctx, s); err != nil {
			return err
		}
		s.r.Reset(shard, tick)
	default:
		pad(r, tick)
	}
	l.cur, l.open, l.tick = s, true, tick
	return nil
}

// EndTick closes the open tick. At the last tick of a window it seals the
// shard's range. It returns the first error since the last call: an Input
// out of order, or an encoding or store error (with Background, possibly
// of a range sealed earlier).
func (l *Log) EndTick(ctx context.Context) error {
	if !l.open {
		return fmt.Errorf("%w: EndTick without BeginTick", ErrNoTick)
	}
	s := l.cur
	r := &s.r
	r.InputEnds = append(r.InputEnds, len(r.Inputs))
	r.EventEnds = append(r.EventEnds, len(r.Events))
	l.cur, l.open = &l.idle, false
	l.stats.Ticks++
	err := l.err
	l.err = nil
	if (l.tick+1)%l.rangeTicks == 0 {
		if serr := l.seal(ctx, s); serr != nil && err == nil {
			err = serr
		}
		s.r.Reset(s.r.Shard, l.tick+1)
	}
	if err == nil && l.bg != nil {
		err = l.bg.takeErr()
	}
	return err
}

// Flush stores every shard's partial range (the full range replaces it
// later), after the ranges sealed before it. Call it when a snapshot is
// taken, so that recovery from that snapshot finds the lineage of the
// ticks before it, and before reading the store.
func (l *Log) Flush(ctx context.Context) error {
	if l.closed {
		return ErrLogClosed
	}
	if l.open {
		return fmt.Errorf("%w: Flush while tick %d is open", ErrNoTick, l.tick)
	}
	if err := l.barrier(ctx); err != nil {
		return err
	}
	for _, s := range l.shards {
		if s.r.Ticks() == 0 {
			continue
		}
		if err := l.put(ctx, &l.enc, &s.r); err != nil {
			return err
		}
	}
	return nil
}

// Close flushes (Flush) and, with Background, waits for the stored ranges
// and stops the Log's goroutine. The Log is unusable afterwards; the Store
// stays open.
func (l *Log) Close(ctx context.Context) error {
	if l.closed {
		return ErrLogClosed
	}
	err := l.Flush(ctx)
	l.closed = true
	if l.bg != nil {
		close(l.bg.jobs)
		select {
		case <-l.bg.done:
		case <-ctx.Done():
			if err == nil {
				err = fmt.Errorf("lineage: close: %w", ctx.Err())
			}
		}
		if berr := l.bg.takeErr(); err == nil {
			err = berr
		}
	}
	return err
}

// barrier waits until every range sealed so far is stored, and returns
// the background error, if any.
func (l *Log) barrier(ctx context.Context) error {
	if l.bg == nil {
		return nil
	}
	reply := make(chan struct{})
	select {
	case l.bg.jobs <- sealJob{reply: reply}:
	case <-ctx.Done():
		return fmt.Errorf("lineage: wait for sealed ranges: %w", ctx.Err())
	}
	select {
	case <-reply:
	case <-ctx.Done():
		return fmt.Errorf("lineage: wait for sealed ranges: %w", ctx.Err())
	}
	return l.bg.takeErr()
}

// seal stores s's range (inline) or hands it to the sealer (its buffers
// swapped with an emptied range's); the caller resets s.r.
func (l *Log) seal(ctx context.Context, s *shardLog) error {
	r := &s.r
	if r.Ticks() == 0 {
		return nil
	}
	l.stats.Inputs += uint64(len(r.Inputs))
	l.stats.Events += uint64(len(r.Events))
	if l.bg != nil {
		var job *Range
		select {
		case job = <-l.bg.spare:
		default:
			job = new(Range)
		}
		*job, *r = *r, *job
		select {
		case l.bg.jobs <- sealJob{r: job}:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("lineage: shard %d ticks %d..%d: %w", job.Shard, job.FirstTick, job.LastTick(), ctx.Err())
		}
	}
	if err := l.put(ctx, &l.enc, r); err != nil {
		return err
	}
	l.stats.Ranges++
	l.stats.Bytes += uint64(len(l.buf))
	cut, ok := l.retention(r, s.trimmed)
	if !ok {
		return nil
	}
	if err := trimShard(ctx, l.store, r.Shard, cut); err != nil {
		return err
	}
	s.trimmed = cut
	return nil
}

// retention returns where to cut a shard's history after r was stored, if
// it is time to.
func (l *Log) retention(r *Range, trimmed uint64) (uint64, bool) {
	if l.retain == 0 {
		return 0, false
	}
	end := r.LastTick() + 1
	if end <= l.retain {
		return 0, false
	}
	cut := l.window(end - l.retain)
	if cut <= trimmed || cut-trimmed < max(l.rangeTicks, l.retain/4) {
		return 0, false
	}
	return cut, true
}

func trimShard(ctx context.Context, s Store, shard ShardID, cut uint64) error {
	if err := s.DeleteBefore(ctx, shard, cut); err != nil {
		return fmt.Errorf("lineage: retention of shard %d: %w", shard, err)
	}
	return noteHorizon(ctx, s, cut)
}

func (l *Log) put(ctx context.Context, enc *Encoder, r *Range) error {
	buf, err := enc.AppendRange(l.buf[:0], r)
	l.buf = buf
	if err != nil {
		return fmt.Errorf("lineage: shard %d ticks %d..%d: %w", r.Shard, r.FirstTick, r.LastTick(), err)
	}
	if err := l.store.PutRange(ctx, infoOf(r, len(buf)), buf); err != nil {
		return fmt.Errorf("lineage: shard %d ticks %d..%d: %w", r.Shard, r.FirstTick, r.LastTick(), err)
	}
	return nil
}

// run is the sealer's goroutine: it stores ranges until jobs is closed.
func (b *sealer) run(l *Log) {
	defer close(b.done)
	var enc Encoder
	var buf []byte
	ctx := context.Background()
	for job := range b.jobs {
		if job.r == nil {
			close(job.reply)
			continue
		}
		r := job.r
		var err error
		buf, err = enc.AppendRange(buf[:0], r)
		if err == nil {
			err = l.store.PutRange(ctx, infoOf(r, len(buf)), buf)
		}
		if err == nil {
			b.mu.Lock()
			b.ranges++
			b.bytes += uint64(len(buf))
			b.mu.Unlock()
			if cut, ok := l.retention(r, b.trimmed[r.Shard]); ok {
				if err = trimShard(ctx, l.store, r.Shard, cut); err == nil {
					b.trimmed[r.Shard] = cut
				}
			}
		}
		if err != nil {
			b.fail(fmt.Errorf("lineage: shard %d ticks %d..%d: %w", r.Shard, r.FirstTick, r.LastTick(), err))
		}
		r.Reset(0, 0)
		select {
		case b.spare <- r:
		default:
		}
	}
}

func (b *sealer) fail(err error) {
	b.mu.Lock()
	if b.err == nil {
		b.err = err
		b.failed.Store(true)
	}
	b.mu.Unlock()
}

func (b *sealer) takeErr() error {
	if !b.failed.Load() {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	err := b.err
	b.err = nil
	b.failed.Store(false)
	return err
}

// load replaces s's buffer with the stored range of tick's window cut
// before tick, or an empty range starting at tick.
//
// When the window's newest stored range ends before tick-1, the ticks in
// between were never recorded (or the store answered with an older
// version of the range): the buffer then starts afresh at tick, so those
// ticks are missing from the lineage, not recorded as empty. Empty ticks
// there would be wrong answers: "no command explains this tick".
func (l *Log) load(ctx context.Context, s *shardLog, tick uint64) error {
	s.loaded = true
	r := &s.r
	r.Reset(r.Shard, tick)
	if err := l.barrier(ctx); err != nil {
		return err
	}
	infos, err := l.store.Ranges(ctx)
	if err != nil {
		return fmt.Errorf("lineage: resume shard %d at tick %d: %w", r.Shard, tick, err)
	}
	w := l.window(tick)
	var from RangeInfo
	found := false
	for _, info := range infos {
		if info.Shard != r.Shard || info.FirstTick < w || info.FirstTick >= tick {
			continue
		}
		if !found || info.FirstTick > from.FirstTick {
			from, found = info, true // the window's newest range before tick
		}
	}
	if !found {
		return nil
	}
	b, err := l.store.GetRange(ctx, from.Shard, from.FirstTick)
	if err != nil {
		return fmt.Errorf("lineage: resume shard %d at tick %d: %w", r.Shard, tick, err)
	}
	if err := DecodeRange(b, r); err != nil || r.Shard != from.Shard || tick > r.LastTick()+1 {
		// A damaged partial range, or one that ends before tick-1: re-
		// recorded from tick on; the ticks before it are lost rather than
		// the whole shard, or than recorded empty.
		r.Reset(from.Shard, tick)
		return nil
	}
	if tick <= r.LastTick() {
		truncate(r, tick)
	}
	return nil
}

// truncate drops r's ticks at and after tick (FirstTick ≤ tick).
func truncate(r *Range, tick uint64) {
	n := int(tick - r.FirstTick)
	r.InputEnds, r.EventEnds = r.InputEnds[:n], r.EventEnds[:n]
	if n == 0 {
		r.Inputs, r.Events = r.Inputs[:0], r.Events[:0]
		return
	}
	r.Inputs, r.Events = r.Inputs[:r.InputEnds[n-1]], r.Events[:r.EventEnds[n-1]]
}

// pad appends empty ticks to r up to tick (exclusive).
func pad(r *Range, tick uint64) {
	for next := r.FirstTick + uint64(r.Ticks()); next < tick; next++ {
		r.InputEnds = append(r.InputEnds, len(r.Inputs))
		r.EventEnds = append(r.EventEnds, len(r.Events))
	}
}
