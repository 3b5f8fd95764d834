package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/demo/bots"
	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/lineage"
	"github.com/anoptic/broadside/netcode/server"
	"github.com/anoptic/broadside/netcode/wire"
	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/world/natsworld"
)

// Options configure Play.
type Options struct {
	// Bots play, split over the front ends (default 12), each sending
	// Rate commands per second (default 5).
	Bots int
	Rate float64
	// Pause adds a paused worker: SIGSTOP past its leases, then SIGCONT.
	Pause bool
	// KillTicker makes the SIGKILLed and the SIGSTOPped worker the
	// Ticker's holder whenever a worker holds it (Config.WorkersTick makes
	// sure one does), instead of sector 0's owner and another worker.
	KillTicker bool
	// Quiet is the period before the first fault whose ticks the
	// takeovers' are compared with (default 3 s).
	Quiet time.Duration
	// Out receives progress lines (nil: none).
	Out io.Writer
	// MinDuration: the bots play on after the faults until this long
	// after the start.
	MinDuration time.Duration
}

// Takeover is one sector live again under another worker after a worker
// was SIGKILLed or paused at At.
type Takeover struct {
	Sector                         uint32
	Worker                         string
	Expiry, Restore, Replay, Total time.Duration
	SnapshotTick, LiveTick         uint64
	Epoch                          uint64
	Standby                        bool
	At                             time.Time
	// Gap is the ticks of the sector no frame delivered between the last
	// before the failure and the first of the new owner.
	Gap int64
}

// Report is the outcome of Play.
type Report struct {
	Kills      []string
	Paused     bool
	Acked      int
	Lost       int
	Duplicated int
	Takeovers  []Takeover
	// Frames checked against the re-simulation, those whose hash
	// differs, sector-ticks of the re-simulation no frame carried.
	Checked, Mismatched, Missing int
	FirstMismatch                string
	// LineageTicks are the sector-ticks of the shared lineage store
	// compared with the re-simulation's lineage; LineageDiffer those that
	// differ (a failure), LineageMissing the ticks absent from it below
	// its newest tick of their sector (reported, LineageMissingAt names
	// them: a few window-start ticks go missing in some runs, cause not
	// yet found).
	LineageTicks, LineageDiffer, LineageMissing int
	FirstLineageDiff, LineageMissingAt          string
	// Zombie counts frames the paused worker published for a tick past
	// its successor's claim; Stale the outputs in the log the runners
	// ignored as stale.
	Zombie        int
	Stale, Claims uint64
	Migrations    int
	Positions     uint64
	Ticks         uint64
	Sectors       int
	// Frame latency (published to received) p50/p99/max.
	LatencyP50, LatencyP99, LatencyMax time.Duration
	// The other sectors' tick interval during the takeovers and in the
	// quiet period: p50, p99, count.
	DuringP50, DuringP99, QuietP50, QuietP99 time.Duration
	DuringN, QuietN                          int64
	// TickerAt is who held the Ticker's lease at the worker's SIGKILL and
	// at the SIGSTOP.
	TickerAt []string
	// Stalls: every failure's longest tick interval after it.
	Stalls []Stall
	// FrontEndBack is the time from the front end's SIGKILL to its bots'
	// first acknowledgement after its restart; FrontEndRestart from the
	// SIGKILL to its restarted process listening.
	FrontEnd                      string
	FrontEndBack, FrontEndRestart time.Duration
	// FrontEndReady is from the SIGKILL to the restarted front end's
	// /readyz answering 200.
	FrontEndReady time.Duration
	// Statuses are the front ends' /world answers before the faults.
	Statuses []natsworld.FrontEndStatus
	// LeaderBack and NATSBack: the longest wait for an acknowledgement
	// (of any bot) in the 3 s after the SIGKILL.
	LeaderBack, NATSBack time.Duration
	Bots                 []bots.Report
}

// OK reports whether every check passed.
func (r Report) OK() bool {
	return r.Lost == 0 && r.Duplicated == 0 && r.Mismatched == 0 && r.Zombie == 0 && r.Checked > 0 &&
		len(r.Takeovers) > 0 && r.Migrations > 0 && r.Acked > 0 && r.LineageTicks > 0 && r.LineageDiffer == 0
}

func msf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func split(tks []Takeover, pick func(Takeover) time.Duration) (p50, maxv time.Duration) {
	h := hdrhistogram.New(1, 60_000_000, 3)
	for _, tk := range tks {
		_ = h.RecordValue(max(1, pick(tk).Microseconds()))
	}
	return time.Duration(h.ValueAtQuantile(50)) * time.Microsecond, time.Duration(h.Max()) * time.Microsecond
}

