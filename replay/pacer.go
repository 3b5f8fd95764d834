package replay

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// PacerConfig configures a Pacer.
type PacerConfig struct {
	// Rate is the world's tick rate (ticks per second; 0: DefaultTickRate).
	Rate int
	// Budget is how long after the live runners have all stepped a tick
	// catch-up work may go on (0: two thirds of a period). Past it, the next live
	// tick is near, and catch-up waits until the live runners have
	// stepped it.
	Budget time.Duration
	// MaxWait bounds a catch-up slice's wait: once the newest live tick
	// is that old (0: two periods) and no newer one came, or a live
	// runner has been behind the newest tick for that long, catch-up goes
	// on, so that a stalled Ticker or a stuck runner cannot starve a
	// takeover.
	MaxWait time.Duration
	// Clock is the pacer's time source (nil: SystemClock).
	Clock Clock
}

// Pacer gives a process's live runners' ticks precedence over its
// catch-up work: the restore and replay of a shard it has just taken over
// (or of a hot copy it starts). The live runners report every tick they
// step (Stepped); a catch-up slice (one replayed tick, one snapshot link
// read and decoded, one sim restored) first calls Wait, which returns at
// once while no live tick is pending and the newest one was stepped less
// than Budget ago, and otherwise waits until every live runner has
// stepped the next one (or MaxWait passed). So a takeover's CPU runs in
// the part of each period after the live steps, not at the moment the
// live runners must step, on the same cores. Pacing changes only when
// work runs, never what it computes: a paced runner steps the same ticks
// from the same inputs.
//
// A Pacer with no live runner never waits. Its methods may be called from
// any goroutine.
type Pacer struct {
	clock           Clock
	budget, maxWait time.Duration

	mu   sync.Mutex
	live map[uint32]uint64 // shard → last tick stepped live
	// newest is the newest tick any live runner stepped, first at
	// newestAt; allAt is when the last live runner stepped it (zero while
	// one is behind).
	newest          uint64
	newestAt, allAt time.Time
	changed         chan struct{} // closed and replaced on every change

	waits    uint64
	waitedNs int64
}

// NewPacer returns a pacer.
func NewPacer(cfg PacerConfig) *Pacer {
	if cfg.Rate <= 0 {
		cfg.Rate = DefaultTickRate
	}
	period := time.Second / time.Duration(cfg.Rate)
	if cfg.Budget <= 0 {
		cfg.Budget = period * 2 / 3
	}
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = 2 * period
	}
	if cfg.Clock == nil {
		cfg.Clock = SystemClock{}
	}
	return &Pacer{clock: cfg.Clock, budget: cfg.Budget, maxWait: cfg.MaxWait, live: map[uint32]uint64{}, changed: make(chan struct{})}
}

// Stepped tells the pacer that shard's live runner stepped tick.
func (p *Pacer) Stepped(shard uint32, tick uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock.Now()
	p.live[shard] = tick
	if tick > p.newest {
		p.newest, p.newestAt, p.allAt = tick, now, time.Time{}
	}
	p.update(now)
}

// Leave tells the pacer that shard's runner is no longer live here.
func (p *Pacer) Leave(shard uint32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.live[shard]; !ok {
		return
	}
	delete(p.live, shard)
	p.update(p.clock.Now())
}

// update sets allAt if every live runner has stepped the newest tick, and
// wakes the waiters. p.mu is held.
func (p *Pacer) update(now time.Time) {
	if p.allAt.IsZero() && !p.behind() {
		p.allAt = now
	}
	close(p.changed)
	p.changed = make(chan struct{})
}

// behind reports whether a live runner has not stepped the newest tick.
// p.mu is held.
func (p *Pacer) behind() bool {
	for _, t := range p.live {
		if t < p.newest {
			return true
		}
	}
	return false
}

// turn reports whether catch-up may run now, else until when it waits at
// most and the channel that tells of a change.
func (p *Pacer) turn() (ok bool, until time.Time, changed <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock.Now()
	switch {
	case len(p.live) == 0 || p.newestAt.IsZero():
		return true, now, nil
	case p.behind() || p.allAt.IsZero():
		// A live tick is being stepped: wait for the last live runner.
		until = p.newestAt.Add(p.maxWait)
	case now.Before(p.allAt.Add(p.budget)):
		return true, now, nil // the slot after the live steps
	default:
		// The next live tick is near: wait for it.
		until = p.allAt.Add(p.maxWait)
	}
	if !now.Before(until) {
		return true, now, nil // overdue: catch-up goes on
	}
	return false, until, p.changed
}

// Wait waits until catch-up work may run (see Pacer). It returns ctx's
// error if ctx ends first.
func (p *Pacer) Wait(ctx context.Context) error { return p.wait(ctx, time.Time{}) }

// wait is Wait, returning nil at deadline at the latest (zero: none).
func (p *Pacer) wait(ctx context.Context, deadline time.Time) error {
	var began time.Time
	for {
		ok, until, changed := p.turn()
		if !ok && !deadline.IsZero() {
			if !p.clock.Now().Before(deadline) {
				ok, until = true, p.clock.Now()
			} else if deadline.Before(until) {
				until = deadline
			}
		}
		if ok {
			if !began.IsZero() {
				p.mu.Lock()
				p.waits++
				p.waitedNs += int64(until.Sub(began))
				p.mu.Unlock()
			}
			return nil
		}
		if began.IsZero() {
			began = p.clock.Now()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		case <-p.clock.After(until.Sub(p.clock.Now())):
		}
	}
}

// Bounded returns a Wait that waits at most total in all, over every call
// (then it returns at once): the pacing of one takeover, whose delay is
// bounded so that the sector is live again in time however busy the live
// runners are.
func (p *Pacer) Bounded(total time.Duration) func(context.Context) error {
	var left atomic.Int64
	left.Store(int64(total))
	return func(ctx context.Context) error {
		l := time.Duration(left.Load())
		if l <= 0 {
			return ctx.Err()
		}
		start := p.clock.Now()
		err := p.wait(ctx, start.Add(l))
		left.Add(-int64(p.clock.Now().Sub(start)))
		return err
	}
}

// Waited returns how many catch-up slices waited, and for how long in all.
func (p *Pacer) Waited() (n uint64, total time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waits, time.Duration(p.waitedNs)
}
