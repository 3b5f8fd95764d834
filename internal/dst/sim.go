// Package dst is Broadside's deterministic simulator for the cmdlog
// protocol cores. One seed fixes everything: the workload, message delays,
// drops, duplicates and reorderings, partitions, and crashes and restarts
// of sequencing replicas and shards. After every step the simulator checks
// the log's invariants; at the end it heals the cluster, waits for it to
// quiesce and checks that every acknowledged append is in the log exactly
// once, in an order consistent with real time, and that the clients'
// histories are linearizable (porcupine). A failing seed replays exactly.
package dst

import (
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/anoptic/broadside/cmdlog/clientcore"
	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/cmdlog/seq"
	"github.com/anoptic/broadside/cmdlog/shard"
)

// Options configure one simulated run.
type Options struct {
	Seed     uint64
	Replicas int // sequencing replicas (default 3)
	Shards   int // shards (default 2)
	Clients  int // clients (default 3)
	// AppendsPerClient is the number of appends each client issues
	// (default 100).
	AppendsPerClient int
	// Window caps a client's outstanding appends (default 8).
	Window int
	// NoFaults disables fault injection (messages are still delayed and
	// reordered).
	NoFaults bool
	// Bugs injects protocol bugs into the replicas.
	Bugs seq.Bugs
	// ExternalChecksOnly ignores the invariant violations the cores report
	// about themselves, leaving only the simulator's own checks (reads,
	// final log, real-time order, linearizability).
	ExternalChecksOnly bool
	// WALBugs injects bugs into the simulated WAL's compaction.
	WALBugs WALBugs
	// ClientIgnoresLease injects the clients' bug of resending appends
	// past their dedup lease.
	ClientIgnoresLease bool
	// Durability of the replicas (memory by default).
	Durability seq.Durability
	// Trace, if set, receives a line per notable event.
	Trace io.Writer
	// MaxTicks bounds the whole run (default 60000).
	MaxTicks int64
	// LeaseViews, if set, is the replicas' and clients' dedup lease
	// (default: the seed's, dedup.DefaultLeaseViews on most seeds).
	LeaseViews int
	// Dedup forces (1) or forbids (-1) the dedup-lease workload; 0 lets
	// the seed decide (one seed in four): small leases, tables and
	// windows, a flood of short-lived clients that fills the tables, and
	// clients that go quiet past their lease.
	Dedup int
}

// WALBugs are deliberately wrong WAL compactions, to prove that the
// simulator catches them.
type WALBugs struct {
	// KeepNothingBeforeCheckpoint deletes the checkpoint along with what
	// precedes it.
	KeepNothingBeforeCheckpoint bool
}

// Result summarises a run.
type Result struct {
	Seed        uint64
	Ticks       int64
	Appends     int // issued
	Acked       int
	Reads       int
	ReadEntries int
	Tails       int
	FinalTail   uint64
	ViewChanges int
	Crashes     int // replica and shard crashes
	FalseGone   int // false crash reports (msg.PeerGone about a live replica)
	Partitions  int
	Sent        int
	Dropped     int
	Duplicated  int
	// Busy counts appends a replica refused busy (MaxHeldBytes, or ids
	// beyond the dedup window).
	Busy int
	// DedupSeed: the run used the dedup-lease workload.
	DedupSeed bool
	// Admission counts appends refused busy because they named a new
	// client while a replica's dedup table was full; Rolls, the view
	// changes leaders started to let leases expire; FloorRaises, the
	// clients' floors that moved a replica's mark; Unknown, the appends
	// that completed with their outcome unknown (lease ran out); Quiet,
	// the clients that went quiet.
	Admission, Rolls, FloorRaises, Unknown, Quiet int
	// CompactedRecoveries counts replicas recovered from a compacted WAL.
	CompactedRecoveries int
	Violations          []string
	// Checked is true when the porcupine check ran to a verdict.
	Checked bool
	// Sample holds a few entries of the final log (its head and tail), as
	// read back from the shards.
	Sample []msg.Entry
}

// OK reports whether the run found no violation.
func (r *Result) OK() bool { return len(r.Violations) == 0 }

func (r *Result) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d ticks, %d appends (%d acked), %d reads (%d entries), %d tails, tail %d, "+
		"%d view changes, %d crashes, %d partitions, %d msgs (%d dropped, %d duplicated)",
		r.Seed, r.Ticks, r.Appends, r.Acked, r.Reads, r.ReadEntries, r.Tails, r.FinalTail,
		r.ViewChanges, r.Crashes, r.Partitions, r.Sent, r.Dropped, r.Duplicated)
	if !r.OK() {
		fmt.Fprintf(&b, ", %d violations:", len(r.Violations))
		for i, v := range r.Violations {
			if i == 10 {
				fmt.Fprintf(&b, "\n  ...")
				break
			}
			fmt.Fprintf(&b, "\n  %s", v)
		}
	}
	return b.String()
}

type replicaSlot struct {
	id              msg.NodeID
	core            *seq.Replica
	downUntil       int64
	lastStartedView uint64
	// wal is the write-ahead log as the driver keeps it: everything
	// before the newest checkpoint deleted. fullWAL keeps every
	// operation, to check that recovering from either gives one state.
	wal     []seq.PersistOp
	fullWAL []seq.PersistOp
}

type shardSlot struct {
	id        msg.NodeID
	core      *shard.Shard
	store     *memStore
	downUntil int64
}

