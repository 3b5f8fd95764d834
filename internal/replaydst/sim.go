// Package replaydst is Broadside's deterministic simulator for the replay
// side, as internal/dst is for the log. One seed drives everything: the
// world (a sample-game match of demo/broadside sectors played by a
// broadside.Fleet), the in-memory log (replay.MemLog), the world's
// replay.Ticker and the replay.Supervisor running one Runner per sector (on
// a manual clock, with synchronous runners) and the faults, injected at
// random ticks: kills between ticks and in the middle of one, wedges (a Step
// that blocks until the supervisor abandons it), panics inside Step,
// corrupted and missing snapshot chunks, kills during a snapshot write
// (the snapshot lost, stored or torn) and during an output's append (the
// output lost or appended), kills during recovery, failing restarts and two
// kills of one sector in a row.
//
// After every tick the simulator checks that every hash any runner
// published (live or replayed) equals the hash an uninterrupted run (one
// plain Runner per sector, from the start of the same log, no snapshots)
// has at that tick, and that every output (migration) is in the log exactly
// once, in order and with the uninterrupted run's bytes; at the end, with
// faults over, every sector must be live at the last tick with all its
// outputs appended.
//
// Exact replay: the supervisor, the ticker and the runners keep their
// goroutines, but the simulator runs inside a testing/synctest bubble and
// lets one of them run at a time: a runner reads the log only during its
// sector's turn, a timer fires only when the simulator advances the clock
// (one timer at a time), and after each step the simulator waits
// (synctest.Wait) until every goroutine is blocked again. So the log, every
// hash and every fault of a seed are the same in every run.
package replaydst

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing/synctest"
	"time"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/lineage"
	"github.com/anoptic/broadside/netcode/wire"
	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/snapshot"
)

// world is the world id of every simulated match.
const world = 7

// Options configure one simulated run.
type Options struct {
	Seed uint64
	// Ticks is the number of ticks during which faults are injected
	// (default 150); the run then goes on, without faults, until every
	// sector is live again.
	Ticks int
	// NoFaults disables fault injection.
	NoFaults bool
	// Bugs injects known recovery bugs into the supervisor.
	Bugs replay.Bugs
	// ExternalChecksOnly ignores the supervisor's own divergence reports
	// (a replayed hash that differs from the published one), leaving only
	// the simulator's checks against the uninterrupted run.
	ExternalChecksOnly bool
	// Trace, if set, receives a line per fault and recovery.
	Trace io.Writer
	// Codec decodes snapshots (required: created outside the synctest
	// bubble, see Run).
	Codec *snapshot.Codec
}

// Fault kinds.
type faultKind int

const (
	faultKill         faultKind = iota // kill between ticks
	faultKillMidTick                   // kill inside Step, before the outputs are appended
	faultWedge                         // Step blocks until abandoned
	faultPanic                         // Step panics
	faultCorrupt                       // flip a byte of the newest snapshot
	faultMissing                       // delete one snapshot of the newest chain
	faultWriteKill                     // kill during a snapshot write
	faultRecoveryKill                  // kill, then kill again during the recovery
	faultDoubleKill                    // kill at this tick and the next
	faultOpenFails                     // kill; the restart's Open fails once
	faultOutputKill                    // kill while appending an output
	numFaults
)

var faultNames = [numFaults]string{"kill", "kill-mid-tick", "wedge", "panic", "corrupt-snapshot", "missing-snapshot",
	"kill-during-snapshot-write", "kill-during-recovery", "double-kill", "open-fails", "kill-during-output-append"}

// Result summarises a run.
type Result struct {
	Seed uint64
	// Ticks is the last tick of the world.
	Ticks uint64
	// Faults counts the faults injected, by kind.
	Faults [numFaults]int
	// Recoveries counts completed recoveries, FailedRecoveries the ones
	// that died again before they were live, Fallbacks the restores that
	// skipped unusable snapshots (for an older chain or the log's start),
	// Replayed the ticks replayed.
	Recoveries, FailedRecoveries, Fallbacks int
	Replayed                                uint64
	// Snapshots counts the snapshots stored; Checked the published hashes
	// compared with the uninterrupted run; Outputs the outputs in the log.
	Snapshots, Checked, Outputs int
	// Digest is a hash of the final log: equal digests, equal runs.
	Digest     uint64
	Violations []string
}

