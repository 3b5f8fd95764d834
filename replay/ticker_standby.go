package replay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// StandbyConfig configures a Standby.
type StandbyConfig struct {
	// World, Log, Rate, Clock, MaxLag and InFlight are as in TickerConfig:
	// a bridge is a Ticker on the holder's schedule.
	World    uint32
	Log      TickLog
	Rate     int
	Clock    Clock
	MaxLag   time.Duration
	InFlight int
	// Grace is how long past its schedule the next marker may arrive
	// before the standby bridges (default DefaultStandbyGrace periods).
	Grace time.Duration
	// OnBridge, if set, is called when a bridge starts (from: the first
	// tick it may append) and when it ends (bridging false); on the
	// standby's goroutine.
	OnBridge func(bridging bool, from uint64)
	// Hot starts the standby hot (SetHot).
	Hot bool
}

// DefaultStandbyGrace is the default StandbyConfig.Grace in tick periods.
// Half a period: in the cluster test (2 loaded cores) it bridged a dead
// holder's ticks with the longest interval at 75–105 ms against 110–260
// ms with 2 periods, and a marker that late in a quiet period is rare;
// a bridge started for nothing appends only duplicates, after reading
// the log's last marker (which ends most of them before they start).
const DefaultStandbyGrace = 0.5

// standbyMinObserved is how many markers a standby must have seen before
// it trusts its schedule.
const standbyMinObserved = 3

// Standby keeps the world ticking while the Ticker's holder is gone. It
// runs where a process competes for the Ticker's lease but does not hold
// it: it is told of every marker arriving in the log (Observe) and keeps
// the holder's schedule, the last marker's tick and arrival time and the
// tick period. When the next marker is overdue by more than Grace, it
// bridges: it appends the markers itself, on that schedule, until it is
// told that someone holds the lease again (StandDown) or that this
// process does (Lead, which hands the schedule over to its Ticker).
//
// A bridge's markers carry the Ticker's ids, so if the holder was alive
// after all, they are duplicates the log drops. Several standbys bridging
// at once do not make the world tick faster: each appends tick n no
// earlier than the arrival of the marker its schedule is anchored on
// plus the periods between, which is never before the holder's own
// schedule; and none appends a tick it has already seen in the log. The
// log alone still defines the execution (a Runner steps ticks a reordered
// marker skipped, and ignores the stale one).
type Standby struct {
	cfg    StandbyConfig
	period time.Duration

	mu       sync.Mutex
	last     uint64    // the highest tick seen in the log
	lastAt   time.Time // when it arrived
	observed int       // markers seen (capped at standbyMinObserved)
	issued   uint64    // the highest durable tick a bridge of this standby appended
	leading  bool      // this process's own Ticker runs
	hot      bool      // the bridge always runs (SetHot)
	// epoch is the world's shared schedule, tick n due at epoch + n
	// periods: the earliest of the markers' arrivals less their ticks'
	// periods (so the holder's own schedule, plus the least latency
	// seen). late counts the markers in a row that arrived more than
	// MaxLag behind it (the world's Tickers restarted their schedule).
	epoch  time.Time
	late   int
	quiet  time.Time // no bridge starts before this
	bridge *standbyBridge
	wake   chan struct{}

	bridges, bridged atomic.Uint64
}

type standbyBridge struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

// NewStandby returns a standby; Run runs it.
func NewStandby(cfg StandbyConfig) (*Standby, error) {
	if cfg.Log == nil {
		return nil, fmt.Errorf("replay: ticker standby of world %d: no log", cfg.World)
	}
	if cfg.Rate <= 0 {
		cfg.Rate = DefaultTickRate
	}
	if cfg.Clock == nil {
		cfg.Clock = SystemClock{}
	}
	period := time.Second / time.Duration(cfg.Rate)
	if cfg.Grace <= 0 {
		cfg.Grace = time.Duration(DefaultStandbyGrace * float64(period))
	}
	return &Standby{cfg: cfg, period: period, wake: make(chan struct{}, 1), hot: cfg.Hot}, nil
}