type clientSlot struct {
	id       msg.NodeID
	core     *clientcore.Client
	issued   int
	budget   int                  // appends it issues in all
	startAt  int64                // first tick it issues appends (short-lived clients)
	quietTil int64                // it neither ticks nor hears anything before this tick
	quietTo  uint64               // ... or before the coordinator's view reaches this one
	inflight map[msg.RecordID]int // append id -> op index
	reads    map[uint64]int       // req id -> op index
	tails    map[uint64]int
	lastTail uint64
}

// sim is one run's world.
type sim struct {
	opts Options
	rng  *rand.Rand
	net  *network
	now  int64
	// event numbers order calls and returns for the linearizability check.
	event int64

	layout msg.Layout
	// batchSteps: nodes often step several messages before their Ready,
	// as the live drivers do (they step everything queued, then carry out
	// one Ready); dirty lists the nodes with a Ready still to process.
	batchSteps bool
	dirty      []msg.NodeID

	replicas []*replicaSlot
	shards   []*shardSlot
	clients  []*clientSlot

	coordView msg.ViewRecord
	coordRev  uint64

	// Invariant state.
	globalStable uint64
	readValues   map[uint64]msg.RecordID
	history      []op
	res          Result
	faultsOn     bool
	crashBudget  int
	// forcedFaultAt is the tick of the one fault every seed gets.
	forcedFaultAt int64
	// drng draws the dedup-lease workload, apart from rng so that the
	// seeds without it run as they did before it existed.
	drng                           *rand.Rand
	goneAt                         int64
	dedupOn                        bool
	lease, maxClients, dedupWindow int
}

// op is one client operation for the history checks.
type op struct {
	kind   opKind
	client int
	id     msg.RecordID // append
	pos    uint64       // read: position read
	value  msg.RecordID // read: value read
	tail   uint64       // tail result
	call   int64
	ret    int64 // 0 while pending
}

type opKind uint8

const (
	opAppend opKind = iota + 1
	opRead
	opTail
)

const (
	replicaBase msg.NodeID = 1
	shardBase   msg.NodeID = 101
	clientBase  msg.NodeID = 201
)

func (o *Options) defaults() {
	if o.Replicas == 0 {
		o.Replicas = 3
	}
	if o.Shards == 0 {
		o.Shards = 2
	}
	if o.Clients == 0 {
		o.Clients = 3
	}
	if o.AppendsPerClient == 0 {
		o.AppendsPerClient = 100
	}
	if o.Window == 0 {
		o.Window = 8
	}
	if o.MaxTicks == 0 {
		o.MaxTicks = 60000
	}
}

// Run simulates one seed and checks it.
func Run(opts Options) Result {
	opts.defaults()
	s := &sim{
		opts:       opts,
		rng:        rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x9e3779b97f4a7c15)),
		readValues: make(map[uint64]msg.RecordID),
		faultsOn:   !opts.NoFaults,
	}
	s.res.Seed = opts.Seed
	s.drng = rand.New(rand.NewPCG(opts.Seed^0x5eed_dedf9, opts.Seed*3+7))
	s.dedupOn = opts.Dedup > 0 || (opts.Dedup == 0 && !opts.NoFaults && s.drng.IntN(4) == 0)
	if s.dedupOn {
		s.res.DedupSeed = true
		s.lease = 2 + s.drng.IntN(3)
		s.maxClients = opts.Clients + 1 + s.drng.IntN(3)
		s.dedupWindow = 2 + s.drng.IntN(4)
	}
	if opts.LeaseViews > 0 {
		s.lease = opts.LeaseViews
	}
	s.net = &network{rng: rand.New(rand.NewPCG(opts.Seed^0xabcdef, opts.Seed+1)), cut: make(map[msg.NodeID]int64)}
	if s.faultsOn {
		s.net.dropRate = s.rng.Float64() * 0.05
		s.net.dupRate = s.rng.Float64() * 0.05
		s.net.maxDelay = 1 + s.rng.IntN(6)
		s.crashBudget = 1 + s.rng.IntN(5)
		s.forcedFaultAt = int64(20 + s.rng.IntN(200))
	} else {
		s.net.maxDelay = 1 + s.rng.IntN(3)
	}
	s.setup()
	s.run()
	s.finalChecks()
	s.res.Ticks = s.now
	s.res.Sent, s.res.Dropped, s.res.Duplicated = s.net.sent, s.net.dropped, s.net.duplicated
	for _, r := range s.replicas {
		s.harvest(r)
	}
	for _, c := range s.clients {
		s.res.Unknown += int(c.core.Unknown())
	}
	return s.res
}

// harvest adds a replica's dedup counters to the result (before it
// crashes, and at the end).
func (s *sim) harvest(r *replicaSlot) {
	if r.core != nil {
		s.res.Admission += int(r.core.AdmitRejects())
		s.res.Rolls += int(r.core.Rolls())
		s.res.FloorRaises += int(r.core.FloorRaises())
	}
}

func (s *sim) tracef(format string, args ...any) {
	if s.opts.Trace != nil {
		fmt.Fprintf(s.opts.Trace, "t=%-6d %s\n", s.now, fmt.Sprintf(format, args...))
	}
}

func (s *sim) violate(format string, args ...any) {
	v := fmt.Sprintf("t=%d: ", s.now) + fmt.Sprintf(format, args...)
	s.res.Violations = append(s.res.Violations, v)
	s.tracef("VIOLATION %s", v)
}