// OK reports whether the run found no violation.
func (r *Result) OK() bool { return len(r.Violations) == 0 }

// FaultCount returns the number of faults injected.
func (r *Result) FaultCount() int {
	n := 0
	for _, c := range r.Faults {
		n += c
	}
	return n
}

func (r *Result) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d ticks, faults", r.Seed, r.Ticks)
	for k, c := range r.Faults {
		if c > 0 {
			fmt.Fprintf(&b, " %s=%d", faultNames[k], c)
		}
	}
	fmt.Fprintf(&b, "; %d recoveries (%d failed, %d fallbacks, %d ticks replayed), %d snapshots, %d hashes checked, %d outputs, log digest %016x",
		r.Recoveries, r.FailedRecoveries, r.Fallbacks, r.Replayed, r.Snapshots, r.Checked, r.Outputs, r.Digest)
	if !r.OK() {
		fmt.Fprintf(&b, ", %d violations:", len(r.Violations))
		for i, v := range r.Violations {
			if i == 10 {
				b.WriteString("\n  ...")
				break
			}
			fmt.Fprintf(&b, "\n  %s", v)
		}
	}
	return b.String()
}

// published is one tick a supervised runner published.
type published struct {
	shard      uint32
	tick, hash uint64
}

// sim is one run. The fields under mu are shared with the supervisor's
// goroutines (which run one at a time, see the package doc).
type sim struct {
	opts  Options
	cfg   broadside.Config
	n     int // sectors
	log   *replay.MemLog
	clock *manualClock
	store *snapshot.MemStore
	sup   *replay.Supervisor
	ref   []*refShard
	fleet *broadside.Fleet
	quiet *slog.Logger
	// release unblocks the wedged Steps that are left at the end.
	release chan struct{}

	mu         sync.Mutex
	rng        *rand.Rand
	res        Result
	turn       int // sector whose runner may read the log (-1: none)
	wake       []chan struct{}
	parked     []*simSource // the source a sector's runner waits in, if any
	delivered  int          // entries delivered to supervised runners
	armed      []map[faultKind]bool
	wedges     []*wedge // Steps blocked until their runner is abandoned
	infos      []published
	violations []string
	tick       uint64 // the world's tick

	// Root-only state.
	doubleKill []int    // sectors to kill again at the next tick
	outSeen    []uint64 // per sector: the last output seq found in the log
	scanned    uint64   // log position scanned for outputs
	bots       uint64   // the bots' command count (their client seq)
	players    uint32
}

// wedge is a Step blocked by a wedge fault: it returns once the supervisor
// has replaced its runner (the sector died since), so that the abandoned
// runner's late tick is exercised too.
type wedge struct {
	shard   int
	deaths  int
	release chan struct{}
}

// refShard is a sector of the uninterrupted run: a plain Runner over the
// same log from its start.
type refShard struct {
	runner *replay.Runner
	sector *broadside.Sector
	outs   [][]byte // output k+1's payload
	ticks  []uint64 // output k+1's tick
}

// Run runs one seed. It must be called inside a synctest bubble
// (synctest.Test), with opts.Codec created outside it.
func Run(opts Options) Result {
	if opts.Ticks <= 0 {
		opts.Ticks = 150
	}
	s := &sim{opts: opts, rng: rand.New(rand.NewPCG(opts.Seed, 0x5eed)), turn: -1,
		quiet: slog.New(slog.DiscardHandler), release: make(chan struct{})}
	s.res.Seed = opts.Seed
	if err := s.run(); err != nil {
		s.violate("setup: %v", err)
	}
	s.res.Violations = s.violations
	return s.res
}