// Observe records that the marker of tick arrived in the log now (a
// Runner stepped it, or a tail of the log read it). Only a tick above
// every one seen before counts. It is safe for concurrent use and cheap.
func (s *Standby) Observe(tick uint64) {
	now := s.cfg.Clock.Now()
	s.mu.Lock()
	if tick <= s.last {
		s.mu.Unlock()
		return
	}
	s.last, s.lastAt = tick, now
	s.observeEpoch(tick, now)
	first := s.observed < standbyMinObserved
	if first {
		s.observed++
	}
	s.mu.Unlock()
	if first {
		s.poke()
	}
}

// observeEpoch moves the shared schedule's epoch to the arrival of tick
// at now if that is earlier, or later once standbyMinObserved markers in
// a row arrived more than MaxLag behind it (s.mu held).
func (s *Standby) observeEpoch(tick uint64, now time.Time) {
	cand := now.Add(-time.Duration(tick) * s.period)
	switch {
	case s.epoch.IsZero() || cand.Before(s.epoch):
		s.epoch, s.late = cand, 0
	case cand.Sub(s.epoch) > s.maxLag():
		if s.late++; s.late >= standbyMinObserved {
			s.epoch, s.late = cand, 0
		}
	default:
		s.late = 0
	}
}

func (s *Standby) maxLag() time.Duration {
	if s.cfg.MaxLag > 0 {
		return s.cfg.MaxLag
	}
	return time.Second
}

// DueOf returns when tick is due on the world's shared schedule: the
// epoch the markers' arrivals give plus tick periods (ok false before
// standbyMinObserved markers were seen). It is a TickerConfig.DueOf: the
// holder's Ticker and a hot standby's run on it, so their markers
// coincide.
func (s *Standby) DueOf(tick uint64) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.observed < standbyMinObserved || s.epoch.IsZero() {
		return time.Time{}, false
	}
	return s.epoch.Add(time.Duration(tick) * s.period), true
}

// Rebase restarts the shared schedule: tick is due at due (a Ticker on it
// fell more than MaxLag behind). It is a TickerConfig.Rebase.
func (s *Standby) Rebase(tick uint64, due time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.epoch, s.late = due.Add(-time.Duration(tick)*s.period), 0
}

// SetHot makes the standby hot or not. A hot standby does not wait for a
// marker to be overdue: while this process's Ticker does not run (not
// Lead), its bridge always runs, appending every marker on the world's
// shared schedule (DueOf) at the moment the holder's Ticker does. The log
// drops one of each pair (the same record id), so the world's markers
// are appended twice while both live, and the holder's death costs no
// tick. StandDown does not stop a hot bridge; SetHot(false) does.
func (s *Standby) SetHot(hot bool) {
	s.mu.Lock()
	s.hot = hot
	b := s.bridge
	s.mu.Unlock()
	if !hot {
		s.stopBridge(b)
	}
	s.poke()
}

// Hot reports whether the standby is hot (SetHot).
func (s *Standby) Hot() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hot
}

// Seen reports whether the marker of tick (or a later one) was seen.
func (s *Standby) Seen(tick uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return tick <= s.last
}

// Last returns the highest tick seen and when it arrived.
func (s *Standby) Last() (uint64, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last, s.lastAt
}

// Bridging reports whether a bridge runs.
func (s *Standby) Bridging() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bridge != nil
}

// Bridges returns how many bridges started, and how many ticks they
// issued (appended, or skipped as already seen).
func (s *Standby) Bridges() (started, ticks uint64) { return s.bridges.Load(), s.bridged.Load() }