func (s *sim) replicaConfig(id msg.NodeID) seq.Config {
	return seq.Config{
		ID:                 id,
		Layout:             s.layout,
		Durability:         s.opts.Durability,
		BatchSize:          1 + s.rng.IntN(16),
		MaxInflightBatches: 1 + s.rng.IntN(4),
		// Half the replicas order at once, the others wait 1 or 2 ticks.
		OrderDelayTicks: []int{-1, -1, 1, 2}[s.rng.IntN(4)],
		// Checkpoints (and so WAL compaction) come often, sometimes
		// never.
		CheckpointRecords: []int{-1, 1, 8, 40, 200}[s.rng.IntN(5)],
		// Half the replicas hold little before they refuse appends busy.
		MaxHeldBytes: []int64{0, 0, 200, 1000}[s.rng.IntN(4)],
		// The seeds' schedules were found with 20 ticks of suspicion
		// (the default until session 19): views change often.
		SuspectTicks: 20,
		Bugs:         s.opts.Bugs,
		// The dedup-lease seeds: small leases, tables and windows.
		LeaseViews:  s.lease,
		MaxClients:  s.maxClients,
		DedupWindow: s.dedupWindow,
	}
}

func (s *sim) setup() {
	s.batchSteps = s.rng.IntN(3) != 0
	for i := range s.opts.Shards {
		s.layout.Shards = append(s.layout.Shards, shardBase+msg.NodeID(i))
	}
	s.layout.StripeUnit = uint64(1 + s.rng.IntN(8))
	var members []msg.NodeID
	for i := range s.opts.Replicas {
		members = append(members, replicaBase+msg.NodeID(i))
	}
	// The initial view, as `logd --bootstrap` writes it.
	s.coordView = msg.ViewRecord{Number: 1, Members: members, Leader: members[0]}
	s.coordRev = 1
	for _, id := range members {
		sl := &replicaSlot{id: id}
		sl.core = seq.New(s.replicaConfig(id), 0)
		s.replicas = append(s.replicas, sl)
	}
	for _, id := range s.layout.Shards {
		sl := &shardSlot{id: id, store: newMemStore()}
		sl.store.check = s.checkShardWrite
		sl.core = s.newShard(sl)
		s.shards = append(s.shards, sl)
	}
	n := s.opts.Clients
	if s.dedupOn {
		// A flood of short-lived clients, each a few appends, that fills
		// the tables; their leases must run out for the next to get in.
		n += 10 + s.drng.IntN(30)
	}
	for i := range n {
		id := clientBase + msg.NodeID(i)
		c := clientcore.New(clientcore.Config{ID: id, ClientID: uint64(1000 + i), Layout: s.layout, LeaseViews: s.lease,
			IgnoreLeaseBug: s.opts.ClientIgnoresLease})
		sl := &clientSlot{id: id, core: c, inflight: map[msg.RecordID]int{},
			reads: map[uint64]int{}, tails: map[uint64]int{}, budget: s.opts.AppendsPerClient}
		if i >= s.opts.Clients {
			sl.budget = 1 + s.drng.IntN(5)
			sl.startAt = int64(s.drng.IntN(int(s.opts.MaxTicks / 4)))
		}
		s.clients = append(s.clients, sl)
	}
}

// quietClient pauses a client for longer than its lease usually lasts
// (dedup-lease seeds): it neither ticks nor hears anything, as a stalled
// process, while view changes go on; its pending appends then complete
// with their outcome unknown, or are still within their lease.
func (s *sim) quietClient() {
	// Mostly a long-lived client, often with appends in flight.
	c := s.clients[s.drng.IntN(s.opts.Clients)]
	if s.drng.IntN(4) == 0 {
		c = s.clients[s.drng.IntN(len(s.clients))]
	}
	if c.quiet() {
		return
	}
	// Quiet for 1 to L view changes (past its lease at L), or a while.
	c.quietTil = s.now + int64(300+s.drng.IntN(3000))
	c.quietTo = s.coordView.Number + uint64(1+s.drng.IntN(max(s.lease, 1)))
	s.res.Quiet++
	s.tracef("client %d goes quiet until view %d or t=%d", c.id, c.quietTo, c.quietTil)
	// Meanwhile a burst of short-lived clients fills the tables, and a
	// false crash report changes the view.
	burst := 0
	for _, o := range s.clients[s.opts.Clients:] {
		if o.startAt > s.now && burst <= s.maxClients {
			o.startAt = s.now + int64(burst)
			burst++
		}
	}
	s.goneAt = s.now + int64(20+s.drng.IntN(60))
}

// quiet reports whether c is stalled now.
func (c *clientSlot) quiet() bool { return c.quietTil != 0 }

// wake ends the stalls that are over.
func (s *sim) wake() {
	for _, c := range s.clients {
		if c.quietTil != 0 && (s.now >= c.quietTil || s.coordView.Number >= c.quietTo) {
			c.quietTil, c.quietTo = 0, 0
			s.tracef("client %d wakes up in view %d", c.id, s.coordView.Number)
		}
	}
	if s.goneAt != 0 && s.now >= s.goneAt {
		s.goneAt = 0
		var leader, follower *replicaSlot
		for _, r := range s.replicas {
			if r.core != nil && r.core.Role() == seq.RoleLeader {
				leader = r
			} else if r.core != nil && r.core.Role() == seq.RoleFollower {
				follower = r
			}
		}
		if leader != nil && follower != nil {
			s.res.FalseGone++
			s.tracef("false crash report: replica %d told that replica %d ended", leader.id, follower.id)
			s.net.send(msg.Envelope{From: follower.id, To: leader.id, Msg: msg.PeerGone{}}, s.now, true)
		}
	}
}