func (s *sim) tracef(format string, args ...any) {
	if s.opts.Trace != nil {
		fmt.Fprintf(s.opts.Trace, "t%-4d "+format+"\n", append([]any{s.tick}, args...)...)
	}
}

func (s *sim) violate(format string, args ...any) {
	v := fmt.Sprintf("tick %d: ", s.tick) + fmt.Sprintf(format, args...)
	s.violations = append(s.violations, v)
	s.tracef("VIOLATION %s", v)
}

func (s *sim) run() error {
	rng := s.rng
	shapes := [][2]int{{2, 2}, {2, 2}, {2, 1}, {3, 1}, {3, 2}}
	shape := shapes[rng.IntN(len(shapes))]
	s.cfg = broadside.Config{Seed: s.opts.Seed, Width: int32(500 * shape[0]), Height: int32(500 * shape[1]),
		SectorsX: shape[0], SectorsY: shape[1], Islands: 0}
	if shape[1] == 1 {
		s.cfg.Height = 1000
	}
	s.n = s.cfg.Sectors()
	s.players = uint32(4 + rng.IntN(9))
	s.fleet = broadside.NewFleet(s.opts.Seed, true)
	s.log = replay.NewMemLog()
	s.clock = newManualClock()
	s.store = snapshot.NewMemStore()
	s.wake = make([]chan struct{}, s.n)
	s.parked = make([]*simSource, s.n)
	s.armed = make([]map[faultKind]bool, s.n)
	s.outSeen = make([]uint64, s.n)
	for i := range s.n {
		s.wake[i] = make(chan struct{})
		s.armed[i] = map[faultKind]bool{}
		sec, err := broadside.NewSector(s.cfg, i)
		if err != nil {
			return err
		}
		ref := &refShard{sector: sec}
		r, err := replay.NewRunner(replay.RunnerConfig{World: world, Shard: uint32(i), Sim: &recordingSim{Sector: sec, ref: ref},
			Source: &refSource{log: s.log}, Synchronous: true, HistoryTicks: 1 << 12, Logger: s.quiet})
		if err != nil {
			return err
		}
		ref.runner = r
		s.ref = append(s.ref, ref)
	}

	shards := make([]replay.ShardSpec, s.n)
	for i := range shards {
		shards[i] = replay.ShardSpec{Shard: uint32(i), NewSim: func() (replay.TableSim, error) {
			sec, err := broadside.NewSector(s.cfg, i)
			if err != nil {
				return nil, err
			}
			return &faultySector{Sector: sec, sim: s, shard: i}, nil
		}}
	}
	// Captures from every tick to every 20th, so that recoveries replay
	// from none to many ticks.
	minInterval := uint64(1 + rng.IntN(12))
	policy := snapshot.Policy{MinInterval: minInterval, MaxInterval: minInterval + uint64(rng.IntN(8)), MaxChain: 2 + rng.IntN(12)}
	sup, err := replay.NewSupervisor(replay.SupervisorConfig{
		World: world, Shards: shards, Appender: &faultAppender{log: s.log, sim: s}, Store: &faultStore{MemStore: s.store, sim: s}, Codec: s.opts.Codec,
		Policy: policy, KeepChains: 1 + rng.IntN(2), PruneEvery: 1 + rng.IntN(3),
		Open:    s.open,
		LogTail: s.log.CheckTail, WedgeTimeout: 100 * time.Millisecond,
		RestartBackoff: 20 * time.Millisecond, MaxRestartBackoff: 320 * time.Millisecond,
		HistoryTicks: 1 << 12, Logger: s.quiet, Clock: s.clock, Synchronous: true, Bugs: s.opts.Bugs,
		OnTick:       s.onTick,
		OnRecovery:   s.onRecovery,
		OnDivergence: s.onDivergence,
		OnStored: func(st snapshot.Stored) {
			if st.Err == nil {
				s.mu.Lock()
				s.res.Snapshots++
				s.mu.Unlock()
			}
		},
	})
	if err != nil {
		return err
	}
	s.sup = sup
	ticker, err := replay.NewTicker(replay.TickerConfig{World: world, Log: s.log, Start: 1, Clock: s.clock})
	if err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(context.Background())
	supDone, tickerDone := make(chan error, 1), make(chan error, 1)
	go func() { supDone <- sup.Run(ctx) }()
	go func() { tickerDone <- ticker.Run(ctx) }()
	synctest.Wait() // every sector waits for the log; TICK(1) is in it

	s.simulate(ticker)

	if n := s.sup.Abandoned(); n != 0 && len(s.violations) == 0 {
		s.violate("end: %d abandoned runners have not returned", n)
	}
	cancel()
	close(s.release) // wedged Steps left (after a violation) return
	synctest.Wait()
	if err := <-supDone; !errors.Is(err, context.Canceled) {
		s.violate("supervisor returned %v", err)
	}
	<-tickerDone
	s.res.Digest = s.digest()
	return nil
}