// Line is the one-line summary.
func (r Report) Line() string {
	hashes := "hashes identical"
	if r.Mismatched > 0 {
		hashes = fmt.Sprintf("%d hashes differ", r.Mismatched)
	}
	paused := ""
	if r.Paused {
		paused = fmt.Sprintf(" and 1 worker SIGSTOPped past its leases then SIGCONTed (%d frames past its successor's claim, %d stale outputs in the log ignored)", r.Zombie, r.Stale)
	}
	p50, mx := split(r.Takeovers, func(t Takeover) time.Duration { return t.Total })
	return fmt.Sprintf("cluster: %d kills (%s)%s, %d acked, %d lost, %d duplicated, takeover p50/max %.0f/%.0f ms, %s",
		len(r.Kills), strings.Join(r.Kills, ", "), paused, r.Acked, r.Lost, r.Duplicated, msf(p50), msf(mx), hashes)
}

// Detail is the second line: the takeovers split, frame latency, the
// other sectors' ticks, the front end's and the log's recoveries.
func (r Report) Detail() string {
	f := func(pick func(Takeover) time.Duration) string {
		a, b := split(r.Takeovers, pick)
		return fmt.Sprintf("%.0f/%.0f", msf(a), msf(b))
	}
	var gaps []string
	for _, tk := range r.Takeovers {
		mode := "restore"
		if tk.Standby {
			mode = "standby"
		}
		gaps = append(gaps, fmt.Sprintf("%s %d", mode, tk.Gap))
	}
	var sent, reconnects, resent int64
	for _, b := range r.Bots {
		sent, reconnects, resent = sent+b.Sent, reconnects+b.Reconnects, resent+b.Resent
	}
	return fmt.Sprintf("cluster: %d takeovers: lease expiry p50/max %s ms, restore %s ms, replay %s ms; ticks missing from the frames per takeover: %s; "+
		"frame latency p50/p99/max %.2f/%.2f/%.2f ms; %d frames checked against the re-simulation of %d log positions (%d ticks x %d sectors, %d sector-ticks never received), %d lease claims and %d migrations in the log; "+
		"shared lineage: %d sector-ticks compared with the re-simulation's, %d differ, %d missing%s; "+
		"the other sectors' tick interval p50/p99 during takeovers %.1f/%.1f ms (%d ticks), quiet %.1f/%.1f ms (%d ticks; the Ticker's lease on %s at the failures); "+
		"front end %s SIGKILLed: listening again after %.0f ms, /readyz 200 after %.0f ms, its bots acknowledged again after %.0f ms; the longest wait for an acknowledgement in the 3 s after a NATS node's SIGKILL %.0f ms, after the leader's %.0f ms; "+
		"bots sent %d, %d reconnections, %d commands resent; the longest tick interval of the sectors not moved in the 2 s after each failure: %s",
		len(r.Takeovers), f(func(t Takeover) time.Duration { return t.Expiry }), f(func(t Takeover) time.Duration { return t.Restore }),
		f(func(t Takeover) time.Duration { return t.Replay }), strings.Join(gaps, ", "),
		msf(r.LatencyP50), msf(r.LatencyP99), msf(r.LatencyMax), r.Checked, r.Positions, r.Ticks, r.Sectors, r.Missing, r.Claims, r.Migrations,
		r.LineageTicks, r.LineageDiffer, r.LineageMissing, r.missingAt(),
		msf(r.DuringP50), msf(r.DuringP99), r.DuringN, msf(r.QuietP50), msf(r.QuietP99), r.QuietN, strings.Join(r.TickerAt, " and "),
		r.FrontEnd, msf(r.FrontEndRestart), msf(r.FrontEndReady), msf(r.FrontEndBack), msf(r.NATSBack), msf(r.LeaderBack),
		sent, reconnects, resent, r.stallList())
}

// missingAt names the missing lineage ticks, if any, for Detail.
func (r Report) missingAt() string {
	if r.LineageMissingAt == "" {
		return ""
	}
	return " (" + r.LineageMissingAt + ")"
}

func (r Report) stallList() string {
	var out []string
	for _, st := range r.Stalls {
		t := ""
		if st.Ticker {
			t = ", the Ticker's holder"
		}
		out = append(out, fmt.Sprintf("%s of %s%s %.0f ms", st.Event, st.Process, t, msf(st.MaxInterval)))
	}
	return strings.Join(out, ", ")
}