func (s *sim) newShard(sl *shardSlot) *shard.Shard {
	c, err := shard.New(shard.Config{ID: sl.id, Layout: s.layout, MaxReadEntries: 1 + s.rng.IntN(16)}, sl.store)
	if err != nil {
		panic(err) // our own configuration
	}
	return c
}

func (s *sim) run() {
	faultEnd := s.opts.MaxTicks / 2
	for s.now < s.opts.MaxTicks {
		s.now++
		workDone := s.workloadDone()
		if s.faultsOn && (workDone || s.now > faultEnd) {
			s.healAll()
		}
		if s.faultsOn {
			s.injectFaults()
		}
		s.restartDue()
		s.deliver()
		s.tickAll()
		if !workDone {
			s.workload()
		}
		if workDone && !s.faultsOn && s.quiescent() {
			return
		}
	}
	s.violate("not quiescent after %d ticks (liveness): %s", s.now, s.describe())
}

func (s *sim) describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "coord rev %d view %d members %v leader %d change %+v;", s.coordRev, s.coordView.Number,
		s.coordView.Members, s.coordView.Leader, s.coordView.Change)
	for _, r := range s.replicas {
		if r.core == nil {
			fmt.Fprintf(&b, " r%d down;", r.id)
			continue
		}
		fmt.Fprintf(&b, " r%d %s v%d sealed=%v flushing=%v lo=%d st=%d unord=%d;", r.id, r.core.Role(), r.core.View(),
			r.core.Sealed(), r.core.Flushing(), r.core.LastOrderedGP(), r.core.StableGP(), r.core.UnorderedLen())
	}
	for _, c := range s.clients {
		fmt.Fprintf(&b, " c%d pending=%d;", c.id, c.core.Pending())
	}
	return b.String()
}

func (s *sim) workloadDone() bool {
	for _, c := range s.clients {
		if c.issued < c.budget {
			return false
		}
	}
	return true
}

func (s *sim) quiescent() bool {
	for _, c := range s.clients {
		if c.core.Pending() > 0 || len(c.tails) > 0 {
			return false
		}
	}
	var leader *seq.Replica
	for _, r := range s.replicas {
		if r.core == nil {
			return false
		}
		if r.core.Role() == seq.RoleLeader && !r.core.Sealed() && r.core.View() == s.coordView.Number {
			leader = r.core
		}
	}
	if leader == nil || leader.UnorderedLen() > 0 || leader.StableGP() != leader.LastOrderedGP() {
		return false
	}
	for _, sh := range s.shards {
		if sh.core == nil || sh.core.Meta().StableGP != leader.StableGP() {
			return false
		}
	}
	// Reads parked above the final tail legitimately wait forever; every
	// other read must have been answered.
	for _, c := range s.clients {
		for _, i := range c.reads {
			if s.history[i].pos <= leader.StableGP() {
				return false
			}
		}
	}
	return true
}

// ---- faults ----

func (s *sim) healAll() {
	s.faultsOn = false
	s.tracef("heal: faults stop, all nodes restart, partitions end")
	clear(s.net.cut)
	for _, c := range s.clients {
		c.quietTil, c.quietTo = 0, 0
	}
	for _, r := range s.replicas {
		if r.core == nil {
			r.downUntil = s.now
		}
	}
	for _, sh := range s.shards {
		if sh.core == nil {
			sh.downUntil = s.now
		}
	}
}

func (s *sim) injectFaults() {
	if s.now == s.forcedFaultAt {
		s.forcedFault()
	}
	if s.dedupOn {
		if s.drng.IntN(800) == 0 {
			s.quietClient()
		}
		s.wake()
	}
	// Crash a sequencing replica when that keeps a replica holding the
	// last active view's state alive (memory mode loses a crashed
	// replica's log; the protocol tolerates all but the last).
	if s.crashBudget > 0 && s.rng.IntN(s.replicaCrashOdds()) == 0 {
		victim := s.replicas[s.rng.IntN(len(s.replicas))]
		if victim.core != nil && (s.opts.Durability == seq.Fsync || s.canCrashReplica(victim)) {
			s.crashBudget--
			s.res.Crashes++
			victim.downUntil = s.now + int64(20+s.rng.IntN(200))
			s.tracef("crash replica %d (%s of view %d); restarts at t=%d", victim.id, victim.core.Role(), victim.core.View(), victim.downUntil)
			s.harvest(victim)
			victim.core = nil
			if s.opts.Durability == seq.Memory {
				victim.wal, victim.fullWAL = nil, nil
			}
			s.reportGone(victim.id)
		}
	}
	if s.crashBudget > 0 && s.rng.IntN(500) == 0 {
		victim := s.shards[s.rng.IntN(len(s.shards))]
		if victim.core != nil {
			s.crashBudget--
			s.res.Crashes++
			victim.downUntil = s.now + int64(10+s.rng.IntN(150))
			s.tracef("crash shard %d (keeps %d entries); restarts at t=%d", victim.id, len(victim.store.entries), victim.downUntil)
			victim.core = nil
			victim.store.crash()
		}
	}
	// A false crash report: a liveness connection reset by the network.
	if s.rng.IntN(1500) == 0 {
		a, b := s.replicas[s.rng.IntN(len(s.replicas))], s.replicas[s.rng.IntN(len(s.replicas))]
		if a != b {
			s.res.FalseGone++
			s.tracef("false crash report: replica %d told that replica %d ended", b.id, a.id)
			s.net.send(msg.Envelope{From: a.id, To: b.id, Msg: msg.PeerGone{}}, s.now, true)
		}
	}
	if s.rng.IntN(700) == 0 {
		var nodes []msg.NodeID
		for _, r := range s.replicas {
			nodes = append(nodes, r.id)
		}
		for _, c := range s.clients {
			nodes = append(nodes, c.id)
		}
		nodes = append(nodes, s.layout.Shards...)
		n := nodes[s.rng.IntN(len(nodes))]
		until := s.now + int64(10+s.rng.IntN(120))
		s.net.cut[n] = until
		s.res.Partitions++
		s.tracef("partition: node %d isolated until t=%d", n, until)
	}
}