// simulate runs the world tick by tick with faults, then without until
// every sector is live again (or gives up).
func (s *sim) simulate(ticker *replay.Ticker) {
	const drainTicks = 120
	last := uint64(s.opts.Ticks)
	for {
		n := ticker.Next() // the tick the next advance appends
		faulty := !s.opts.NoFaults && n <= last
		if !faulty && n > last && s.allLive(n-1) {
			break
		}
		if n > last+drainTicks {
			s.violate("sectors not live %d ticks after the last fault: %+v", drainTicks, s.sup.Status())
			break
		}
		s.setTick(n)
		if faulty {
			s.injectFaults()
		}
		s.botCommands(n)
		s.clock.advance(time.Second/replay.DefaultTickRate, s.settle)
		if got := ticker.Next(); got != n+1 {
			s.violate("ticker appended through %d, want %d", got-1, n)
			return
		}
		s.settle()
		s.releaseWedges()
		s.check(n)
		if len(s.violations) > 0 {
			return
		}
	}
	s.res.Ticks = s.tick
	s.checkFinal()
}

// releaseWedges returns the wedged Steps whose runners were replaced: each
// runs alone to its end (it must publish and append nothing).
func (s *sim) releaseWedges() {
	status := s.sup.Status()
	s.mu.Lock()
	var due []*wedge
	kept := s.wedges[:0]
	for _, w := range s.wedges {
		if status[w.shard].Deaths > w.deaths {
			due = append(due, w)
		} else {
			kept = append(kept, w)
		}
	}
	s.wedges = kept
	s.mu.Unlock()
	for _, w := range due {
		s.tracef("wedged Step of sector %d returns", w.shard)
		close(w.release)
		synctest.Wait()
	}
}

func (s *sim) setTick(n uint64) {
	s.mu.Lock()
	s.tick = n
	s.res.Ticks = n
	s.mu.Unlock()
}

// settle gives every sector whose runner waits for entries that are in the
// log its turn, in sector order, until none has anything to read.
func (s *sim) settle() {
	synctest.Wait()
	for round := 0; ; round++ {
		if round == 100 {
			s.violate("runners do not settle")
			return
		}
		moved := false
		for i := range s.n {
			s.mu.Lock()
			src := s.parked[i]
			ready := src != nil && src.next <= s.log.Tail()
			if ready {
				s.turn = i
				close(s.wake[i])
				s.wake[i] = make(chan struct{})
			}
			s.mu.Unlock()
			if !ready {
				continue
			}
			moved = true
			synctest.Wait()
			s.mu.Lock()
			s.turn = -1
			s.mu.Unlock()
		}
		if !moved {
			return
		}
	}
}

// allLive reports whether every sector is live at tick with its runner
// waiting at the log's tail.
func (s *sim) allLive(tick uint64) bool {
	for _, st := range s.sup.Status() {
		if st.Recovering || st.Tick < tick {
			return false
		}
	}
	return true
}