// StandDown ends the running bridge, if any: someone holds the Ticker's
// lease and is alive (it renewed or claimed it since the bridge began).
// The next bridge may start only when a marker is overdue again, Grace
// from now at the earliest.
func (s *Standby) StandDown() {
	s.mu.Lock()
	if s.hot {
		s.mu.Unlock()
		return
	}
	s.quiet = s.cfg.Clock.Now().Add(s.cfg.Grace)
	b := s.bridge
	s.mu.Unlock()
	s.stopBridge(b)
	s.poke()
}

// Lead ends the running bridge: this process holds the lease now, and its
// Ticker appends the markers. It returns where that Ticker goes on: the
// tick after every one seen, bridged or in the log, due on the holder's
// schedule if the log holds no later marker than the standby saw (else
// at once: its observations lagged; a hot standby does not read the log).
// ok is false when no schedule is known or the log could not be read;
// the Ticker then finds the last tick in the log itself. The standby
// bridges no more until Follow.
func (s *Standby) Lead(ctx context.Context) (next uint64, due time.Time, ok bool) {
	s.mu.Lock()
	s.leading = true
	b, hot := s.bridge, s.hot
	s.mu.Unlock()
	s.stopBridge(b)
	// A hot standby was appending on the shared schedule until now: the
	// log holds no later marker than its own, so its Ticker goes on at
	// once, without a read of the log's tail (which would leave the world
	// without a Ticker meanwhile).
	var inLog uint64
	var err error
	if !hot {
		inLog, err = s.lastInLog(ctx)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil || s.observed < standbyMinObserved {
		return 0, time.Time{}, false
	}
	next = max(s.last, s.issued) + 1
	if inLog >= next {
		return inLog + 1, s.cfg.Clock.Now(), true
	}
	return next, s.due(next), true
}

// lastInLog returns the last tick marker in the log, reading back from
// its tail in small windows (markers are dense there).
func (s *Standby) lastInLog(ctx context.Context) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, max(time.Second, 4*s.cfg.Grace))
	defer cancel()
	return findLastTick(ctx, s.cfg.Log, s.cfg.World, 64)
}

// Follow makes the standby watch again after this process's Ticker
// stopped (its lease was lost); upTo is the last tick that Ticker made
// durable (not merely issued: one in flight may never be stored), which
// no bridge appends again.
func (s *Standby) Follow(upTo uint64) {
	s.mu.Lock()
	s.leading = false
	s.issued = max(s.issued, upTo)
	s.quiet = s.cfg.Clock.Now().Add(s.cfg.Grace)
	s.mu.Unlock()
	s.poke()
}

// due returns when tick n is due on the schedule (s.mu held): on the
// world's shared schedule (DueOf), which is never later than the last
// marker's arrival plus the periods between.
func (s *Standby) due(n uint64) time.Time {
	if !s.epoch.IsZero() {
		return s.epoch.Add(time.Duration(n) * s.period)
	}
	if n <= s.last {
		return s.lastAt
	}
	return s.lastAt.Add(time.Duration(n-s.last) * s.period)
}

func (s *Standby) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *Standby) stopBridge(b *standbyBridge) {
	if b == nil {
		return
	}
	b.cancel()
	<-b.done
	s.mu.Lock()
	if s.bridge == b {
		s.bridge = nil
	}
	s.mu.Unlock()
}