// forcedFault crashes the leader, a follower or a shard, or isolates a
// replica, so that every seed exercises at least one failure.
func (s *sim) forcedFault() {
	switch s.rng.IntN(4) {
	case 0, 1:
		// The leader half the time, else any replica.
		var victim *replicaSlot
		for _, r := range s.replicas {
			if r.core != nil && r.core.Role() == seq.RoleLeader && s.rng.IntN(2) == 0 {
				victim = r
			}
		}
		if victim == nil {
			victim = s.replicas[s.rng.IntN(len(s.replicas))]
		}
		if victim.core != nil && (s.opts.Durability == seq.Fsync || s.canCrashReplica(victim)) {
			s.res.Crashes++
			victim.downUntil = s.now + int64(20+s.rng.IntN(200))
			s.tracef("crash replica %d (%s of view %d); restarts at t=%d", victim.id, victim.core.Role(), victim.core.View(), victim.downUntil)
			s.harvest(victim)
			victim.core = nil
			if s.opts.Durability == seq.Memory {
				victim.wal, victim.fullWAL = nil, nil
			}
			s.reportGone(victim.id)
		}
	case 2:
		victim := s.shards[s.rng.IntN(len(s.shards))]
		if victim.core != nil {
			s.res.Crashes++
			victim.downUntil = s.now + int64(10+s.rng.IntN(150))
			s.tracef("crash shard %d (keeps %d entries); restarts at t=%d", victim.id, len(victim.store.entries), victim.downUntil)
			victim.core = nil
			victim.store.crash()
		}
	default:
		n := s.replicas[s.rng.IntN(len(s.replicas))].id
		until := s.now + int64(30+s.rng.IntN(120))
		s.net.cut[n] = until
		s.res.Partitions++
		s.tracef("partition: replica %d isolated until t=%d", n, until)
	}
}

func (s *sim) canCrashReplica(victim *replicaSlot) bool {
	for _, r := range s.replicas {
		if r == victim || r.core == nil || !s.coordView.HasMember(r.id) {
			continue
		}
		v := r.core.View()
		if v == s.coordView.Number || (v < s.coordView.Number && r.core.LastStartedView() < s.coordView.Number) {
			return true
		}
	}
	return false
}

func (s *sim) restartDue() {
	for _, r := range s.replicas {
		if r.core == nil && r.downUntil <= s.now {
			cfg := s.replicaConfig(r.id)
			if s.opts.Durability == seq.Fsync {
				r.core = seq.Recover(cfg, r.wal)
				s.checkCompactedRecovery(r, cfg)
			} else {
				r.core = seq.New(cfg, r.lastStartedView)
			}
			s.tracef("restart replica %d (last started view %d, memory lost=%v)", r.id, r.lastStartedView, s.opts.Durability == seq.Memory)
			s.announce(r.id)
		}
	}
	for _, sh := range s.shards {
		if sh.core == nil && sh.downUntil <= s.now {
			sh.core = s.newShard(sh)
			s.tracef("restart shard %d (epoch %d, stable-gp %d)", sh.id, sh.store.meta.Epoch, sh.store.meta.StableGP)
			s.announce(sh.id)
		}
	}
}

// reportGone tells every other replica that replica id's process ended,
// as their meshes do when its liveness connection closes (msg.PeerGone).
// The network may drop a report (the mesh had no connection up) or delay
// it past the replica's restart.
func (s *sim) reportGone(id msg.NodeID) {
	for _, r := range s.replicas {
		if r.id != id {
			s.net.send(msg.Envelope{From: id, To: r.id, Msg: msg.PeerGone{}}, s.now, true)
		}
	}
}

// announce tells every other node that id has a new link, as the live
// mesh does when a restarted node dials its peers (msg.LinkUp).
func (s *sim) announce(id msg.NodeID) {
	var all []msg.NodeID
	for _, r := range s.replicas {
		all = append(all, r.id)
	}
	for _, sh := range s.shards {
		all = append(all, sh.id)
	}
	for _, c := range s.clients {
		all = append(all, c.id)
	}
	for _, to := range all {
		if to != id {
			s.net.send(msg.Envelope{From: id, To: to, Msg: msg.LinkUp{}}, s.now, false)
		}
	}
}

// ---- message flow ----

func (s *sim) deliver() {
	for {
		env, ok := s.net.due(s.now)
		if !ok {
			s.processDirty()
			return
		}
		if s.faultsOn && s.net.blocked(env, s.now) {
			s.net.dropped++
			continue
		}
		s.stepNode(env)
	}
}

