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
	// Clock is the time source (default SystemClock).
	Clock Clock
	// MaxLag is how far behind its schedule the ticker may fall (a slow
	// append, a paused process) before it stops catching up with a burst
	// of markers and restarts its schedule from now (default one second).
	MaxLag time.Duration
	// OnTick, if set, is called after TICK(n) is durable.
	OnTick func(tick uint64, at time.Time)
}

// Ticker appends the world's TICK(n) markers at its tick rate. Commands
// ordered between TICK(n-1) and TICK(n) are tick n's inputs, so the log
// alone defines the execution, time included. Each marker has the
// deterministic id {TickerClientID(world), n} and is appended only after
// the previous one is durable, so markers are in tick order and a second or
// restarted ticker never stores a tick twice.
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

// Run appends markers until ctx ends (it then returns ctx.Err()).
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
	clock, period := t.cfg.Clock, t.Period()
	anchor, k := clock.Now(), time.Duration(0)
	for {
		due := anchor.Add(k * period)
		if wait := due.Sub(clock.Now()); wait > 0 {
			select {
			case <-clock.After(wait):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if err := t.appendTick(ctx, next); err != nil {
			return err
		}
		if t.cfg.OnTick != nil {
			t.cfg.OnTick(next, clock.Now())
		}
		next++
		t.next.Store(next)
		k++
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
	id := TickerClientID(world)
	tail, err := log.CheckTail(ctx)
	if err != nil {
		return 0, fmt.Errorf("find last tick: tail: %w", err)
	}
	const window = 512
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
