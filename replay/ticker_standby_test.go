package replay_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/netcode/wire"
	"github.com/anoptic/broadside/replay"
)

// watchedLog is a MemLog that tells its watchers of every tick marker
// the moment it is stored (on the fake clock), and records when each
// tick was first stored: a log with no latency, tailed by the standbys.
type watchedLog struct {
	*replay.MemLog
	clk *fakeClock

	mu       sync.Mutex
	watchers []func(tick uint64)
	arrived  map[uint64]time.Time
	// hold keeps every asynchronous append in flight: neither stored nor
	// answered.
	hold bool
}

func newWatchedLog(clk *fakeClock) *watchedLog {
	return &watchedLog{MemLog: replay.NewMemLog(), clk: clk, arrived: map[uint64]time.Time{}}
}

func (l *watchedLog) watch(f func(uint64)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.watchers = append(l.watchers, f)
}

func (l *watchedLog) AppendWithID(ctx context.Context, id msg.RecordID, data []byte) error {
	before := l.MemLog.Tail()
	if err := l.MemLog.AppendWithID(ctx, id, data); err != nil {
		return err
	}
	env, err := wire.DecodeEnvelope(data)
	if err != nil || env.Kind != wire.EnvelopeTick || l.MemLog.Tail() == before {
		return nil // not a marker, or a duplicate the log dropped
	}
	l.mu.Lock()
	if _, ok := l.arrived[env.Tick]; !ok {
		l.arrived[env.Tick] = l.clk.Now()
	}
	ws := slices.Clone(l.watchers)
	l.mu.Unlock()
	for _, w := range ws {
		w(env.Tick)
	}
	return nil
}

func (l *watchedLog) AppendWithIDAsync(ctx context.Context, id msg.RecordID, data []byte, done func(error)) error {
	l.mu.Lock()
	hold := l.hold
	l.mu.Unlock()
	if !hold {
		done(l.AppendWithID(ctx, id, data))
	}
	return nil
}

// arrivals returns when each tick 1..n arrived (n: the highest stored).
func (l *watchedLog) arrivals() []time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []time.Time
	for n := uint64(1); ; n++ {
		at, ok := l.arrived[n]
		if !ok {
			return out
		}
		out = append(out, at)
	}
}

// standbyRig runs a holder's Ticker and n standbys of world 9 at 30 Hz on
// a fake clock, all on one watchedLog.
type standbyRig struct {
	t        *testing.T
	clk      *fakeClock
	log      *watchedLog
	period   time.Duration
	grace    time.Duration
	start    time.Time
	standbys []*replay.Standby
	stops    []func()
}

func newStandbyRig(t *testing.T, n int) *standbyRig {
	clk := &fakeClock{now: time.Unix(1000, 0)}
	r := &standbyRig{t: t, clk: clk, log: newWatchedLog(clk), period: time.Second / 30, start: clk.Now()}
	r.grace = time.Duration(replay.DefaultStandbyGrace * float64(r.period))
	for range n {
		s, err := replay.NewStandby(replay.StandbyConfig{World: 9, Log: r.log, Rate: 30, Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		r.log.watch(s.Observe)
		r.standbys = append(r.standbys, s)
		r.stops = append(r.stops, r.run(s.Run))
	}
	t.Cleanup(func() {
		for _, stop := range r.stops {
			stop()
		}
	})
	return r
}

// run runs f until the returned stop is called.
func (r *standbyRig) run(f func(context.Context) error) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			r.t.Errorf("stopped: %v", err)
		}
	}
}

// holder starts a Ticker (the lease's holder) and returns its stop.
func (r *standbyRig) holder(cfg replay.TickerConfig) (stop func(), tk *replay.Ticker) {
	cfg.World, cfg.Log, cfg.Rate, cfg.Clock = 9, r.log, 30, r.clk
	tk, err := replay.NewTicker(cfg)
	if err != nil {
		r.t.Fatal(err)
	}
	return r.run(tk.Run), tk
}