// deferReady reports whether the node just stepped keeps its Ready for
// later (it is processed at the end of this tick's deliveries).
func (s *sim) deferReady(id msg.NodeID) bool {
	if !s.batchSteps || s.rng.IntN(2) == 0 {
		return false
	}
	if !slices.Contains(s.dirty, id) {
		s.dirty = append(s.dirty, id)
	}
	return true
}

// processDirty carries out the Ready of every node that deferred it.
func (s *sim) processDirty() {
	for len(s.dirty) > 0 {
		id := s.dirty[0]
		s.dirty = s.dirty[1:]
		switch {
		case id >= clientBase:
			s.processClient(s.clients[id-clientBase])
		case id >= shardBase:
			if sh := s.shards[id-shardBase]; sh.core != nil {
				s.processShard(sh)
			}
		default:
			if r := s.replicas[id-replicaBase]; r.core != nil {
				s.processReplica(r)
			}
		}
	}
}

var debugReplica msg.NodeID

func (s *sim) stepNode(env msg.Envelope) {
	if debugReplica != 0 && env.To == debugReplica {
		s.tracef("DEBUG in %s", env)
	}
	switch {
	case env.To == msg.Coordinator:
		s.coordinator(env)
	case env.To >= clientBase:
		if m, ok := env.Msg.(msg.AppendReject); ok && m.Reason == msg.RejectBusy {
			s.res.Busy++
		}
		c := s.clients[env.To-clientBase]
		if c.quiet() {
			s.net.dropped++ // a stalled process: its link drops what it cannot take
			return
		}
		c.core.Step(env)
		if !s.deferReady(env.To) {
			s.processClient(c)
		}
	case env.To >= shardBase:
		sh := s.shards[env.To-shardBase]
		if sh.core == nil {
			return
		}
		sh.core.Step(env)
		if !s.deferReady(env.To) {
			s.processShard(sh)
		}
	default:
		r := s.replicas[env.To-replicaBase]
		if r.core == nil {
			return
		}
		r.core.Step(env)
		if !s.deferReady(env.To) {
			s.processReplica(r)
		}
	}
}

func (s *sim) coordinator(env msg.Envelope) {
	var resp msg.CoordResp
	switch m := env.Msg.(type) {
	case msg.CoordGet:
		resp = msg.CoordResp{ReqID: m.ReqID, OK: true, Rev: s.coordRev, View: s.coordView.Clone()}
	case msg.CoordCAS:
		if m.ExpectRev == s.coordRev {
			old := s.coordView
			s.coordView = m.View.Clone()
			s.coordRev++
			resp = msg.CoordResp{ReqID: m.ReqID, OK: true, Rev: s.coordRev, View: s.coordView.Clone()}
			if m.View.Active() {
				s.res.ViewChanges++
				s.tracef("view %d active: members %v, leader %d, start-gp %d (was view %d)", m.View.Number,
					m.View.Members, m.View.Leader, m.View.StartGP, old.Number)
			} else {
				s.tracef("view change to epoch %d claimed by replica %d, new members %v",
					m.View.Change.Epoch, m.View.Change.Flusher, m.View.Change.NewMembers)
			}
		} else {
			resp = msg.CoordResp{ReqID: m.ReqID, OK: false, Rev: s.coordRev, View: s.coordView.Clone()}
		}
	default:
		return
	}
	s.net.send(msg.Envelope{From: msg.Coordinator, To: env.From, Msg: resp}, s.now, s.faultsOn)
}

func (s *sim) tickAll() {
	for _, r := range s.replicas {
		if r.core != nil {
			r.core.Tick()
			s.processReplica(r)
		}
	}
	for _, sh := range s.shards {
		if sh.core != nil {
			s.processShard(sh) // shards have no timers
		}
	}
	for _, c := range s.clients {
		if c.quiet() {
			continue
		}
		c.core.Tick()
		s.processClient(c)
	}
}

func (s *sim) processReplica(r *replicaSlot) {
	rd := r.core.Ready()
	if debugReplica != 0 && r.id == debugReplica {
		for _, m := range rd.Messages {
			s.tracef("DEBUG out %s", m)
		}
	}
	for _, p := range rd.Persist {
		if p.Kind == seq.PersistStartView {
			r.lastStartedView = max(r.lastStartedView, p.View.Number)
		}
		r.wal = append(r.wal, p)
		r.fullWAL = append(r.fullWAL, p)
		if p.Kind == seq.PersistCheckpoint && !s.opts.WALBugs.KeepNothingBeforeCheckpoint {
			// As wal.Pebble does: the checkpoint's batch deletes what
			// precedes it.
			r.wal = append(r.wal[:0:0], r.wal[len(r.wal)-1:]...)
		}
		if p.Kind == seq.PersistCheckpoint && s.opts.WALBugs.KeepNothingBeforeCheckpoint {
			r.wal = nil // truncates past the checkpoint
		}
	}
	for _, v := range r.core.Violations() {
		if !s.opts.ExternalChecksOnly {
			s.violate("%s", v)
		}
	}
	if r.core.Role() == seq.RoleLeader && r.core.StableGP() > s.globalStable {
		s.globalStable = r.core.StableGP()
	}
	for _, m := range rd.Messages {
		s.net.send(m, s.now, s.faultsOn)
	}
}