// botCommands appends the fleet's orders for tick n, decided from the
// uninterrupted run's state after tick n-1.
func (s *sim) botCommands(n uint64) {
	submit := func(p uint32, c broadside.PlayerCommand) {
		payload, err := broadside.EncodeCommand(c)
		if err != nil {
			panic(err)
		}
		s.bots++
		rec := wire.EncodeEnvelope(nil, wire.Envelope{Kind: wire.EnvelopePlayerCommand, Player: p, ClientSeq: s.bots, Payload: payload})
		if err := s.log.Append(context.Background(), rec); err != nil {
			s.violate("append: %v", err)
		}
	}
	if n == 2 {
		for p := uint32(1); p <= s.players; p++ {
			submit(p, broadside.Join())
		}
		return
	}
	var views []broadside.ShipView
	for _, r := range s.ref {
		r.sector.Ships(func(v broadside.ShipView) { views = append(views, v) })
	}
	s.fleet.Act(n, views, submit)
}

// injectFaults may inject one fault (and the second kill of a double
// kill).
func (s *sim) injectFaults() {
	for _, i := range s.doubleKill {
		s.kill(i, "second kill")
	}
	s.doubleKill = s.doubleKill[:0]
	if s.tick < 4 || s.rng.IntN(10) != 0 {
		return
	}
	i := s.rng.IntN(s.n)
	f := faultKind(s.rng.IntN(int(numFaults)))
	s.mu.Lock()
	s.res.Faults[f]++
	s.mu.Unlock()
	s.tracef("fault %s sector %d", faultNames[f], i)
	switch f {
	case faultKill:
		s.kill(i, "kill")
	case faultKillMidTick, faultWedge, faultPanic, faultWriteKill, faultOutputKill:
		s.arm(i, f)
	case faultCorrupt, faultMissing:
		metas, _ := s.store.List(context.Background(), uint32(i))
		if len(metas) == 0 {
			break
		}
		if f == faultCorrupt {
			m := metas[len(metas)-1]
			if s.rng.IntN(3) == 0 {
				m = metas[s.rng.IntN(len(metas))]
			}
			s.store.Corrupt(uint32(i), m.Tick, s.rng.IntN(int(m.StoredBytes)+snapshot.MetaLen))
			s.tracef("corrupted snapshot of sector %d at tick %d", i, m.Tick)
		} else {
			m := metas[s.rng.IntN(len(metas))]
			_ = s.store.DeleteRange(context.Background(), uint32(i), m.Tick, m.Tick+1)
			s.tracef("deleted snapshot of sector %d at tick %d", i, m.Tick)
		}
		if s.rng.IntN(2) == 0 {
			s.kill(i, "kill after snapshot damage")
		}
	case faultRecoveryKill:
		s.arm(i, f)
		s.kill(i, "kill before recovery kill")
	case faultDoubleKill:
		s.kill(i, "first kill")
		s.doubleKill = append(s.doubleKill, i)
	case faultOpenFails:
		s.arm(i, f)
		s.kill(i, "kill before failing open")
	}
}

func (s *sim) arm(i int, f faultKind) {
	s.mu.Lock()
	s.armed[i][f] = true
	s.mu.Unlock()
}

// takeArmed disarms and reports fault f of sector i.
func (s *sim) takeArmed(i int, f faultKind) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.armed[i][f] {
		delete(s.armed[i], f)
		return true
	}
	return false
}

// kill kills sector i's runner from the simulator and waits until the
// supervisor has restarted it (or backs off).
func (s *sim) kill(i int, why string) {
	// Nothing between the kill and the wait: the killed runner's goroutine
	// runs at once.
	s.tracef("%s sector %d", why, i)
	s.sup.Kill(uint32(i))
	synctest.Wait()
}

// draw returns a random int in [0, n) from the run's generator (callable
// from the supervisor's goroutines, which run one at a time).
func (s *sim) draw(n int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rng.IntN(n)
}