// advance moves the fake clock on by d in quarter periods, letting the
// goroutines act after each step: the waiters a step fired are waiting
// on the clock again (bounded) before the next one.
func (r *standbyRig) advance(d time.Duration) {
	for step := r.period / 4; d > 0; d -= step {
		before := r.clk.pending()
		r.clk.Advance(min(step, d))
		for deadline := time.Now().Add(50 * time.Millisecond); r.clk.pending() < before && time.Now().Before(deadline); {
			time.Sleep(50 * time.Microsecond)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// check asserts that every tick is stored once and that none arrived
// ahead of the holder's schedule (tick n at start + (n-1) periods); it
// returns the arrivals.
func (r *standbyRig) check() []time.Time {
	r.t.Helper()
	checkTicks(r.t, r.log.Entries(1))
	arr := r.log.arrivals()
	for i, at := range arr {
		if due := r.start.Add(time.Duration(i) * r.period); at.Before(due) {
			r.t.Fatalf("tick %d arrived at %v, ahead of its schedule %v: the world ticks too fast", i+1, at.Sub(r.start), due.Sub(r.start))
		}
	}
	return arr
}

// The holder's Ticker stops (its process died): with a standby, the next
// marker arrives within the grace and a period of the last one, and the
// world goes on at its rate; two standbys bridging at once append each
// tick once and never run ahead of the schedule. Without a standby the
// world stalls (what the cluster measured: every sector waits for the
// Ticker's lease to expire).
func TestStandbyBridgesADeadHolder(t *testing.T) {
	for _, n := range []int{0, 1, 2} {
		t.Run(fmt.Sprintf("standbys=%d", n), func(t *testing.T) {
			r := newStandbyRig(t, n)
			stopHolder, _ := r.holder(replay.TickerConfig{Start: 1})
			r.advance(30 * r.period)
			for i, s := range r.standbys {
				if b, _ := s.Bridges(); b != 0 {
					t.Fatalf("standby %d bridged %d times while the holder ticked on time", i, b)
				}
			}
			stopHolder()
			arr := r.check()
			last, lastAt := uint64(len(arr)), arr[len(arr)-1]
			r.advance(60 * r.period)
			arr = r.check()
			if n == 0 {
				if uint64(len(arr)) != last {
					t.Fatalf("%d ticks after the holder stopped with no standby", uint64(len(arr))-last)
				}
				return
			}
			if uint64(len(arr)) <= last {
				t.Fatalf("no tick after the holder's last (%d) in 60 periods", last)
			}
			// The first bridged marker: due a period after the last one,
			// appended once it is Grace overdue (plus a clock step).
			if gap, limit := arr[last].Sub(lastAt), r.grace+r.period+r.period/4; gap > limit {
				t.Fatalf("tick %d arrived %v after tick %d, want within %v", last+1, gap, last, limit)
			}
			// Then at the tick rate: the bridge caught up with the schedule.
			now := r.clk.Now()
			onSchedule := uint64(now.Sub(r.start)/r.period) + 1
			if got := uint64(len(arr)); got+2 < onSchedule {
				t.Fatalf("%d ticks after %v, want about %d (30 Hz)", got, now.Sub(r.start), onSchedule)
			}
			var bridges uint64
			for _, s := range r.standbys {
				b, _ := s.Bridges()
				bridges += b
			}
			if bridges == 0 {
				t.Fatal("no bridge started")
			}
		})
	}
}

// A standby that claims the lease hands its schedule to its own Ticker
// (Lead): the ticks go on with no gap and none twice; the other standby
// stands down and, seeing the new holder's markers on time, appends
// nothing more.
func TestStandbyLeadContinuesTheSchedule(t *testing.T) {
	r := newStandbyRig(t, 2)
	stopHolder, _ := r.holder(replay.TickerConfig{Start: 1})
	r.advance(30 * r.period)
	stopHolder()
	// One bridges (the other then sees the markers arrive on time).
	r.advance(10 * r.period)
	lead, other := r.standbys[0], r.standbys[1]
	if !lead.Bridging() {
		lead, other = other, lead
	}
	if !lead.Bridging() {
		t.Fatal("no standby bridging 10 periods after the holder stopped")
	}
	// The bridging one claims the lease: its Ticker goes on from its
	// bridge's schedule.
	next, due, ok := lead.Lead(context.Background())
	if !ok {
		t.Fatal("Lead: no schedule")
	}
	other.StandDown()
	if lead.Bridging() || other.Bridging() {
		t.Fatal("still bridging after Lead and StandDown")
	}
	_, bridged := other.Bridges()
	stop, tk := r.holder(replay.TickerConfig{Start: next, Due: due, Skip: lead.Seen})
	defer stop()
	r.advance(30 * r.period)
	arr := r.check()
	for i := 1; i < len(arr); i++ {
		if gap := arr[i].Sub(arr[i-1]); gap > r.grace+r.period+r.period/4 {
			t.Fatalf("tick %d arrived %v after tick %d", i+1, gap, i)
		}
	}
	if tk.Next() <= next {
		t.Fatalf("the new holder's Ticker issued nothing from %d", next)
	}
	if _, b := other.Bridges(); b != bridged {
		t.Fatalf("the standby that stood down issued %d more ticks", b-bridged)
	}
	if onSchedule := uint64(r.clk.Now().Sub(r.start)/r.period) + 1; uint64(len(arr))+2 < onSchedule {
		t.Fatalf("%d ticks, want about %d", len(arr), onSchedule)
	}
}

// A standby whose observations lag (its runners are behind the log) while
// the holder ticks on time finds the later markers in the log and starts
// no bridge: it never appends behind the log's last marker.
func TestStandbyLaggingObserverDoesNotBridge(t *testing.T) {
	r := newStandbyRig(t, 0)
	s, err := replay.NewStandby(replay.StandbyConfig{World: 9, Log: r.log, Rate: 30, Clock: r.clk})
	if err != nil {
		t.Fatal(err)
	}
	var feed sync.Mutex
	lagging := false
	r.log.watch(func(tick uint64) {
		feed.Lock()
		defer feed.Unlock()
		if !lagging {
			s.Observe(tick)
		}
	})
	r.stops = append(r.stops, r.run(s.Run))
	stopHolder, _ := r.holder(replay.TickerConfig{Start: 1})
	defer stopHolder()
	r.advance(10 * r.period)
	feed.Lock()
	lagging = true
	feed.Unlock()
	r.advance(30 * r.period)
	if started, ticks := s.Bridges(); started != 0 {
		t.Fatalf("a lagging standby started %d bridges (%d ticks) while the holder ticked", started, ticks)
	}
	if last, _ := s.Last(); last < 30 {
		t.Fatalf("the standby's last tick %d: it did not catch up from the log", last)
	}
	r.check()
}

// A bridge's markers still in flight when it stops do not count as
// appended: the Ticker that takes over (Lead) appends them, so that no
// tick is missing if they are never stored.
func TestStandbyLeadRetriesMarkersInFlight(t *testing.T) {
	r := newStandbyRig(t, 1)
	stopHolder, _ := r.holder(replay.TickerConfig{Start: 1})
	r.advance(30 * r.period)
	stopHolder()
	last := uint64(len(r.check()))
	r.log.mu.Lock()
	r.log.hold = true
	r.log.mu.Unlock()
	r.advance(10 * r.period)
	s := r.standbys[0]
	if !s.Bridging() {
		t.Fatal("not bridging 10 periods after the holder stopped")
	}
	next, _, ok := s.Lead(context.Background())
	if _, ticks := s.Bridges(); ticks == 0 {
		t.Fatal("the bridge issued no marker")
	}
	if !ok || next != last+1 {
		t.Fatalf("Lead: next %d (ok %v) with tick %d the last stored, want %d", next, ok, last, last+1)
	}
}
