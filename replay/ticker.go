package replay

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/netcode/wire"
)

// DefaultTickRate is the default world tick rate in ticks per second.
const DefaultTickRate = 30

// Clock is the time source of a Ticker, a Supervisor and a Runner,
// injected so that tests and simulators drive time (SystemClock is the
// real one).
type Clock interface {
	Now() time.Time
	// After returns a channel that receives once d has elapsed.
	After(d time.Duration) <-chan time.Time
}

// SystemClock is the real clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// After returns time.After(d).
func (SystemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// TickerConfig configures a Ticker.
type TickerConfig struct {
	// World names the world; its tick markers' record ids derive from it
	// (TickerClientID).
	World uint32
	// Log receives the markers (required).
	Log TickLog
	// Rate is the number of ticks per second (default DefaultTickRate).
	Rate int
	// Start is the first tick to append; 0 means the tick after the last
	// one in the log (FindLastTick), or 1 for a new world.
	Start uint64
	// Due, with Start, is when tick Start is due (zero: at once). A
	// Ticker taking over from a Standby's schedule goes on from there, so
	// the world's ticks keep their phase (a Due in the past is caught up,
	// within MaxLag).
	Due time.Time
	// Skip, if set, is asked at each tick's due time whether that tick's
	// marker was already seen in the log (another Ticker or a Standby
	// appended it): such a tick is not appended again, late.
	Skip func(tick uint64) bool
	// Clock is the time source (default SystemClock).
	Clock Clock
	// MaxLag is how far behind its schedule the ticker may fall (a slow
	// append, a paused process) before it stops catching up with a burst
	// of markers and restarts its schedule from now (default one second).
	MaxLag time.Duration
	// InFlight is how many markers may await their acknowledgement at once
	// (default DefaultTickerInFlight). One would bound the tick rate by the
	// log's append latency: at 30 Hz any latency above 33 ms would slow the
	// world down.
	InFlight int
	// OnTick, if set, is called after TICK(n) is durable, in tick order.
	OnTick func(tick uint64, at time.Time)
	// DueOf, if set, is the world's shared schedule (a Standby's
	// DueOf): when it knows one (ok), tick n is due when it says, not on
	// this Ticker's own anchor. Two Tickers on one shared schedule append
	// each marker at the same moment, so either one's death costs the
	// world no tick (the log stores each tick once: the other's marker is
	// a duplicate it drops).
	DueOf func(tick uint64) (due time.Time, ok bool)
	// Rebase, if set with DueOf, is told when this Ticker fell more than
	// MaxLag behind the shared schedule and restarts it: tick is due at
	// due from now on.
	Rebase func(tick uint64, due time.Time)
}

// DefaultTickerInFlight is the default TickerConfig.InFlight: enough
// markers for 30 Hz to hold through 260 ms of append latency.
const DefaultTickerInFlight = 8

// Ticker appends the world's TICK(n) markers at its tick rate. Commands
// ordered between TICK(n-1) and TICK(n) are tick n's inputs, so the log
// alone defines the execution, time included. Each marker has the
// deterministic id {TickerClientID(world), n}, so a second or restarted
// ticker never stores a tick twice. Up to InFlight markers are appended at
// once, in tick order on one log client, so the log orders them in tick
// order unless a fault makes it reorder two of them; then a Runner steps
// the ticks the higher marker skipped without input and ignores the lower,
// stale one (Runner.tickMarker), so the log still alone defines the
// execution.
type Ticker struct {
	cfg  TickerConfig
	id   uint64
	next atomic.Uint64
}

// NewTicker returns a ticker; Run starts it.
func NewTicker(cfg TickerConfig) (*Ticker, error) {
	if cfg.Log == nil {
		return nil, fmt.Errorf("replay: ticker of world %d: no log", cfg.World)
	}
	if cfg.Rate <= 0 {
		cfg.Rate = DefaultTickRate
	}
	if cfg.Clock == nil {
		cfg.Clock = SystemClock{}
	}
	if cfg.MaxLag <= 0 {
		cfg.MaxLag = time.Second
	}
	t := &Ticker{cfg: cfg, id: TickerClientID(cfg.World)}
	t.next.Store(cfg.Start)
	return t, nil
}

// Period returns the time between ticks.
func (t *Ticker) Period() time.Duration { return time.Second / time.Duration(t.cfg.Rate) }

// Next returns the next tick the ticker will append (0 before Run found
// it). It is safe to call while Run runs.
func (t *Ticker) Next() uint64 { return t.next.Load() }

// Run appends markers until ctx ends (it then returns ctx.Err()) or the
// log is closed.
func (t *Ticker) Run(ctx context.Context) error {
	next := t.next.Load()
	if next == 0 {
		last, err := FindLastTick(ctx, t.cfg.Log, t.cfg.World)
		if err != nil {
			return fmt.Errorf("replay: ticker of world %d: %w", t.cfg.World, err)
		}
		next = last + 1
		t.next.Store(next)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	inFlight := t.cfg.InFlight
	if inFlight <= 0 {
		inFlight = DefaultTickerInFlight
	}
	async, ok := t.cfg.Log.(AsyncAppender)
	if !ok {
		// Appends from several goroutines could reach the log in any
		// order: one marker at a time.
		inFlight = 1
	}
	// pending holds the markers issued and not yet acknowledged, in tick
	// order; its capacity is the bound. The confirming goroutine takes
	// them in that order.
	type marker struct {
		tick uint64
		done chan error
	}
	pending := make(chan marker, inFlight)
	confirmed := make(chan struct{})
	go func() {
		defer close(confirmed)
		failed := false
		for m := range pending {
			if failed {
				continue // the rest are not waited for
			}
			var err error
			select {
			case err = <-m.done:
			case <-ctx.Done():
				// A marker the log client still holds is not waited
				// for: its outcome lands in m.done's buffer.
				failed = true
				continue
			}
			if err != nil {
				cancel(err)
				failed = true
				continue
			}
			if t.cfg.OnTick != nil {
				t.cfg.OnTick(m.tick, t.cfg.Clock.Now())
			}
		}
	}()
	err := t.schedule(ctx, next, func(n uint64) bool {
		m := marker{tick: n, done: make(chan error, 1)}
		select {
		case pending <- m:
		case <-ctx.Done():
			return false
		}
		if async == nil {
			m.done <- t.appendTick(ctx, n)
			return true
		}
		// Issued here, on this goroutine, so markers join the log client
		// in tick order; one the client refuses is retried apart.
		data := wire.EncodeEnvelope(nil, wire.Envelope{Kind: wire.EnvelopeTick, Tick: n})
		if aerr := async.AppendWithIDAsync(ctx, msg.RecordID{Client: t.id, Seq: n}, data, func(err error) {
			if err != nil {
				go func() { m.done <- t.appendTick(ctx, n) }()
				return
			}
			m.done <- nil
		}); aerr != nil {
			go func() { m.done <- t.appendTick(ctx, n) }()
		}
		return true
	})
	close(pending)
	<-confirmed
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return err
}

// AsyncAppender is a log that appends without a goroutine waiting
// (*cmdlog.Client): appends issued in order from one goroutine reach the
// log client in that order. done is called once with the outcome.
type AsyncAppender interface {
	AppendWithIDAsync(ctx context.Context, id msg.RecordID, data []byte, done func(error)) error
}

// schedule calls issue for each tick from next on, one period apart, until
// ctx ends or issue returns false.
func (t *Ticker) schedule(ctx context.Context, next uint64, issue func(uint64) bool) error {
	clock, period := t.cfg.Clock, t.Period()
	anchor, k := clock.Now(), time.Duration(0)
	if !t.cfg.Due.IsZero() && t.cfg.Start != 0 && next == t.cfg.Start {
		anchor = t.cfg.Due
	}
	for {
		due := anchor.Add(k * period)
		if t.cfg.DueOf != nil {
			if d, ok := t.cfg.DueOf(next); ok {
				due = d
			}
		}
		if wait := due.Sub(clock.Now()); wait > 0 {
			select {
			case <-clock.After(wait):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if t.cfg.Skip == nil || !t.cfg.Skip(next) {
			if !issue(next) {
				return ctx.Err()
			}
		}
		next++
		t.next.Store(next)
		k++
		if t.cfg.DueOf != nil {
			if d, ok := t.cfg.DueOf(next); ok {
				if now := clock.Now(); now.Sub(d) > t.cfg.MaxLag {
					anchor, k = now, 1
					if t.cfg.Rebase != nil {
						t.cfg.Rebase(next, now.Add(period))
					}
				}
				continue
			}
		}
		if now := clock.Now(); now.Sub(anchor.Add(k*period)) > t.cfg.MaxLag {
			// Too far behind to catch up: the next tick is one period
			// after this one.
			anchor, k = now, 1
		}
	}
}

// appendTick appends TICK(n), retrying until it is durable or ctx ends.
func (t *Ticker) appendTick(ctx context.Context, n uint64) error {
	// A fresh buffer per marker: a log may keep the slice it was given.
	data := wire.EncodeEnvelope(nil, wire.Envelope{Kind: wire.EnvelopeTick, Tick: n})
	backoff := 5 * time.Millisecond
	for {
		err := t.cfg.Log.AppendWithID(ctx, msg.RecordID{Client: t.id, Seq: n}, data)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, ErrLogClosed) {
			return fmt.Errorf("replay: ticker of world %d: tick %d: %w", t.cfg.World, n, err)
		}
		select {
		case <-t.cfg.Clock.After(backoff):
		case <-ctx.Done():
			return ctx.Err()
		}
		backoff = min(2*backoff, time.Second)
	}
}

// FindLastTick returns the last tick marker of world in the log (0 if there
// is none), reading back from the tail in windows.
func FindLastTick(ctx context.Context, log TickLog, world uint32) (uint64, error) {
	return findLastTick(ctx, log, world, 512)
}

// findLastTick is FindLastTick reading windows of window entries.
func findLastTick(ctx context.Context, log TickLog, world uint32, window uint64) (uint64, error) {
	id := TickerClientID(world)
	tail, err := log.CheckTail(ctx)
	if err != nil {
		return 0, fmt.Errorf("find last tick: tail: %w", err)
	}
	for hi := tail; hi >= 1; {
		lo := hi - min(hi-1, window-1)
		var best uint64
		for from := lo; from <= hi; {
			entries, err := log.Read(ctx, from, int(hi-from+1))
			if err != nil {
				return 0, fmt.Errorf("find last tick: read %d: %w", from, err)
			}
			if len(entries) == 0 {
				return 0, fmt.Errorf("find last tick: read %d: no entries below the tail %d", from, tail)
			}
			for _, e := range entries {
				if e.Pos > hi {
					break
				}
				if e.Record.ID.Client != id {
					continue
				}
				if env, err := wire.DecodeEnvelope(e.Record.Data); err == nil && env.Kind == wire.EnvelopeTick {
					best = max(best, env.Tick)
				}
			}
			from = entries[len(entries)-1].Pos + 1
		}
		if best > 0 {
			return best, nil
		}
		hi = lo - 1
	}
	return 0, nil
}