func (s *sim) processShard(sh *shardSlot) {
	rd := sh.core.Ready()
	lazy := len(rd.Writes) > 0
	for _, w := range rd.Writes {
		lazy = lazy && w.Lazy
	}
	if lazy {
		// As the live driver does: a round of only lazy writes is not
		// synced, and a crash may lose it.
		sh.store.applyLazy(rd.Writes)
	} else {
		for _, w := range rd.Writes {
			if err := sh.store.Apply(w); err != nil {
				s.violate("shard %d apply: %v", sh.id, err)
			}
		}
	}
	for _, v := range sh.core.Violations() {
		if !s.opts.ExternalChecksOnly {
			s.violate("%s", v)
		}
	}
	for _, m := range rd.Messages {
		s.net.send(m, s.now, s.faultsOn)
	}
}

// checkShardWrite runs before every shard write: a position that a client
// read, or that is stable, must never change.
func (s *sim) checkShardWrite(pos uint64, old msg.Entry, had bool, nw *msg.Entry) {
	if v, read := s.readValues[pos]; read && (nw == nil || nw.Record.ID != v) {
		s.violate("position %d was read as %v and is now being changed (new %v)", pos, v, nw)
		return
	}
	if pos <= s.globalStable && had && (nw == nil || nw.Record.ID != old.Record.ID) {
		s.violate("stable position %d (stable-gp %d) changes from %v", pos, s.globalStable, old.Record.ID)
	}
}

func (s *sim) processClient(c *clientSlot) {
	rd := c.core.Ready()
	for _, m := range rd.Messages {
		s.net.send(m, s.now, s.faultsOn)
	}
	for _, cp := range rd.Completions {
		s.event++
		switch cp.Kind {
		case clientcore.CompleteAppend:
			if i, ok := c.inflight[cp.ID]; ok {
				delete(c.inflight, cp.ID)
				if cp.Unknown {
					// Stored at most once, maybe not at all: the history
					// keeps it pending (the final log may or may not hold
					// it, once).
					s.tracef("client %d: append %v outcome unknown", c.id, cp.ID)
					continue
				}
				s.history[i].ret = s.event
				s.res.Acked++
			}
		case clientcore.CompleteRead:
			i, ok := c.reads[cp.ReqID]
			if !ok {
				continue
			}
			delete(c.reads, cp.ReqID)
			if cp.Err != msg.ReadOK {
				s.history[i].kind = 0 // not a successful read: drop from the history
				continue
			}
			s.res.ReadEntries += len(cp.Entries)
			for k, e := range cp.Entries {
				if e.Pos > s.globalStable {
					s.violate("read returned position %d above stable-gp %d", e.Pos, s.globalStable)
				}
				if v, seen := s.readValues[e.Pos]; seen && v != e.Record.ID {
					s.violate("position %d read as %v, earlier as %v", e.Pos, e.Record.ID, v)
				}
				s.readValues[e.Pos] = e.Record.ID
				if k == 0 {
					s.history[i].value = e.Record.ID
					s.history[i].pos = e.Pos
				}
			}
			s.history[i].ret = s.event
		case clientcore.CompleteTail:
			i, ok := c.tails[cp.ReqID]
			if !ok {
				continue
			}
			delete(c.tails, cp.ReqID)
			if cp.Tail > s.globalStable {
				s.violate("checkTail returned %d above stable-gp %d", cp.Tail, s.globalStable)
			}
			if cp.Tail < c.lastTail {
				s.violate("client %d: checkTail went back from %d to %d", c.id, c.lastTail, cp.Tail)
			}
			c.lastTail = cp.Tail
			s.history[i].tail = cp.Tail
			s.history[i].ret = s.event
		}
	}
}

// ---- workload ----

func (s *sim) workload() {
	for ci, c := range s.clients {
		if c.quiet() || c.startAt > s.now {
			continue
		}
		if ci >= s.opts.Clients {
			// A short-lived client: appends its few records, no reads.
			if c.issued < c.budget && s.drng.IntN(6) == 0 {
				c.issued++
				s.res.Appends++
				id := c.core.Append(fmt.Appendf(nil, "c%d-%d", c.id, c.issued))
				s.event++
				c.inflight[id] = len(s.history)
				s.history = append(s.history, op{kind: opAppend, client: ci, id: id, call: s.event})
			}
			s.processClient(c)
			continue
		}
		if s.rng.IntN(6) == 0 && c.issued < c.budget && len(c.inflight) < s.opts.Window {
			n := 1 + s.rng.IntN(3)
			for range n {
				if c.issued >= c.budget || len(c.inflight) >= s.opts.Window {
					break
				}
				c.issued++
				s.res.Appends++
				data := fmt.Appendf(nil, "c%d-%d", c.id, c.issued)
				id := c.core.Append(data)
				s.event++
				c.inflight[id] = len(s.history)
				s.history = append(s.history, op{kind: opAppend, client: ci, id: id, call: s.event})
			}
		}
		if s.rng.IntN(15) == 0 && len(c.reads) < 4 {
			hi := max(s.globalStable, 1) + uint64(s.rng.IntN(4)) // sometimes above stable: slow path
			pos := 1 + s.rng.Uint64N(hi)
			req := c.core.Read(pos, uint32(1+s.rng.IntN(8)))
			s.res.Reads++
			s.event++
			c.reads[req] = len(s.history)
			s.history = append(s.history, op{kind: opRead, client: ci, pos: pos, call: s.event})
		}
		if s.rng.IntN(40) == 0 && len(c.tails) == 0 {
			req := c.core.CheckTail()
			s.res.Tails++
			s.event++
			c.tails[req] = len(s.history)
			s.history = append(s.history, op{kind: opTail, client: ci, call: s.event})
		}
		s.processClient(c)
	}
}