// GameConfig is the game the cluster's workers run.
func (c *Cluster) GameConfig() broadside.Config {
	return broadside.Config{Seed: 1, Width: int32(c.cfg.WorldSize), Height: int32(c.cfg.WorldSize), SectorsX: 2, SectorsY: 2, Islands: c.cfg.Islands}
}

type cmdKey struct {
	player uint32
	seq    uint64
}

// player is a game: the bots' acknowledged commands, per front end.
type play struct {
	c   *Cluster
	w   *Watcher
	o   Options
	n   uint32 // sectors
	say func(format string, a ...any)

	amu   sync.Mutex
	acked map[cmdKey]bool
	// acks counts acknowledgements per front end; lastAck is the latest's
	// time (Unix nanoseconds).
	acks     map[string]*atomic.Int64
	lastAck  atomic.Int64
	ackTimes []int64
	events   []Stall
}

// Stall is a failure and the longest tick interval of the sectors it did
// not move in the 2 s after it.
type Stall struct {
	Event, Process string
	// Ticker says whether the process held the Ticker's lease.
	Ticker      bool
	At          time.Time
	Sectors     []uint32
	MaxInterval time.Duration
}

// event records a failure of process at at (sectors: those it owned).
func (p *play) event(what, process string, at time.Time, sectors []uint32) {
	holder := p.c.TickerHolder(context.Background())
	held := holder == process
	if pr := p.c.Proc(process); !held && pr != nil && pr.Running() {
		held = strings.HasSuffix(holder, fmt.Sprintf("-%d", pr.cmd.Process.Pid))
	}
	p.events = append(p.events, Stall{Event: what, Process: process, Ticker: held, At: at, Sectors: sectors})
}

// stalls fills Report.Stalls.
func (p *play) stalls(rep *Report) {
	frames, _ := p.w.Frames()
	firstPub := map[[2]uint64]int64{}
	for _, cf := range frames {
		k := [2]uint64{uint64(cf.F.Sector), cf.F.Tick}
		if v, ok := firstPub[k]; !ok || cf.F.Published < v {
			firstPub[k] = cf.F.Published
		}
	}
	for _, ev := range p.events {
		from, to := ev.At.UnixNano(), ev.At.Add(2*time.Second).UnixNano()
		for k, v := range firstPub {
			if v < from || v > to || slices.Contains(ev.Sectors, uint32(k[0])) {
				continue
			}
			if prev, ok := firstPub[[2]uint64{k[0], k[1] - 1}]; ok && v > prev {
				ev.MaxInterval = max(ev.MaxInterval, time.Duration(v-prev))
			}
		}
		rep.Stalls = append(rep.Stalls, ev)
	}
}