// open is the supervisor's Open: a source gated by the sectors' turns.
func (s *sim) open(_ context.Context, shard uint32, from uint64) (replay.Source, error) {
	i := int(shard)
	if s.takeArmed(i, faultOpenFails) {
		s.tracef("open of sector %d fails", i)
		return nil, errors.New("replaydst: injected open failure")
	}
	src := &simSource{sim: s, shard: i, next: from, killAfter: -1}
	if s.takeArmed(i, faultRecoveryKill) {
		s.mu.Lock()
		src.killAfter = s.rng.IntN(int(s.log.Tail()-min(s.log.Tail(), from)) + 2)
		s.mu.Unlock()
		s.tracef("sector %d will be killed after %d entries of its recovery from %d", i, src.killAfter, from)
	}
	return src, nil
}

func (s *sim) onTick(info replay.TickInfo) {
	s.mu.Lock()
	s.infos = append(s.infos, published{shard: info.Shard, tick: info.Tick, hash: info.Hash})
	s.mu.Unlock()
}

func (s *sim) onRecovery(r replay.Recovery) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.Err != nil {
		s.res.FailedRecoveries++
	} else {
		s.res.Recoveries++
		s.res.Replayed += r.Replayed
	}
	if r.Fallback != nil || r.Load.Skipped > 0 {
		s.res.Fallbacks++
	}
	from := "the start"
	if r.Snapshot != nil {
		from = fmt.Sprintf("snapshot %d", r.Snapshot.Tick)
	}
	s.tracef("recovery of sector %d from %s (cause %s): live at %d, %d replayed, err %s, fallback %s",
		r.Shard, from, firstLine(r.Cause), r.LiveTick, r.Replayed, firstLine(r.Err), firstLine(r.Fallback))
}

// firstLine returns err's first line (a panic's carries its stack).
func firstLine(err error) string {
	if err == nil {
		return "none"
	}
	msg, _, _ := strings.Cut(err.Error(), "\n")
	return msg
}

func (s *sim) onDivergence(d replay.Divergence) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.opts.ExternalChecksOnly {
		s.tracef("supervisor: sector %d replayed tick %d with hash %#x, published %#x", d.Shard, d.Tick, d.Got, d.Want)
		return
	}
	s.violate("supervisor: sector %d replayed tick %d with hash %#x, published %#x", d.Shard, d.Tick, d.Got, d.Want)
}

// check runs the uninterrupted run to tick n and compares.
func (s *sim) check(n uint64) {
	ctx := context.Background()
	for i, r := range s.ref {
		if err := r.runner.RunUntil(ctx, n); err != nil {
			s.violate("uninterrupted run of sector %d: %v", i, err)
			return
		}
	}
	s.mu.Lock()
	infos := s.infos
	s.infos = nil
	s.mu.Unlock()
	for _, p := range infos {
		want, ok := s.ref[p.shard].runner.Hashes().Get(p.tick)
		s.res.Checked++
		switch {
		case !ok:
			s.violate("sector %d published tick %d, which the uninterrupted run has not reached", p.shard, p.tick)
		case want.Hash != p.hash:
			s.violate("sector %d tick %d: hash %#x, uninterrupted run %#x", p.shard, p.tick, p.hash, want.Hash)
		}
	}
	s.checkOutputs()
	status := s.sup.Status()
	for _, st := range status {
		if !st.Recovering && st.Tick >= n {
			if want := uint64(len(s.ref[st.Shard].outs)); s.outSeen[st.Shard] != want {
				s.violate("sector %d is live at tick %d with %d outputs in the log, the uninterrupted run has %d", st.Shard, n, s.outSeen[st.Shard], want)
			}
		}
	}
}