// ---- final checks ----

func (s *sim) finalChecks() {
	// Read the whole log back from the shards' storage.
	var tail uint64
	for _, sh := range s.shards {
		tail = max(tail, sh.store.meta.StableGP)
	}
	s.res.FinalTail = tail
	where := make(map[msg.RecordID]uint64)
	for pos := uint64(1); pos <= tail; pos++ {
		sh := s.shards[s.layout.ShardIndex(pos)]
		e, ok := sh.store.entries[pos]
		if !ok {
			s.violate("final log: stable position %d missing", pos)
			continue
		}
		if prev, dup := where[e.Record.ID]; dup {
			s.violate("final log: record %v at positions %d and %d", e.Record.ID, prev, pos)
		}
		where[e.Record.ID] = pos
		if pos <= 5 || pos+3 > tail {
			s.res.Sample = append(s.res.Sample, e)
		}
		if v, read := s.readValues[pos]; read && v != e.Record.ID {
			s.violate("final log: position %d holds %v but was read as %v", pos, e.Record.ID, v)
		}
	}
	// Every acknowledged append is in the log, exactly once.
	for i := range s.history {
		o := &s.history[i]
		if o.kind != opAppend {
			continue
		}
		pos, ok := where[o.id]
		if o.ret != 0 && !ok {
			s.violate("acknowledged append %v is not in the log", o.id)
		}
		o.pos = pos
	}
	// Real-time order: if A completed before B started, pos(A) < pos(B).
	type ev struct {
		t     int64
		isRet bool
		pos   uint64
		id    msg.RecordID
	}
	var evs []ev
	for _, o := range s.history {
		if o.kind == opAppend && o.ret != 0 && o.pos != 0 {
			evs = append(evs, ev{t: o.call, pos: o.pos, id: o.id}, ev{t: o.ret, isRet: true, pos: o.pos, id: o.id})
		}
	}
	slices.SortFunc(evs, func(a, b ev) int { return int(a.t - b.t) })
	var maxDone uint64
	var maxDoneID msg.RecordID
	for _, e := range evs {
		if e.isRet {
			if e.pos > maxDone {
				maxDone, maxDoneID = e.pos, e.id
			}
		} else if e.pos <= maxDone {
			s.violate("append %v started after %v completed but got position %d <= %d", e.id, maxDoneID, e.pos, maxDone)
		}
	}
	if len(s.res.Violations) == 0 {
		s.res.Checked = s.checkLinearizable()
	}
}

// replicaCrashOdds is the per-tick 1-in-N chance of a replica crash. With
// fsync durability every replica may crash, so crashes come more often.
func (s *sim) replicaCrashOdds() int {
	if s.opts.Durability == seq.Fsync {
		return 120
	}
	return 250
}

// checkCompactedRecovery checks that the replica just recovered from its
// compacted WAL is in the state a recovery from every operation it ever
// persisted (checkpoints left out) gives, up to the stable positions the
// checkpoints let go of.
func (s *sim) checkCompactedRecovery(r *replicaSlot, cfg seq.Config) {
	if len(r.wal) == len(r.fullWAL) {
		return
	}
	s.res.CompactedRecoveries++
	got := r.core.Checkpoint()
	// The reference replays every operation but the checkpoints.
	full := slices.DeleteFunc(slices.Clone(r.fullWAL), func(op seq.PersistOp) bool { return op.Kind == seq.PersistCheckpoint })
	want := seq.Recover(cfg, full).Checkpoint()
	stable := max(got.StableGP, want.StableGP)
	if d := diffCheckpoints(normalise(got, stable), normalise(want, stable)); d != "" {
		s.violate("replica %d recovered from its compacted WAL (%d of %d ops) differs from its full WAL's recovery: %s",
			r.id, len(r.wal), len(r.fullWAL), d)
	}
}

// normalise drops the ordered entries at or below stable.
func normalise(cp seq.Checkpoint, stable uint64) seq.Checkpoint {
	cp.StableGP = stable
	cp.Ordered = slices.DeleteFunc(cp.Ordered, func(e msg.Entry) bool { return e.Pos <= stable })
	return cp
}

func diffCheckpoints(a, b seq.Checkpoint) string {
	switch {
	case a.View.Number != b.View.Number || a.View.Leader != b.View.Leader || !slices.Equal(a.View.Members, b.View.Members) ||
		a.View.StartGP != b.View.StartGP:
		return fmt.Sprintf("view %+v, want %+v", a.View, b.View)
	case a.Sealed != b.Sealed:
		return fmt.Sprintf("sealed %v, want %v", a.Sealed, b.Sealed)
	case a.LastOrderedGP != b.LastOrderedGP:
		return fmt.Sprintf("last-ordered-gp %d, want %d", a.LastOrderedGP, b.LastOrderedGP)
	case fmt.Sprint(a.Dedup) != fmt.Sprint(b.Dedup):
		return fmt.Sprintf("dedup marks %v, want %v", a.Dedup, b.Dedup)
	case fmt.Sprint(a.Ordered) != fmt.Sprint(b.Ordered):
		return fmt.Sprintf("ordered %v, want %v", a.Ordered, b.Ordered)
	case fmt.Sprint(a.Unordered) != fmt.Sprint(b.Unordered):
		return fmt.Sprintf("unordered %v, want %v", a.Unordered, b.Unordered)
	}
	return ""
}