// Play plays a match on a started cluster: bots on every front end, then
// a SIGKILL of a sector worker (restarted: the sectors rebalance back),
// optionally a paused worker, a SIGKILL of a front end (restarted: its
// bots reconnect and resend), of a NATS node and of the log's sequencing
// leader, each restarted. Then it stops the workers, reads the whole
// log back and checks every acknowledged command is in it exactly once,
// and that every frame a worker published equals an uninterrupted
// re-simulation of the log. An error is returned when the match could not
// be played; failed checks are in the report (Report.OK).
func Play(ctx context.Context, c *Cluster, o Options) (rep Report, err error) {
	o.Bots, o.Quiet = or(o.Bots, 12), max(o.Quiet, 0)
	if o.Rate == 0 {
		o.Rate = 5
	}
	if o.Quiet == 0 {
		o.Quiet = 3 * time.Second
	}
	p := &play{c: c, o: o, n: 4, acked: map[cmdKey]bool{}, acks: map[string]*atomic.Int64{}}
	start := time.Now()
	p.say = func(format string, a ...any) {
		if o.Out != nil {
			fmt.Fprintf(o.Out, "t=%5.1fs "+format+"\n", append([]any{time.Since(start).Seconds()}, a...)...)
		}
	}
	if p.w, err = c.Watch(); err != nil {
		return rep, err
	}
	defer p.w.Stop()

	// Bots on every front end, until the faults are done.
	botCtx, stopBots := context.WithCancel(ctx)
	defer stopBots()
	var bwg sync.WaitGroup
	var bmu sync.Mutex
	var botErr error
	for i, fe := range c.FrontEndNames {
		n := o.Bots / len(c.FrontEndNames)
		if i < o.Bots%len(c.FrontEndNames) {
			n++
		}
		if n == 0 {
			continue
		}
		cnt := &atomic.Int64{}
		p.acks[fe] = cnt
		bwg.Add(1)
		go func() {
			defer bwg.Done()
			r, err := bots.Run(botCtx, bots.Config{Server: c.FrontEnds[fe], TLS: c.CA.ClientTLS(), Secret: c.Secret,
				Prefix: fe + "-bot-", FirstID: server.EphemeralIDBase + 1 + uint32(i)*1000, N: n, Rate: o.Rate,
				Duration: time.Hour, Seed: uint64(i + 1), ReconnectAttempts: 30,
				OnAck: func(player uint32, seq uint64, st wire.AckStatus) {
					if !st.Stored() {
						return
					}
					p.amu.Lock()
					p.acked[cmdKey{player, seq}] = true
					p.ackTimes = append(p.ackTimes, time.Now().UnixNano())
					p.amu.Unlock()
					cnt.Add(1)
					p.lastAck.Store(time.Now().UnixNano())
				}})
			bmu.Lock()
			defer bmu.Unlock()
			rep.Bots = append(rep.Bots, r)
			if err != nil && botErr == nil {
				botErr = fmt.Errorf("bots on %s: %w", fe, err)
			}
		}()
	}
	p.say("%d bots on %d front ends (%s)", o.Bots, len(c.FrontEndNames), strings.Join(c.FrontEndNames, ", "))
	fail := func(err error) (Report, error) {
		stopBots()
		bwg.Wait()
		rep.Acked = p.nAcked()
		return rep, err
	}

	if err := p.waitTicks(ctx, 90, "start"); err != nil {
		return fail(err)
	}
	if _, err := p.settle(ctx, "start"); err != nil {
		return fail(err)
	}
	// Every front end ready, its status naming every sector's owner.
	for _, fe := range c.FrontEndNames {
		if _, err := p.waitReady(ctx, fe); err != nil {
			return fail(err)
		}
		// The status may lag a moment (a registration renewed late).
		var st natsworld.FrontEndStatus
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			st, err = c.Status(ctx, fe)
			if err == nil && len(st.Sectors) == int(p.n) && st.Ticker != "" && len(st.Workers) == len(c.Workers) {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fail(fmt.Errorf("%s /world: %d sectors, Ticker on %q, workers %v (%v)", fe, len(st.Sectors), st.Ticker, st.Workers, err))
			}
		}
		rep.Statuses = append(rep.Statuses, st)
	}
	p.say("front ends ready (/readyz); /world: Ticker lease on %s, workers %v", rep.Statuses[0].Ticker, rep.Statuses[0].Workers)
	quietFrom := time.Now()
	sleep(ctx, o.Quiet)

	// 1. SIGKILL the worker owning sector 0; restart it.
	owners, err := p.settle(ctx, "the quiet period")
	if err != nil {
		return fail(err)
	}
	victim := owners[0]
	if h := c.TickerHolder(ctx); o.KillTicker && slices.Contains(c.Workers, h) {
		victim = h
	}
	vs := p.sectorsOf(owners, victim)
	rep.TickerAt = append(rep.TickerAt, c.TickerHolder(ctx))
	killedAt := time.Now()
	p.event("worker SIGKILL", victim, killedAt, vs)
	c.Kill(victim)
	rep.Kills = append(rep.Kills, "worker")
	p.say("SIGKILL sector worker %s (sectors %v; the Ticker's lease on %s) at %d acked", victim, vs, rep.TickerAt[0], p.nAcked())
	if err := p.waitTakeover(ctx, &rep, vs, victim, killedAt, "worker SIGKILL"); err != nil {
		return fail(err)
	}
	sleep(ctx, 500*time.Millisecond)
	restartedAt := time.Now()
	if err := c.Restart(victim); err != nil {
		return fail(err)
	}
	p.say("restarted %s", victim)
	if err := p.waitTicks(ctx, 60, "worker restart"); err != nil {
		return fail(err)
	}
	if _, err := p.settle(ctx, "worker restart"); err != nil {
		return fail(err)
	}

	// 2. SIGSTOP another worker past its leases, then SIGCONT.
	var paused string
	var ps []uint32
	var pausedAt, wokeAt time.Time
	pausedEpochs := map[uint32]uint64{}
	if o.Pause {
		rep.Paused = true
		owners, err := p.owners(ctx)
		if err != nil {
			return fail(err)
		}
		for _, s := range []uint32{1, 2, 3, 0} {
			if w := owners[s]; w != "" && w != victim {
				paused = w
				break
			}
		}
		if paused == "" {
			paused = owners[1]
		}
		if h := c.TickerHolder(ctx); o.KillTicker && slices.Contains(c.Workers, h) {
			paused = h
		}
		ps = p.sectorsOf(owners, paused)
		for _, s := range ps {
			if w, e, err := c.Leases.Owner(ctx, s); err == nil && w == paused {
				pausedEpochs[s] = e
			}
		}
		rep.TickerAt = append(rep.TickerAt, c.TickerHolder(ctx))
		pausedAt = time.Now()
		p.event("worker SIGSTOP", paused, pausedAt, ps)
		if err := c.Signal(paused, syscall.SIGSTOP); err != nil {
			return fail(err)
		}
		p.say("SIGSTOP sector worker %s (sectors %v; the Ticker's lease on %s) at %d acked", paused, ps, rep.TickerAt[1], p.nAcked())
		if err := p.waitTakeover(ctx, &rep, ps, paused, pausedAt, "worker SIGSTOP"); err != nil {
			return fail(err)
		}
		sleep(ctx, time.Until(pausedAt.Add(1500*time.Millisecond)))
		wokeAt = time.Now()
		if err := c.Signal(paused, syscall.SIGCONT); err != nil {
			return fail(err)
		}
		p.say("SIGCONT %s after %v", paused, wokeAt.Sub(pausedAt).Round(time.Millisecond))
		if err := p.waitTicks(ctx, 60, "worker SIGCONT"); err != nil {
			return fail(err)
		}
		sleep(ctx, time.Second)
	}

	// 3. SIGKILL a front end; restart it: its bots reconnect, resume their
	// sessions and resend what was not acknowledged.
	fe := c.FrontEndNames[0]
	rep.FrontEnd = fe
	feAcks := p.acks[fe]
	feKilled := time.Now()
	p.event("front end SIGKILL", fe, feKilled, nil)
	c.Kill(fe)
	rep.Kills = append(rep.Kills, "front end")
	before := feAcks.Load()
	p.say("SIGKILL front end %s at %d acked (%d through it)", fe, p.nAcked(), before)
	sleep(ctx, 500*time.Millisecond)
	if err := c.Restart(fe); err != nil {
		return fail(err)
	}
	if err := c.WaitLog(ctx, fe, "listening on", 30*time.Second); err != nil {
		return fail(err)
	}
	rep.FrontEndRestart = time.Since(feKilled)
	if _, err := p.waitReady(ctx, fe); err != nil {
		return fail(err)
	}
	rep.FrontEndReady = time.Since(feKilled)
	for deadline := time.Now().Add(30 * time.Second); feAcks != nil && feAcks.Load() <= before+int64(o.Bots); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fail(fmt.Errorf("front end %s restarted: its bots were not acknowledged again within 30 s", fe))
		}
	}
	rep.FrontEndBack = time.Since(feKilled)
	p.say("front end %s listening again after %v, ready (/readyz) after %v, its bots acknowledged again after %v", fe, rep.FrontEndRestart.Round(time.Millisecond),
		rep.FrontEndReady.Round(time.Millisecond), rep.FrontEndBack.Round(time.Millisecond))
	if err := p.waitTicks(ctx, 30, "front end restart"); err != nil {
		return fail(err)
	}

	// 4. SIGKILL a NATS node; restart it on its store directory.
	node := "nats-3"
	at := time.Now()
	p.event("NATS node SIGKILL", node, at, nil)
	c.Kill(node)
	rep.Kills = append(rep.Kills, "nats")
	p.say("SIGKILL NATS node %s at %d acked", node, p.nAcked())
	sleep(ctx, time.Until(at.Add(2*time.Second)))
	if err := c.Restart(node); err != nil {
		return fail(err)
	}
	if err := p.waitTicks(ctx, 60, "NATS node restart"); err != nil {
		return fail(err)
	}
	sleep(ctx, time.Until(at.Add(3*time.Second)))
	rep.NATSBack = p.longestGap(at, 3*time.Second)

	// 5. SIGKILL the sequencing leader; restart it.
	leader, err := c.Leader(ctx)
	if err != nil {
		return fail(err)
	}
	at = time.Now()
	p.event("leader SIGKILL", leader, at, nil)
	c.Kill(leader)
	rep.Kills = append(rep.Kills, "leader")
	p.say("SIGKILL the sequencing leader %s at %d acked", leader, p.nAcked())
	sleep(ctx, time.Until(at.Add(700*time.Millisecond)))
	if err := c.Restart(leader); err != nil {
		return fail(err)
	}
	if err := p.waitTicks(ctx, 60, "leader kill"); err != nil {
		return fail(err)
	}
	sleep(ctx, time.Until(at.Add(3*time.Second)))
	rep.LeaderBack = p.longestGap(at, 3*time.Second)

	sleep(ctx, time.Until(start.Add(o.MinDuration)))
	stopBots()
	bwg.Wait()
	if botErr != nil {
		return rep, botErr
	}
	if err := p.waitTicks(ctx, 30, "the bots' end"); err != nil {
		return rep, err
	}
	// Stop the workers cleanly (they release their leases), read the log.
	for _, w := range c.Workers {
		if err := c.Stop(w, 10*time.Second); err != nil {
			return rep, err
		}
	}
	p.say("bots stopped, workers stopped; reading the whole log back")
	if err := p.check(ctx, &rep, pausedEpochs); err != nil {
		return rep, err
	}
	p.ticks(&rep, quietFrom, killedAt, []window{{killedAt, restartedAt, vs}, {pausedAt, wokeAt, ps}})
	p.stalls(&rep)
	p.say("%d acked: %d lost, %d duplicated; %d frames checked, %d differ", rep.Acked, rep.Lost, rep.Duplicated, rep.Checked, rep.Mismatched)
	return rep, nil
}