// checkOutputs scans the new log entries: each sector's outputs must come
// exactly once, in order, as the uninterrupted run produced them.
func (s *sim) checkOutputs() {
	tail := s.log.Tail()
	if s.scanned >= tail {
		return
	}
	for _, e := range s.log.Entries(s.scanned + 1) {
		s.scanned = e.Pos
		i := -1
		for k := range s.n {
			if e.Record.ID.Client == replay.OutputClientID(world, uint32(k)) {
				i = k
			}
		}
		if i < 0 {
			continue
		}
		s.res.Outputs++
		seq := e.Record.ID.Seq
		if seq != s.outSeen[i]+1 {
			s.violate("log position %d: output %d of sector %d after output %d (each output exactly once, in order)", e.Pos, seq, i, s.outSeen[i])
			continue
		}
		s.outSeen[i] = seq
		env, err := wire.DecodeEnvelope(e.Record.Data)
		ref := s.ref[i]
		switch {
		case err != nil:
			s.violate("log position %d: output %d of sector %d: %v", e.Pos, seq, i, err)
		case seq > uint64(len(ref.outs)):
			s.violate("log position %d: output %d of sector %d, which the uninterrupted run has not produced", e.Pos, seq, i)
		case env.ClientSeq != seq || env.Tick != ref.ticks[seq-1] || !slices.Equal(env.Payload, ref.outs[seq-1]):
			s.violate("log position %d: output %d of sector %d (tick %d) differs from the uninterrupted run's (tick %d)", e.Pos, seq, i, env.Tick, ref.ticks[seq-1])
		}
	}
}

// checkFinal checks the end of the run: every sector live at the last tick
// with the uninterrupted run's hash.
func (s *sim) checkFinal() {
	for _, st := range s.sup.Status() {
		got := s.sup.Hashes(st.Shard).Latest()
		want, _ := s.ref[st.Shard].runner.Hashes().Get(s.tick)
		if st.Recovering || got.Tick != s.tick || got.Hash != want.Hash {
			s.violate("end: sector %d at %+v (recovering %v), uninterrupted run %+v", st.Shard, got, st.Recovering, want)
		}
		if want := uint64(len(s.ref[st.Shard].outs)); s.outSeen[st.Shard] != want {
			s.violate("end: sector %d has %d outputs in the log, the uninterrupted run %d", st.Shard, s.outSeen[st.Shard], want)
		}
	}
}

// digest hashes the whole log.
func (s *sim) digest() uint64 {
	h := fnv.New64a()
	for _, e := range s.log.Entries(1) {
		fmt.Fprintf(h, "%d %x %d ", e.Pos, e.Record.ID.Client, e.Record.ID.Seq)
		h.Write(e.Record.Data)
	}
	return h.Sum64()
}

// simSource is a supervised runner's Source: it delivers the log's entries
// only during its sector's turn and otherwise waits (or ends with its
// runner's context). A recovery source may kill its runner after
// killAfter entries.
type simSource struct {
	sim       *sim
	shard     int
	next      uint64
	delivered int
	killAfter int // -1: never
}

func (src *simSource) Next(ctx context.Context) (msg.Entry, error) {
	s := src.sim
	defer func() {
		s.mu.Lock()
		if s.parked[src.shard] == src {
			s.parked[src.shard] = nil
		}
		s.mu.Unlock()
	}()
	for {
		if err := ctx.Err(); err != nil {
			return msg.Entry{}, err
		}
		if src.killAfter >= 0 && src.delivered >= src.killAfter {
			src.killAfter = -1
			s.tracef("kill during recovery: sector %d after %d entries", src.shard, src.delivered)
			s.sup.Kill(uint32(src.shard))
			continue
		}
		s.mu.Lock()
		if s.turn == src.shard && src.next <= s.log.Tail() {
			s.delivered++
			s.mu.Unlock()
			es, err := s.log.Read(ctx, src.next, 1)
			if err != nil {
				return msg.Entry{}, err
			}
			src.next = es[0].Pos + 1
			src.delivered++
			return es[0], nil
		}
		s.parked[src.shard] = src
		wake := s.wake[src.shard]
		s.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
		}
	}
}

// refSource is the uninterrupted run's Source: the log, read without
// waiting (the run is stepped only to ticks whose marker is in the log).
type refSource struct {
	log  *replay.MemLog
	next uint64
}

func (r *refSource) Next(ctx context.Context) (msg.Entry, error) {
	if r.next == 0 {
		r.next = 1
	}
	if r.next > r.log.Tail() {
		return msg.Entry{}, errors.New("replaydst: the uninterrupted run read past the log's tail")
	}
	es, err := r.log.Read(ctx, r.next, 1)
	if err != nil {
		return msg.Entry{}, err
	}
	r.next = es[0].Pos + 1
	return es[0], nil
}

