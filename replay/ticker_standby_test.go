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
	clk *replay.FakeClock

	mu       sync.Mutex
	watchers []func(tick uint64)
	arrived  map[uint64]time.Time
	// hold keeps every asynchronous append in flight: neither stored nor
	// answered.
	hold bool
	// onAppend, if set, is told of every marker's append, stored or not.
	onAppend func(tick uint64)
}

func newWatchedLog(clk *replay.FakeClock) *watchedLog {
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
	l.mu.Lock()
	onAppend := l.onAppend
	l.mu.Unlock()
	if onAppend != nil && err == nil && env.Kind == wire.EnvelopeTick {
		onAppend(env.Tick)
	}
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
	clk      *replay.FakeClock
	log      *watchedLog
	period   time.Duration
	grace    time.Duration
	start    time.Time
	standbys []*replay.Standby
	stops    []func()
}

func newStandbyRig(t *testing.T, n int) *standbyRig {
	clk := replay.NewFakeClock(time.Unix(1000, 0))
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
		before := r.clk.Pending()
		r.clk.Advance(min(step, d))
		for deadline := time.Now().Add(50 * time.Millisecond); r.clk.Pending() < before && time.Now().Before(deadline); {
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

// A hot standby (SetHot: the always-on second Ticker) appends every
// marker on the world's shared schedule, the holder's: tick n due at the
// epoch the arrivals give plus n periods, so both Tickers' markers
// coincide; the log stores each tick once. When the holder dies, the hot
// standby's markers go on with no interval beyond a period (plus a clock
// step), none ahead of the schedule and none twice; with two hot
// standbys too.
func TestHotStandbyCoincidesAndTicksOnWhenTheHolderDies(t *testing.T) {
	for _, n := range []int{1, 2} {
		t.Run(fmt.Sprintf("hot=%d", n), func(t *testing.T) {
			r := newStandbyRig(t, n)
			for _, s := range r.standbys {
				s.SetHot(true)
			}
			stopHolder, _ := r.holder(replay.TickerConfig{Start: 1})
			r.advance(30 * r.period)
			for i, s := range r.standbys {
				// The shared schedule is the holder's own: its markers'
				// arrivals on this log with no latency.
				arr := r.log.arrivals()
				epoch := arr[0]
				for i, at := range arr {
					if e := at.Add(-time.Duration(i) * r.period); e.Before(epoch) {
						epoch = e
					}
				}
				for _, tick := range []uint64{1, 31, 100} {
					due, ok := s.DueOf(tick)
					if want := epoch.Add(time.Duration(tick-1) * r.period); !ok || !due.Equal(want) {
						t.Fatalf("standby %d: tick %d due at %v (ok %v), want %v (the holder's schedule)", i, tick, due.Sub(r.start), ok, want.Sub(r.start))
					}
				}
				if !s.Bridging() {
					t.Fatalf("hot standby %d is not appending", i)
				}
			}
			arr := r.check()
			last := uint64(len(arr))
			stopHolder()
			r.advance(60 * r.period)
			arr = r.check()
			if uint64(len(arr)) < last+55 {
				t.Fatalf("%d ticks in the 60 periods after the holder stopped at %d", uint64(len(arr))-last, last)
			}
			for i := 1; i < len(arr); i++ {
				if gap := arr[i].Sub(arr[i-1]); gap > r.period+r.period/4 {
					t.Fatalf("tick %d arrived %v after tick %d (the holder stopped after %d): a gap beyond a period", i+1, gap, i, last)
				}
			}
			// StandDown (the lease renewed) does not stop a hot standby.
			r.standbys[0].StandDown()
			if !r.standbys[0].Bridging() {
				t.Fatal("StandDown stopped a hot standby")
			}
			r.standbys[0].SetHot(false)
			if n == 1 && r.standbys[0].Bridging() {
				t.Fatal("SetHot(false) left the bridge running")
			}
		})
	}
}

// The holder's Ticker on the shared schedule (DueOf of its own
// standby, as natsworld runs it) and a hot standby's: both issue each
// marker at the same moment; the log stores it once (the other append
// is a duplicate it drops), and killing either leaves no gap.
func TestHotStandbyAndHolderOnOneSchedule(t *testing.T) {
	for _, kill := range []string{"holder", "hot"} {
		t.Run("kill="+kill, func(t *testing.T) {
			r := newStandbyRig(t, 2)
			own, hot := r.standbys[0], r.standbys[1]
			hot.SetHot(true)
			var mu sync.Mutex
			issued := map[uint64][]time.Time{}
			r.log.onAppend = func(tick uint64) {
				mu.Lock()
				issued[tick] = append(issued[tick], r.clk.Now())
				mu.Unlock()
			}
			stopHolder, _ := r.holder(replay.TickerConfig{Start: 1, DueOf: own.DueOf, Rebase: own.Rebase})
			r.advance(40 * r.period)
			mu.Lock()
			both := 0
			for tick, at := range issued {
				if len(at) > 2 {
					t.Fatalf("tick %d appended %d times", tick, len(at))
				}
				if len(at) == 2 {
					both++
					if !at[0].Equal(at[1]) {
						t.Fatalf("tick %d appended at %v and %v: the two Tickers' markers do not coincide", tick, at[0].Sub(r.start), at[1].Sub(r.start))
					}
				}
			}
			mu.Unlock()
			if both == 0 {
				t.Fatal("the hot standby appended no marker alongside the holder's")
			}
			t.Logf("%d of the first 40 ticks appended by both Tickers at the same moment", both)
			last := uint64(len(r.check()))
			if kill == "holder" {
				stopHolder()
			} else {
				hot.SetHot(false)
				defer stopHolder()
			}
			r.advance(40 * r.period)
			arr := r.check()
			if uint64(len(arr)) < last+35 {
				t.Fatalf("%d ticks in the 40 periods after killing the %s", uint64(len(arr))-last, kill)
			}
			for i := 1; i < len(arr); i++ {
				if gap := arr[i].Sub(arr[i-1]); gap > r.period+r.period/4 {
					t.Fatalf("tick %d arrived %v after tick %d", i+1, gap, i)
				}
			}
		})
	}
}

// The hot standby claims the lease after the holder died (Lead): its
// Ticker goes on from the hot bridge's next tick on the shared schedule,
// with no interval beyond a period across the handover and none twice.
func TestHotStandbyLeadHasNoGap(t *testing.T) {
	r := newStandbyRig(t, 1)
	hot := r.standbys[0]
	hot.SetHot(true)
	stopHolder, _ := r.holder(replay.TickerConfig{Start: 1})
	r.advance(30 * r.period)
	stopHolder()
	r.advance(10 * r.period)
	next, due, ok := hot.Lead(context.Background())
	if !ok {
		t.Fatal("Lead: no schedule")
	}
	if hot.Bridging() {
		t.Fatal("the hot bridge still runs after Lead")
	}
	stop, tk := r.holder(replay.TickerConfig{Start: next, Due: due, Skip: hot.Seen, DueOf: hot.DueOf, Rebase: hot.Rebase})
	defer stop()
	r.advance(30 * r.period)
	arr := r.check()
	for i := 1; i < len(arr); i++ {
		if gap := arr[i].Sub(arr[i-1]); gap > r.period+r.period/4 {
			t.Fatalf("tick %d arrived %v after tick %d", i+1, gap, i)
		}
	}
	if tk.Next() <= next {
		t.Fatalf("the new holder's Ticker issued nothing from %d", next)
	}
	if onSchedule := uint64(r.clk.Now().Sub(r.start)/r.period) + 1; uint64(len(arr))+2 < onSchedule {
		t.Fatalf("%d ticks, want about %d", len(arr), onSchedule)
	}
}