// Run watches the schedule and bridges when a marker is overdue, until
// ctx ends; it returns ctx.Err().
func (s *Standby) Run(ctx context.Context) error {
	defer func() {
		s.mu.Lock()
		b := s.bridge
		s.mu.Unlock()
		s.stopBridge(b)
	}()
	for {
		s.mu.Lock()
		var timer <-chan time.Time
		var started *standbyBridge
		var from uint64
		if s.bridge == nil && !s.leading && s.observed >= standbyMinObserved && s.hot {
			now := s.cfg.Clock.Now()
			if wait := s.quiet.Sub(now); wait > 0 {
				timer = s.cfg.Clock.After(wait) // the log refused: a grace later
			} else {
				from = max(s.last, s.issued) + 1
				started = s.startBridge(ctx, from)
			}
		} else if s.bridge == nil && !s.leading && s.observed >= standbyMinObserved {
			now := s.cfg.Clock.Now()
			overdue := s.due(s.last + 1).Add(s.cfg.Grace)
			if s.quiet.After(overdue) {
				overdue = s.quiet
			}
			if wait := overdue.Sub(now); wait > 0 {
				timer = s.cfg.Clock.After(wait)
			} else if !s.confirmOverdue(ctx) {
				s.mu.Unlock()
				continue // the schedule moved on: wait again
			} else {
				from = max(s.last, s.issued) + 1
				started = s.startBridge(ctx, from)
			}
		}
		b := s.bridge
		s.mu.Unlock()
		if started != nil && s.cfg.OnBridge != nil {
			s.cfg.OnBridge(true, from)
		}
		var done chan struct{}
		if b != nil {
			done = b.done
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer:
		case <-s.wake:
		case <-done:
			s.mu.Lock()
			if s.bridge == b {
				s.bridge = nil
			}
			if b.err != nil {
				// The log refused: try again a grace later.
				s.quiet = s.cfg.Clock.Now().Add(s.cfg.Grace)
			}
			s.mu.Unlock()
			if s.cfg.OnBridge != nil {
				s.cfg.OnBridge(false, 0)
			}
		}
	}
}

// confirmOverdue reads the log's last marker before a bridge starts
// (s.mu held; released meanwhile): if the log holds a later one than
// this standby saw, its observations lagged (its runners are behind, say)
// and the holder is ticking: that marker counts as arriving now, and no
// bridge starts. So a bridge never appends a marker the log holds
// already, and a standby that sees the log late never bridges behind it.
func (s *Standby) confirmOverdue(ctx context.Context) bool {
	last := s.last
	s.mu.Unlock()
	inLog, err := s.lastInLog(ctx)
	now := s.cfg.Clock.Now()
	s.mu.Lock()
	switch {
	case err != nil:
		s.quiet = now.Add(s.cfg.Grace) // the log is not answering: a grace later
		return false
	case inLog > s.last:
		s.last, s.lastAt = inLog, now
		return false
	case s.last != last || s.leading || s.bridge != nil || s.quiet.After(now):
		return false // a marker arrived, or Lead or StandDown, meanwhile
	}
	return true
}

// startBridge starts a bridge from tick from (s.mu held).
func (s *Standby) startBridge(ctx context.Context, from uint64) *standbyBridge {
	// Only a durable marker counts as issued: one still in flight when the
	// bridge stops may never be stored, and the next Ticker must append it.
	durable := func(tick uint64, _ time.Time) {
		s.mu.Lock()
		s.issued = max(s.issued, tick)
		s.mu.Unlock()
	}
	tk, err := NewTicker(TickerConfig{World: s.cfg.World, Log: s.cfg.Log, Rate: s.cfg.Rate, Clock: s.cfg.Clock,
		MaxLag: s.cfg.MaxLag, InFlight: s.cfg.InFlight, Start: from, Due: s.due(from), Skip: s.Seen, OnTick: durable,
		DueOf: s.DueOf, Rebase: s.Rebase})
	if err != nil {
		return nil // the config was checked by NewStandby
	}
	// Run's loop (or stopBridge) clears s.bridge once done is closed.
	bctx, cancel := context.WithCancel(ctx)
	b := &standbyBridge{cancel: cancel, done: make(chan struct{})}
	s.bridge = b
	s.bridges.Add(1)
	go func() {
		defer close(b.done)
		err := tk.Run(bctx)
		if n := tk.Next(); n > from {
			s.bridged.Add(n - from)
		}
		if err != nil && !errors.Is(err, context.Canceled) {
			b.err = err
		}
	}()
	return b
}