// recordingSim is a sector of the uninterrupted run; it keeps its outputs.
type recordingSim struct {
	*broadside.Sector
	ref *refShard
}

func (r *recordingSim) Step(tick uint64, cmds []replay.Command, rec lineage.Recorder) []replay.Output {
	outs := r.Sector.Step(tick, cmds, rec)
	for _, o := range outs {
		r.ref.outs = append(r.ref.outs, slices.Clone(o.Payload))
		r.ref.ticks = append(r.ref.ticks, tick)
	}
	return outs
}

// faultySector is a supervised sector with the armed Step faults.
type faultySector struct {
	*broadside.Sector
	sim   *sim
	shard int
}

func (f *faultySector) Step(tick uint64, cmds []replay.Command, rec lineage.Recorder) []replay.Output {
	s := f.sim
	switch {
	case s.takeArmed(f.shard, faultPanic):
		s.tracef("sector %d panics in Step(%d)", f.shard, tick)
		if s.draw(2) == 0 {
			f.Sector.Step(tick, cmds, rec) // the state is half-changed either way
		}
		panic(fmt.Sprintf("replaydst: injected panic in sector %d tick %d", f.shard, tick))
	case s.takeArmed(f.shard, faultWedge):
		s.tracef("sector %d wedges in Step(%d)", f.shard, tick)
		w := &wedge{shard: f.shard, deaths: s.sup.Status()[f.shard].Deaths, release: make(chan struct{})}
		s.mu.Lock()
		s.wedges = append(s.wedges, w)
		s.mu.Unlock()
		select {
		case <-w.release:
		case <-s.release:
		}
		return f.Sector.Step(tick, cmds, rec)
	case s.takeArmed(f.shard, faultKillMidTick):
		outs := f.Sector.Step(tick, cmds, rec)
		s.tracef("sector %d killed inside Step(%d) with %d outputs", f.shard, tick, len(outs))
		s.sup.Kill(uint32(f.shard))
		return outs
	}
	return f.Sector.Step(tick, cmds, rec)
}

// faultStore is the supervisor's snapshot store, with kills during writes.
type faultStore struct {
	*snapshot.MemStore
	sim *sim
}

func (fs *faultStore) Put(ctx context.Context, meta snapshot.Meta, data []byte) error {
	s := fs.sim
	i := int(meta.Shard)
	if !s.takeArmed(i, faultWriteKill) {
		return fs.MemStore.Put(ctx, meta, data)
	}
	s.sup.Kill(meta.Shard)
	switch s.draw(3) {
	case 0:
		s.tracef("sector %d killed writing snapshot %d: lost", i, meta.Tick)
		return errors.New("replaydst: killed during the write")
	case 1:
		s.tracef("sector %d killed writing snapshot %d: stored", i, meta.Tick)
		return fs.MemStore.Put(ctx, meta, data)
	default:
		s.tracef("sector %d killed writing snapshot %d: torn", i, meta.Tick)
		_ = fs.MemStore.Put(ctx, meta, data[:len(data)/2])
		return errors.New("replaydst: killed during the write")
	}
}

// faultAppender is the supervisor's Appender, with kills during appends.
type faultAppender struct {
	log *replay.MemLog
	sim *sim
}

func (a *faultAppender) AppendWithID(ctx context.Context, id msg.RecordID, data []byte) error {
	s := a.sim
	i := -1
	for k := range s.n {
		if id.Client == replay.OutputClientID(world, uint32(k)) {
			i = k
		}
	}
	if i < 0 || !s.takeArmed(i, faultOutputKill) {
		return a.log.AppendWithID(ctx, id, data)
	}
	s.sup.Kill(uint32(i))
	if s.draw(2) == 0 {
		s.tracef("sector %d killed appending output %d: lost", i, id.Seq)
		return ctx.Err()
	}
	s.tracef("sector %d killed appending output %d: appended", i, id.Seq)
	_ = a.log.AppendWithID(context.Background(), id, data)
	return ctx.Err()
}