func (p *play) nAcked() int {
	p.amu.Lock()
	defer p.amu.Unlock()
	return len(p.acked)
}

// longestGap returns the longest wait for an acknowledgement (of any bot)
// from at to at+d (call it after at+d).
func (p *play) longestGap(at time.Time, d time.Duration) time.Duration {
	p.amu.Lock()
	defer p.amu.Unlock()
	from, to := at.UnixNano(), at.Add(d).UnixNano()
	prev, gap := from, int64(0)
	for _, a := range p.ackTimes {
		if a <= from || a > to {
			continue
		}
		gap, prev = max(gap, a-prev), a
	}
	return time.Duration(max(gap, to-prev))
}

func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// waitReady waits until the front end's /readyz answers 200 (up to 30 s)
// and returns how long that took.
func (p *play) waitReady(ctx context.Context, fe string) (time.Duration, error) {
	start := time.Now()
	deadline := start.Add(30 * time.Second)
	for {
		err := p.c.Ready(ctx, fe)
		if err == nil {
			return time.Since(start), nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return 0, fmt.Errorf("%s not ready within 30 s: %w", fe, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitTicks waits until every sector published n ticks more.
func (p *play) waitTicks(ctx context.Context, n uint64, what string) error {
	target := p.w.MinTick(p.n) + n
	deadline := time.Now().Add(30 * time.Second)
	for p.w.MinTick(p.n) < target {
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("after %s: sectors at ticks %v, waiting for %d", what, p.w.Latest(), target)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

func (p *play) owners(ctx context.Context) (map[uint32]string, error) {
	out := map[uint32]string{}
	for s := range p.n {
		w, _, err := p.c.Leases.Owner(ctx, s)
		if err != nil {
			return nil, err
		}
		out[s] = w
	}
	return out, nil
}

func (p *play) sectorsOf(owners map[uint32]string, w string) []uint32 {
	var out []uint32
	for s, o := range owners {
		if o == w {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

// settle waits until every sector has an owner, the same for 300 ms.
func (p *play) settle(ctx context.Context, what string) (map[uint32]string, error) {
	deadline := time.Now().Add(20 * time.Second)
	prev, err := p.owners(ctx)
	if err != nil {
		return nil, err
	}
	for {
		sleep(ctx, 300*time.Millisecond)
		cur, err := p.owners(ctx)
		if err != nil {
			return nil, err
		}
		full := true
		for s := range p.n {
			full = full && cur[s] != "" && cur[s] == prev[s]
		}
		if full {
			return cur, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("after %s: the sectors' owners never settled: %v", what, cur)
		}
		prev = cur
	}
}

// waitTakeover waits for every sector in sectors to be live again under
// another worker than from.
func (p *play) waitTakeover(ctx context.Context, rep *Report, sectors []uint32, from string, at time.Time, what string) error {
	deadline := time.Now().Add(20 * time.Second)
	for _, s := range sectors {
		for {
			if r, ok := p.w.Takeover(s, from, at); ok {
				tk := Takeover{Sector: s, Worker: r.Worker, Expiry: time.Duration(r.Acquired - at.UnixNano()), Restore: time.Duration(r.Restored - r.Acquired),
					Replay: time.Duration(r.Live - r.Restored), Total: time.Duration(r.Live - at.UnixNano()),
					SnapshotTick: r.SnapshotTick, LiveTick: r.LiveTick, Epoch: r.Epoch, Standby: r.Standby, At: at}
				rep.Takeovers = append(rep.Takeovers, tk)
				p.say("%s: sector %d live on %s after %v (lease expiry %v, restore %v, replay %v: ticks %d to %d)", what, s, r.Worker,
					tk.Total.Round(time.Millisecond), tk.Expiry.Round(time.Millisecond), tk.Restore.Round(time.Millisecond),
					tk.Replay.Round(time.Millisecond), tk.SnapshotTick, tk.LiveTick)
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("%s: sector %d not taken over within 20 s", what, s)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return nil
}

// check reads the log, counts the acknowledged commands in it and compares
// every frame with the re-simulation.
func (p *play) check(ctx context.Context, rep *Report, pausedEpochs map[uint32]uint64) error {
	rc, err := p.c.DialLog()
	if err != nil {
		return err
	}
	defer rc.Close()
	tail, err := rc.CheckTail(ctx)
	if err != nil {
		return err
	}
	rep.Positions = tail
	var entries []msg.Entry
	sub := rc.Subscribe(1)
	inLog := map[cmdKey]int{}
	claimAfterPause := map[uint32]uint64{}
	for sub.Position() <= tail {
		rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		e, err := sub.Next(rctx)
		cancel()
		if err != nil {
			return fmt.Errorf("read %d of %d: %w", sub.Position(), tail, err)
		}
		entries = append(entries, e)
		env, err := wire.DecodeEnvelope(e.Record.Data)
		switch {
		case err != nil:
		case env.Kind == wire.EnvelopePlayerCommand:
			inLog[cmdKey{env.Player, env.ClientSeq}]++
		case env.Kind == wire.EnvelopeMigration:
			rep.Migrations++
		case env.Kind == wire.EnvelopeControl && bytes.Equal(e.Record.Data, replay.LeaseClaimRecord(env.Shard, env.Epoch)):
			// The first claim of a paused sector after the pause: the
			// paused worker's runner steps nothing past it.
			if pe, ok := pausedEpochs[env.Shard]; ok && env.Epoch > pe && claimAfterPause[env.Shard] == 0 {
				claimAfterPause[env.Shard] = e.Pos
			}
		}
	}
	p.amu.Lock()
	rep.Acked = len(p.acked)
	for k := range p.acked {
		if inLog[k] == 0 {
			rep.Lost++
		}
	}
	p.amu.Unlock()
	for _, n := range inLog {
		if n > 1 {
			rep.Duplicated += n - 1
		}
	}

	// The uninterrupted re-simulation of the log, sector by sector.
	game, err := broadside.NewGame(p.c.GameConfig(), 0)
	if err != nil {
		return err
	}
	rep.Sectors = game.Shards
	want := map[[2]uint64]uint64{}
	wantLin := lineage.NewMemStore()
	for s := range uint32(game.Shards) {
		sim, err := game.NewSim(s)
		if err != nil {
			return err
		}
		rec := lineage.NewLog(lineage.LogOptions{Store: wantLin})
		r, err := replay.NewRunner(replay.RunnerConfig{World: World, Shard: s, Sim: sim, Source: replay.NewSliceSource(entries, 1),
			Recorder: rec, CommandKind: game.CommandKind, Logger: quiet(), Observer: func(info replay.TickInfo) {
				want[[2]uint64{uint64(s), info.Tick}] = info.Hash
				rep.Ticks = max(rep.Ticks, info.Tick)
			}})
		if err != nil {
			return err
		}
		if err := r.Run(ctx); err != nil {
			return fmt.Errorf("re-simulate sector %d: %w", s, err)
		}
		if err := rec.Close(ctx); err != nil {
			return fmt.Errorf("re-simulate sector %d: lineage: %w", s, err)
		}
		st := r.Stats()
		rep.Stale, rep.Claims = rep.Stale+st.Stale, rep.Claims+st.Claims
	}
	if err := p.checkLineage(ctx, p.c.Conn, wantLin, rep); err != nil {
		return err
	}
	frames, bad := p.w.Frames()
	if bad > 0 {
		return fmt.Errorf("%d undecodable frames or takeover reports", bad)
	}
	seen := map[[2]uint64]bool{}
	for _, cf := range frames {
		f := cf.F
		key := [2]uint64{uint64(f.Sector), f.Tick}
		if e, ok := pausedEpochs[f.Sector]; ok && f.Epoch == e && claimAfterPause[f.Sector] != 0 && f.Pos > claimAfterPause[f.Sector] {
			rep.Zombie++ // a tick the paused worker stepped past its successor's claim
		}
		h, ok := want[key]
		if !ok {
			continue // past the log read
		}
		rep.Checked++
		seen[key] = true
		if h != f.Hash {
			rep.Mismatched++
			if rep.FirstMismatch == "" {
				rep.FirstMismatch = fmt.Sprintf("sector %d tick %d (epoch %d): published hash %#x, re-simulation %#x", f.Sector, f.Tick, f.Epoch, f.Hash, h)
			}
		}
	}
	for key := range want {
		if !seen[key] {
			rep.Missing++
		}
	}
	lat := hdrhistogram.New(1, 60_000_000, 3)
	for _, cf := range frames {
		_ = lat.RecordValue(max(1, cf.At.Sub(time.Unix(0, cf.F.Published)).Microseconds()))
	}
	us := func(v int64) time.Duration { return time.Duration(v) * time.Microsecond }
	rep.LatencyP50, rep.LatencyP99, rep.LatencyMax = us(lat.ValueAtQuantile(50)), us(lat.ValueAtQuantile(99)), us(lat.Max())
	// The gap players see per takeover.
	for i := range rep.Takeovers {
		tk := &rep.Takeovers[i]
		var before, first uint64
		for _, cf := range frames {
			switch {
			case cf.F.Sector != tk.Sector:
			case cf.At.Before(tk.At):
				before = max(before, cf.F.Tick)
			case cf.F.Epoch == tk.Epoch && (first == 0 || cf.F.Tick < first):
				first = cf.F.Tick
			}
		}
		tk.Gap = max(0, int64(first)-int64(before)-1)
	}
	return nil
}

// window is a failure: from at until the worker is back, the sectors
// taken over.
type window struct {
	at, end time.Time
	sectors []uint32
}

// ticks measures the other sectors' tick intervals (between the first
// publications of consecutive ticks) during the failures, against the
// quiet period before the first.
func (p *play) ticks(rep *Report, quietFrom, quietTo time.Time, events []window) {
	frames, _ := p.w.Frames()
	firstPub := map[[2]uint64]int64{}
	for _, cf := range frames {
		k := [2]uint64{uint64(cf.F.Sector), cf.F.Tick}
		if v, ok := firstPub[k]; !ok || cf.F.Published < v {
			firstPub[k] = cf.F.Published
		}
	}
	quiet, during := hdrhistogram.New(1, 60_000_000, 3), hdrhistogram.New(1, 60_000_000, 3)
	for k, v := range firstPub {
		prev, ok := firstPub[[2]uint64{k[0], k[1] - 1}]
		if !ok || v <= prev {
			continue
		}
		at, iv := time.Unix(0, v), (v-prev)/1000
		if at.After(quietFrom) && at.Before(quietTo) {
			_ = quiet.RecordValue(iv)
		}
		for _, ev := range events {
			if !ev.at.IsZero() && !slices.Contains(ev.sectors, uint32(k[0])) && !at.Before(ev.at) && at.Before(ev.end) {
				_ = during.RecordValue(iv)
			}
		}
	}
	us := func(v int64) time.Duration { return time.Duration(v) * time.Microsecond }
	rep.DuringP50, rep.DuringP99, rep.DuringN = us(during.ValueAtQuantile(50)), us(during.ValueAtQuantile(99)), during.TotalCount()
	rep.QuietP50, rep.QuietP99, rep.QuietN = us(quiet.ValueAtQuantile(50)), us(quiet.ValueAtQuantile(99)), quiet.TotalCount()
}

// Verdict returns an error naming the first failed check (nil if OK).
func (r Report) Verdict() error {
	switch {
	case r.Lost > 0:
		return fmt.Errorf("%d acknowledged commands are missing from the log", r.Lost)
	case r.Duplicated > 0:
		return fmt.Errorf("%d commands are in the log more than once", r.Duplicated)
	case r.Mismatched > 0:
		return fmt.Errorf("%d published hashes differ from the re-simulation; first: %s", r.Mismatched, r.FirstMismatch)
	case r.Zombie > 0:
		return fmt.Errorf("the paused worker published %d frames past its successor's claim", r.Zombie)
	case r.LineageDiffer > 0:
		return fmt.Errorf("%d sector-ticks of the shared lineage differ from the re-simulation's; first: %s", r.LineageDiffer, r.FirstLineageDiff)
	case r.Acked == 0 || r.Checked == 0 || r.LineageTicks == 0:
		return errors.New("nothing acknowledged, no frame or no lineage checked")
	case len(r.Takeovers) == 0 || r.Migrations == 0:
		return errors.New("no takeover or no migration observed")
	}
	return nil
}
