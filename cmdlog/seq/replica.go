// Package seq is the sequencing layer of the lazily ordered log (LazyLog's
// Erwin black-box design) as a pure state machine: a Replica accepts
// appends in its view, the view's leader orders them in the background, and
// any surviving replica can run a view change. Replica does no I/O, starts
// no goroutines and reads no clock: drivers feed it messages with Step and
// logical time with Tick, then carry out its Ready (persist, then send).
package seq

import (
	"fmt"
	"slices"

	"github.com/anoptic/broadside/cmdlog/dedup"
	"github.com/anoptic/broadside/cmdlog/msg"
)

// Durability selects when a replica acknowledges an append.
type Durability uint8

const (
	// Memory acknowledges once the record is in the replica's memory (as in
	// the LazyLog paper): an acknowledged append survives as long as one
	// replica of the view that acknowledged it survives.
	Memory Durability = iota
	// Fsync acknowledges only after the record is in the replica's
	// write-ahead log on disk (the driver syncs Ready.Persist before
	// sending Ready.Messages): an acknowledged append survives the crash of
	// every replica.
	Fsync
)

// Config parameterises a Replica. Times are in ticks.
type Config struct {
	ID msg.NodeID
	// Layout maps positions to shards.
	Layout msg.Layout
	// Durability selects memory or fsync acknowledgement.
	Durability Durability
	// BatchSize caps the records the leader orders in one batch.
	BatchSize int
	// MaxInflightBatches caps ordering batches in flight (pipelining).
	MaxInflightBatches int
	// HeartbeatTicks is the leader's heartbeat interval.
	HeartbeatTicks int
	// SuspectTicks: a peer silent this long is considered failed.
	SuspectTicks int
	// RetryTicks: unacknowledged messages are resent after this long.
	RetryTicks int
	// TakeoverTicks: a view change that made no visible progress this long
	// may be taken over by another surviving replica.
	TakeoverTicks int
	// Bugs injects known protocol bugs, to prove that the simulator's
	// checker catches them. Never set outside tests.
	Bugs Bugs
}

// Bugs are deliberately wrong behaviours for checker validation.
type Bugs struct {
	// StableBeforeFollowerGC advances stable-gp as soon as shards acked a
	// batch, without waiting for followers to GC it.
	StableBeforeFollowerGC bool
	// ForgetDedup starts every view with empty deduplication state, so a
	// client's retry in the new view is stored a second time.
	ForgetDedup bool
	// FlushOnlyUnordered makes a view-change flush write only the unordered
	// log, not the ordered-but-unstable records, so it cannot repair what
	// an abandoned flush wrote.
	FlushOnlyUnordered bool
}

func (c *Config) applyDefaults() {
	if c.BatchSize <= 0 {
		c.BatchSize = 256
	}
	c.BatchSize = min(c.BatchSize, maxMessageEntries)
	if c.MaxInflightBatches <= 0 {
		c.MaxInflightBatches = 4
	}
	if c.HeartbeatTicks <= 0 {
		c.HeartbeatTicks = 2
	}
	if c.SuspectTicks <= 0 {
		c.SuspectTicks = 20
	}
	if c.RetryTicks <= 0 {
		c.RetryTicks = 4
	}
	if c.TakeoverTicks <= 0 {
		c.TakeoverTicks = 3 * c.SuspectTicks
	}
}

// PersistKind tags a write-ahead log operation.
type PersistKind uint8

const (
	// PersistStartView: the replica started view View.Number. Persisted in
	// every durability mode, so that a replica that lost its memory never
	// rejoins a view it already served.
	PersistStartView PersistKind = iota + 1
	// PersistRecords: records appended to the unordered log (fsync mode).
	PersistRecords
	// PersistGC: a GC applied by a follower or the leader (fsync mode).
	PersistGC
	// PersistSeal: the current view was sealed (fsync mode).
	PersistSeal
)

// PersistOp is one write-ahead log operation.
type PersistOp struct {
	Kind    PersistKind
	View    msg.ViewRecord // PersistStartView
	Records []msg.Record   // PersistRecords
	GC      msg.GC         // PersistGC
}

// Ready is the work a Replica asks its driver to do: make Persist durable,
// then send Messages.
type Ready struct {
	Persist  []PersistOp
	Messages []msg.Envelope
}

// Role is what a replica does in its view.
type Role uint8

const (
	// RoleNone: the replica serves no view (new, restarted after losing
	// memory, or removed from the view).
	RoleNone Role = iota
	// RoleFollower: a member of the active view.
	RoleFollower
	// RoleLeader: the member that orders the view's records.
	RoleLeader
)

func (r Role) String() string {
	switch r {
	case RoleFollower:
		return "follower"
	case RoleLeader:
		return "leader"
	}
	return "none"
}

// Replica is one sequencing replica.
type Replica struct {
	cfg  Config
	now  int64
	role Role

	// The view this replica serves (Number 0: none).
	view    msg.ViewRecord
	viewRev uint64
	sealed  bool
	// lastStartedView is the highest view this replica ever started
	// (persisted in every mode).
	lastStartedView uint64

	log           []msg.Record // unordered log, arrival order
	dedup         dedup.Table
	lastOrderedGP uint64
	// ordered holds the records at positions stableGP+1..lastOrderedGP,
	// as the leader ordered them. A flush rewrites them, which repairs
	// whatever an abandoned flush of a failed view change wrote there.
	ordered []msg.Entry
	// pendingGC is a GC waiting for records that have not arrived yet: a
	// follower acknowledges a GC only when it holds every record in it.
	pendingGC *msg.GC

	// Leader state.
	nextGP   uint64 // highest position assigned to a batch
	assigned int    // records at the front of log in in-flight batches
	// stableGP is the leader's stable-gp; on followers, the highest the
	// leader announced.
	stableGP        uint64
	batches         []*batch
	batchCounter    uint64
	peerContact     map[msg.NodeID]int64
	lastHeartbeat   int64
	tails           []parkedTail
	lastJoinHandled int64

	// Follower state.
	leaderContact int64

	// What this replica knows of the coordinator's record.
	seen         msg.ViewRecord
	seenRev      uint64
	seenChangeAt int64 // tick at which the current seen change was first seen
	coordReq     uint64
	coordPurpose coordPurpose
	coordSentAt  int64
	pendingCAS   msg.CoordCAS
	lastPoll     int64
	lastJoin     int64

	// View change run by this replica (flusher), nil if none.
	flush *flushState

	ready      Ready
	violations []string

	// Counters for metrics.
	batchesOrdered, recordsOrdered uint64
	viewChanges                    uint64
}

type coordPurpose uint8

const (
	coordPoll coordPurpose = iota + 1
	coordClaim
	coordActivate
)

type batch struct {
	id        uint64
	from, to  uint64
	records   []msg.Record
	shards    map[msg.NodeID]bool // shard -> acked
	gcAcks    map[msg.NodeID]bool // follower -> acked
	stored    bool
	gcSent    bool
	gcAt      int64
	lastSent  int64
	resends   int // retransmissions so far: the interval doubles with each
	stableSet bool
}

type parkedTail struct {
	from  msg.NodeID
	reqID uint64
	tail  uint64
}

// flushChunk is one Store of a flush: a run of entries for one shard,
// small enough for one message.
type flushChunk struct {
	shard   msg.NodeID
	entries []msg.Entry
	acked   bool
}

// flushBatchBase numbers flush chunks (batch ids of Store), apart from the
// leader's ordering batches.
const flushBatchBase = 1 << 62

// Message size caps: every message stays well inside the codec's limits
// (16 MiB, 65536 items) whatever the record sizes.
const (
	maxMessageBytes   = 4 << 20
	maxMessageEntries = 8192
)

type flushState struct {
	phase      coordPurpose // coordClaim, then flushing (0), then coordActivate
	flushing   bool
	epoch      uint64
	claimRev   uint64
	newMembers []msg.NodeID
	entries    []msg.Entry
	tail       uint64
	chunks     []flushChunk
	lastSent   int64
	target     msg.ViewRecord // record written at activation
}

// New returns a replica with no state. lastStartedView is the persisted
// number of the last view it started (0 for a brand-new replica); it will
// only start views above it, so a replica that lost its memory never serves
// a view it already acknowledged appends in.
func New(cfg Config, lastStartedView uint64) *Replica {
	cfg.applyDefaults()
	return &Replica{
		cfg:             cfg,
		lastStartedView: lastStartedView,
		dedup:           dedup.NewTable(),
		peerContact:     make(map[msg.NodeID]int64),
		lastPoll:        -1 << 40,
		lastJoin:        -1 << 40,
		lastJoinHandled: -1 << 40,
	}
}

// Recover rebuilds a replica from its write-ahead log (fsync mode). The
// replica resumes the last view it started with the records it persisted.
func Recover(cfg Config, wal []PersistOp) *Replica {
	r := New(cfg, 0)
	for _, op := range wal {
		switch op.Kind {
		case PersistStartView:
			r.lastStartedView = op.View.Number
			if cfg.Durability == Fsync {
				r.resetToView(op.View, 0)
			}
		case PersistRecords:
			for _, rec := range op.Records {
				if r.dedup.Add(rec.ID) {
					r.log = append(r.log, rec)
				}
			}
		case PersistGC:
			r.applyGC(op.GC)
		case PersistSeal:
			r.sealed = true
		}
	}
	if r.role == RoleLeader {
		// Resume as a follower-like sealed member: in-flight batches were
		// lost; a view change will rebuild a consistent leader.
		r.sealed = true
	}
	return r
}

// ID returns the replica's node id.
func (r *Replica) ID() msg.NodeID { return r.cfg.ID }

// Role returns the replica's current role.
func (r *Replica) Role() Role { return r.role }

// View returns the number of the view the replica serves (0: none).
func (r *Replica) View() uint64 { return r.view.Number }

// Sealed reports whether the replica's view is sealed.
func (r *Replica) Sealed() bool { return r.sealed }

// StableGP returns the leader's stable-gp; on followers, the highest the
// leader announced.
func (r *Replica) StableGP() uint64 { return r.stableGP }

// LastOrderedGP returns the last position this replica knows ordered.
func (r *Replica) LastOrderedGP() uint64 { return r.lastOrderedGP }

// UnorderedLen returns the number of records in the unordered log.
func (r *Replica) UnorderedLen() int { return len(r.log) }

// Flushing reports whether the replica is running a view change.
func (r *Replica) Flushing() bool { return r.flush != nil }

// Counters reports how many batches and records this replica ordered as a
// leader, and how many view changes it completed as a flusher.
func (r *Replica) Counters() (batches, records, viewChanges uint64) {
	return r.batchesOrdered, r.recordsOrdered, r.viewChanges
}

// DurableTail returns the leader's durable tail: positions up to it are
// assigned or waiting in its unordered log (0 on followers).
func (r *Replica) DurableTail() uint64 {
	if r.role != RoleLeader {
		return 0
	}
	return r.lastOrderedGP + uint64(len(r.log))
}

// LastStartedView returns the highest view the replica started.
func (r *Replica) LastStartedView() uint64 { return r.lastStartedView }

// Violations returns (and clears) broken invariants the replica detected in
// its own state. A correct protocol never produces any.
func (r *Replica) Violations() []string {
	v := r.violations
	r.violations = nil
	return v
}

// Ready returns the accumulated work and resets it.
func (r *Replica) Ready() Ready {
	rd := r.ready
	r.ready = Ready{}
	return rd
}

func (r *Replica) send(to msg.NodeID, m msg.Message) {
	r.ready.Messages = append(r.ready.Messages, msg.Envelope{From: r.cfg.ID, To: to, Msg: m})
}

func (r *Replica) persist(op PersistOp) {
	r.ready.Persist = append(r.ready.Persist, op)
}

func (r *Replica) violate(format string, args ...any) {
	r.violations = append(r.violations, fmt.Sprintf("replica %d: ", r.cfg.ID)+fmt.Sprintf(format, args...))
}

// Tick advances logical time by one tick.
func (r *Replica) Tick() {
	r.now++
	switch {
	case r.flush != nil:
		r.tickFlush()
	case r.role == RoleLeader && !r.sealed:
		r.tickLeader()
	case r.role == RoleFollower && !r.sealed:
		if r.now-r.leaderContact > int64(r.cfg.SuspectTicks)+int64(r.cfg.ID) {
			r.startViewChange(nil, []msg.NodeID{r.view.Leader})
		}
	default:
		// No view, or sealed: watch the coordinator.
		r.tickPassive()
	}
	// Retry a lost coordinator request.
	if r.coordReq != 0 && r.now-r.coordSentAt > int64(4*r.cfg.RetryTicks) {
		r.resendCoord()
	}
	if f := r.flush; f != nil && !f.flushing && r.coordReq == 0 {
		r.violate("view change to epoch %d waits for the coordinator without a request", f.epoch)
	}
}

func (r *Replica) tickLeader() {
	if r.now-r.lastHeartbeat >= int64(r.cfg.HeartbeatTicks) {
		r.lastHeartbeat = r.now
		for _, m := range r.view.Members {
			if m != r.cfg.ID {
				r.send(m, msg.Heartbeat{View: r.view.Number, LastOrderedGP: r.lastOrderedGP, StableGP: r.stableGP})
			}
		}
		for _, s := range r.cfg.Layout.Shards {
			r.send(s, msg.StableGP{Epoch: r.view.Number, GP: r.stableGP})
		}
	}
	// Retransmit unacknowledged batch traffic.
	for _, b := range r.batches {
		// Links are reliable streams: a retransmission covers a reset link
		// or a slow peer, so back off exponentially instead of piling
		// duplicate work on a shard that is busy writing.
		if r.now-b.lastSent < int64(r.cfg.RetryTicks)<<min(b.resends, 5) {
			continue
		}
		b.lastSent = r.now
		b.resends++
		if !b.stored {
			r.sendStores(b, true)
		} else if b.gcSent {
			r.sendGC(b, true)
		}
	}
	// Suspect silent followers.
	var dead []msg.NodeID
	for _, m := range r.view.Members {
		if m == r.cfg.ID {
			continue
		}
		if r.now-r.peerContact[m] > int64(r.cfg.SuspectTicks) {
			dead = append(dead, m)
		}
	}
	// A follower that does not acknowledge the head batch's GC for long
	// (it never received a record of it) is dropped, and rejoins later.
	if len(dead) == 0 && len(r.batches) > 0 && r.batches[0].gcSent &&
		r.now-r.batches[0].gcAt > int64(2*r.cfg.SuspectTicks) {
		for _, m := range r.view.Members {
			if m != r.cfg.ID && !r.batches[0].gcAcks[m] {
				dead = append(dead, m)
			}
		}
	}
	if len(dead) > 0 {
		r.startViewChange(nil, dead)
	}
}

func (r *Replica) tickPassive() {
	if r.now-r.lastPoll >= int64(2*r.cfg.RetryTicks) && r.coordReq == 0 {
		r.lastPoll = r.now
		r.poll()
	}
	// A record that names an active view we are not (or no longer) in:
	// ask its leader to add us.
	if r.seenRev != 0 && r.seen.Active() && r.role == RoleNone &&
		(!r.seen.HasMember(r.cfg.ID) || r.seen.Number <= r.lastStartedView) &&
		r.now-r.lastJoin >= int64(4*r.cfg.RetryTicks) {
		r.lastJoin = r.now
		r.send(r.seen.Leader, msg.Join{LastStartedView: r.lastStartedView})
	}
	// Sealed member of the seen active view, and nobody is changing it, or
	// a change is stuck: take over.
	if r.role != RoleNone && r.sealed && r.seenRev != 0 && r.seen.Number == r.view.Number &&
		r.now-r.seenChangeAt > int64(r.cfg.TakeoverTicks)+int64(r.cfg.ID)*int64(r.cfg.RetryTicks) {
		var drop []msg.NodeID
		if r.seen.Change != nil && r.seen.Change.Flusher != r.cfg.ID {
			drop = append(drop, r.seen.Change.Flusher)
		}
		r.startViewChange(nil, drop)
	}
}

// Step processes one incoming message.
func (r *Replica) Step(env msg.Envelope) {
	switch m := env.Msg.(type) {
	case msg.Append:
		r.onAppend(env.From, m)
	case msg.StoreAck:
		r.onStoreAck(env.From, m)
	case msg.StoreReject:
		r.onStoreReject(env.From, m)
	case msg.GC:
		r.onGC(env.From, m)
	case msg.GCAck:
		r.onGCAck(env.From, m)
	case msg.Heartbeat:
		r.onHeartbeat(env.From, m)
	case msg.HeartbeatAck:
		if r.role == RoleLeader && m.View == r.view.Number {
			r.peerContact[env.From] = r.now
		}
	case msg.CheckTail:
		r.onCheckTail(env.From, m)
	case msg.Seal:
		r.onSeal(env.From, m)
	case msg.StartView:
		r.learn(m.View, 0)
	case msg.Join:
		r.onJoin(env.From, m)
	case msg.CoordResp:
		r.onCoordResp(m)
	}
}

func (r *Replica) onAppend(from msg.NodeID, m msg.Append) {
	ids := make([]msg.RecordID, len(m.Records))
	for i, rec := range m.Records {
		ids[i] = rec.ID
	}
	switch {
	case r.role == RoleNone:
		r.send(from, msg.AppendReject{View: r.view.Number, Reason: msg.RejectNoView, IDs: ids})
		return
	case m.View != r.view.Number:
		r.send(from, msg.AppendReject{View: r.view.Number, Reason: msg.RejectWrongView, IDs: ids})
		return
	case r.sealed:
		r.send(from, msg.AppendReject{View: r.view.Number, Reason: msg.RejectSealed, IDs: ids})
		return
	}
	var added []msg.Record
	for _, rec := range m.Records {
		if r.dedup.Add(rec.ID) {
			r.log = append(r.log, rec)
			added = append(added, rec)
		}
	}
	if len(added) > 0 && r.cfg.Durability == Fsync {
		r.persist(PersistOp{Kind: PersistRecords, Records: added})
	}
	r.send(from, msg.AppendAck{View: r.view.Number, IDs: ids})
	if len(added) > 0 && r.pendingGC != nil {
		gc := *r.pendingGC
		r.pendingGC = nil
		r.onGC(r.view.Leader, gc)
	}
	if r.role == RoleLeader {
		r.order()
	}
}

// order cuts new batches from the unassigned part of the log.
func (r *Replica) order() {
	for len(r.batches) < r.cfg.MaxInflightBatches && r.assigned < len(r.log) {
		n, bytes := 0, 0
		for r.assigned+n < len(r.log) && n < r.cfg.BatchSize && (n == 0 || bytes+len(r.log[r.assigned+n].Data) <= maxMessageBytes) {
			bytes += len(r.log[r.assigned+n].Data) + 32
			n++
		}
		r.batchCounter++
		b := &batch{
			id:       r.batchCounter,
			from:     r.nextGP + 1,
			to:       r.nextGP + uint64(n),
			records:  r.log[r.assigned : r.assigned+n : r.assigned+n],
			shards:   make(map[msg.NodeID]bool),
			lastSent: r.now,
		}
		r.assigned += n
		r.nextGP = b.to
		r.batchesOrdered++
		r.recordsOrdered += uint64(n)
		r.batches = append(r.batches, b)
		r.sendStores(b, false)
	}
}

func (r *Replica) sendStores(b *batch, retry bool) {
	per := make([][]msg.Entry, len(r.cfg.Layout.Shards))
	for i, rec := range b.records {
		pos := b.from + uint64(i)
		si := r.cfg.Layout.ShardIndex(pos)
		per[si] = append(per[si], msg.Entry{Pos: pos, Record: rec})
	}
	for si, entries := range per {
		if len(entries) == 0 {
			continue
		}
		s := r.cfg.Layout.Shards[si]
		if retry && b.shards[s] {
			continue
		}
		if !retry {
			b.shards[s] = false
		}
		r.send(s, msg.Store{Epoch: r.view.Number, Batch: b.id, Entries: entries})
	}
}

func (r *Replica) sendGC(b *batch, retry bool) {
	ids := make([]msg.RecordID, len(b.records))
	for i, rec := range b.records {
		ids[i] = rec.ID
	}
	for _, m := range r.view.Members {
		if m == r.cfg.ID || (retry && b.gcAcks[m]) {
			continue
		}
		r.send(m, msg.GC{View: r.view.Number, FromGP: b.from, ToGP: b.to, IDs: ids})
	}
}

func (r *Replica) onStoreAck(from msg.NodeID, m msg.StoreAck) {
	if f := r.flush; f != nil {
		if i := m.Batch - flushBatchBase; f.flushing && m.Epoch == f.epoch && m.Batch >= flushBatchBase &&
			i < uint64(len(f.chunks)) && f.chunks[i].shard == from {
			f.chunks[i].acked = true
			r.maybeActivate()
		}
		return
	}
	if r.role != RoleLeader || r.sealed || m.Epoch != r.view.Number {
		return
	}
	for _, b := range r.batches {
		if b.id == m.Batch {
			if _, ok := b.shards[from]; ok {
				b.shards[from] = true
			}
			break
		}
	}
	r.advance()
}

func (r *Replica) onStoreReject(_ msg.NodeID, m msg.StoreReject) {
	// A shard has seen a higher epoch: our view (or our flush) is stale.
	if f := r.flush; f != nil {
		if f.flushing && m.Epoch > f.epoch {
			r.flush = nil
			r.seal()
			r.poll()
		}
		return
	}
	if r.role == RoleLeader && m.Epoch > r.view.Number {
		r.seal()
		r.poll()
	}
}

// poll asks the coordinator for the view record, unless a request is
// already outstanding (a claim or activation must never be forgotten).
func (r *Replica) poll() {
	if r.coordReq == 0 {
		r.coordRequest(coordPoll, msg.CoordGet{})
	}
}

// advance moves batches through stored -> GC'd locally -> GC'd by followers
// -> stable, strictly in batch order.
func (r *Replica) advance() {
	for _, b := range r.batches {
		if !b.stored {
			all := true
			for _, ok := range b.shards {
				all = all && ok
			}
			if !all {
				break
			}
			b.stored = true
		}
		if !b.gcSent {
			// Local GC of the head of the log, then tell followers.
			if b.from != r.lastOrderedGP+1 {
				r.violate("batch %d starts at %d, last-ordered-gp %d", b.id, b.from, r.lastOrderedGP)
			}
			n := len(b.records)
			b.records = slices.Clone(b.records)
			for i, rec := range b.records {
				r.ordered = append(r.ordered, msg.Entry{Pos: b.from + uint64(i), Record: rec})
			}
			r.log = r.log[n:]
			r.assigned -= n
			r.lastOrderedGP = b.to
			b.gcSent = true
			b.gcAt = r.now
			b.gcAcks = make(map[msg.NodeID]bool)
			b.lastSent = r.now
			b.resends = 0
			if r.cfg.Durability == Fsync {
				r.persist(PersistOp{Kind: PersistGC, GC: r.gcOf(b)})
			}
			r.sendGC(b, false)
			if r.cfg.Bugs.StableBeforeFollowerGC {
				r.setStable(b.to)
			}
		}
	}
	// Pop batches every follower has GC'd; stable-gp follows.
	for len(r.batches) > 0 {
		b := r.batches[0]
		if !b.gcSent {
			break
		}
		all := true
		for _, m := range r.view.Members {
			if m != r.cfg.ID && !b.gcAcks[m] {
				all = false
			}
		}
		if !all {
			break
		}
		r.setStable(b.to)
		r.batches = r.batches[1:]
	}
	r.order()
}

func (r *Replica) gcOf(b *batch) msg.GC {
	ids := make([]msg.RecordID, len(b.records))
	for i, rec := range b.records {
		ids[i] = rec.ID
	}
	return msg.GC{View: r.view.Number, FromGP: b.from, ToGP: b.to, IDs: ids}
}

func (r *Replica) setStable(gp uint64) {
	if gp <= r.stableGP {
		return
	}
	r.stableGP = gp
	r.dropOrderedThrough(gp)
	for _, s := range r.cfg.Layout.Shards {
		r.send(s, msg.StableGP{Epoch: r.view.Number, GP: gp})
	}
	// Answer parked tail queries.
	kept := r.tails[:0]
	for _, t := range r.tails {
		if t.tail <= r.stableGP {
			r.send(t.from, msg.TailResp{ReqID: t.reqID, OK: true, View: r.view.Number, Tail: t.tail, StableGP: r.stableGP})
		} else {
			kept = append(kept, t)
		}
	}
	r.tails = kept
}

func (r *Replica) onGC(from msg.NodeID, m msg.GC) {
	if r.role != RoleFollower || m.View != r.view.Number || r.sealed {
		return // a sealed replica must not move last-ordered-gp
	}
	r.leaderContact = r.now
	if m.ToGP <= r.lastOrderedGP {
		r.send(from, msg.GCAck{View: r.view.Number, LastOrderedGP: r.lastOrderedGP})
		return
	}
	if m.FromGP != r.lastOrderedGP+1 || m.ToGP-m.FromGP+1 != uint64(len(m.IDs)) {
		return // a gap (the leader resends the earlier batch), or malformed
	}
	if !r.applyGC(m) {
		// Some records have not arrived yet; acknowledge once they have.
		r.pendingGC = &m
		return
	}
	if r.cfg.Durability == Fsync {
		r.persist(PersistOp{Kind: PersistGC, GC: m})
	}
	r.send(from, msg.GCAck{View: r.view.Number, LastOrderedGP: r.lastOrderedGP})
}

// applyGC moves the records of an ordered batch from the unordered log to
// the ordered entries. It changes nothing and reports false if a record of
// the batch has not arrived yet.
func (r *Replica) applyGC(m msg.GC) bool {
	at := make(map[msg.RecordID]int, len(m.IDs))
	for i, id := range m.IDs {
		at[id] = i
	}
	entries := make([]msg.Entry, len(m.IDs))
	found := 0
	for _, rec := range r.log {
		if i, ok := at[rec.ID]; ok && entries[i].Pos == 0 {
			entries[i] = msg.Entry{Pos: m.FromGP + uint64(i), Record: rec}
			found++
		}
	}
	if found != len(m.IDs) {
		return false
	}
	kept := r.log[:0]
	for _, rec := range r.log {
		if _, ok := at[rec.ID]; !ok {
			kept = append(kept, rec)
		}
	}
	clear(r.log[len(kept):])
	r.log = kept
	r.ordered = append(r.ordered, entries...)
	r.lastOrderedGP = m.ToGP
	r.pendingGC = nil
	return true
}

// dropOrderedThrough forgets ordered entries at or below a stable position.
func (r *Replica) dropOrderedThrough(gp uint64) {
	n := 0
	for n < len(r.ordered) && r.ordered[n].Pos <= gp {
		n++
	}
	if n > 0 {
		r.ordered = append(r.ordered[:0], r.ordered[n:]...)
	}
}

func (r *Replica) onGCAck(from msg.NodeID, m msg.GCAck) {
	if r.role != RoleLeader || r.sealed || m.View != r.view.Number {
		return
	}
	r.peerContact[from] = r.now
	for _, b := range r.batches {
		if b.gcSent && m.LastOrderedGP >= b.to {
			b.gcAcks[from] = true
		}
	}
	r.advance()
}

func (r *Replica) onHeartbeat(from msg.NodeID, m msg.Heartbeat) {
	if r.role != RoleFollower || m.View != r.view.Number || from != r.view.Leader {
		return
	}
	r.leaderContact = r.now
	if m.StableGP > r.stableGP && !r.sealed {
		if m.StableGP > r.lastOrderedGP {
			r.violate("leader announces stable-gp %d above this follower's last-ordered-gp %d", m.StableGP, r.lastOrderedGP)
		} else {
			r.stableGP = m.StableGP
			r.dropOrderedThrough(m.StableGP)
		}
	}
	if !r.sealed {
		r.send(from, msg.HeartbeatAck{View: r.view.Number, LastOrderedGP: r.lastOrderedGP})
	}
}

func (r *Replica) onCheckTail(from msg.NodeID, m msg.CheckTail) {
	if r.role != RoleLeader || r.sealed {
		r.send(from, msg.TailResp{ReqID: m.ReqID, OK: false, View: r.view.Number})
		return
	}
	tail := r.lastOrderedGP + uint64(len(r.log))
	if tail <= r.stableGP {
		r.send(from, msg.TailResp{ReqID: m.ReqID, OK: true, View: r.view.Number, Tail: tail, StableGP: r.stableGP})
		return
	}
	r.tails = append(r.tails, parkedTail{from: from, reqID: m.ReqID, tail: tail})
}

func (r *Replica) onSeal(from msg.NodeID, m msg.Seal) {
	if r.role == RoleNone || m.View != r.view.Number {
		return
	}
	r.seal()
	r.send(from, msg.SealAck{View: m.View})
	r.seenChangeAt = r.now
	r.poll()
}

func (r *Replica) seal() {
	if r.sealed {
		return
	}
	r.sealed = true
	r.tails = nil
	if r.cfg.Durability == Fsync {
		r.persist(PersistOp{Kind: PersistSeal})
	}
}

func (r *Replica) onJoin(from msg.NodeID, m msg.Join) {
	if r.role != RoleLeader || r.sealed || r.flush != nil {
		return
	}
	if r.view.HasMember(from) && m.LastStartedView < r.view.Number {
		// A member that has not heard of its view yet: tell it.
		r.send(from, msg.StartView{View: r.view.Clone()})
		return
	}
	if r.now-r.lastJoinHandled < int64(r.cfg.SuspectTicks) {
		return
	}
	r.lastJoinHandled = r.now
	// A member that lost its memory asks to join again: treat it as failed
	// and re-added in one change.
	r.startViewChange([]msg.NodeID{from}, nil)
}

// startViewChange seals this replica's view and claims the change at the
// coordinator, to a view of the current members plus add minus drop.
func (r *Replica) startViewChange(add, drop []msg.NodeID) {
	if r.role == RoleNone || r.flush != nil {
		return
	}
	r.seal()
	members := []msg.NodeID{r.cfg.ID}
	for _, m := range append(slices.Clone(r.view.Members), add...) {
		if m != r.cfg.ID && !slices.Contains(drop, m) && !slices.Contains(members, m) {
			members = append(members, m)
		}
	}
	// A re-joining member is dropped and added back: keep it.
	for _, a := range add {
		if !slices.Contains(members, a) {
			members = append(members, a)
		}
	}
	slices.Sort(members)
	for _, m := range r.view.Members {
		if m != r.cfg.ID {
			r.send(m, msg.Seal{View: r.view.Number})
		}
	}
	r.claim(members)
}

// claim asks the coordinator to record a change of this replica's view to
// one with the given members, flushed by this replica.
func (r *Replica) claim(members []msg.NodeID) {
	// Claim against the record we last saw, if it still describes our view;
	// otherwise against our own view record.
	base, rev := r.view, r.viewRev
	if r.seenRev > rev && r.seen.Number == r.view.Number {
		base, rev = r.seen, r.seenRev
	}
	epoch := max(base.Epoch(), r.view.Number) + 1
	claim := base.Clone()
	claim.Change = &msg.ViewChange{Epoch: epoch, Flusher: r.cfg.ID, NewMembers: members}
	r.flush = &flushState{phase: coordClaim, epoch: epoch, newMembers: members}
	r.coordRequest(coordClaim, msg.CoordCAS{ExpectRev: rev, View: claim})
}

func (r *Replica) tickFlush() {
	f := r.flush
	if f.flushing && r.now-f.lastSent >= int64(r.cfg.RetryTicks) {
		r.sendFlush(true)
	}
}

func (r *Replica) beginFlush(claimRev uint64) {
	f := r.flush
	f.claimRev = claimRev
	f.flushing = true
	f.phase = 0
	// Rewrite every position above the stable-gp we know of: first the
	// records the leader ordered (as it ordered them), then our unordered
	// log in our arrival order. Positions up to the real stable-gp get the
	// content they already have; anything above it that an abandoned
	// flush may have written is replaced, and the tail is truncated.
	f.entries = make([]msg.Entry, 0, len(r.ordered)+len(r.log))
	if !r.cfg.Bugs.FlushOnlyUnordered {
		f.entries = append(f.entries, r.ordered...)
	}
	for i, rec := range r.log {
		f.entries = append(f.entries, msg.Entry{Pos: r.lastOrderedGP + 1 + uint64(i), Record: rec})
	}
	f.tail = r.lastOrderedGP + uint64(len(r.log))
	for i, e := range f.entries {
		if want := r.stableGP + 1 + uint64(i); e.Pos != want && !r.cfg.Bugs.FlushOnlyUnordered {
			r.violate("flush entry %d at position %d, want %d (stable-gp %d, last-ordered-gp %d)", i, e.Pos, want, r.stableGP, r.lastOrderedGP)
			break
		}
	}
	r.cutFlushChunks()
	r.sendFlush(false)
}

// cutFlushChunks splits the flush into per-shard Stores of bounded size.
// Every shard gets at least one (possibly empty) chunk: each carries the
// truncation, which must reach every shard.
func (r *Replica) cutFlushChunks() {
	f := r.flush
	per := make([][]msg.Entry, len(r.cfg.Layout.Shards))
	for _, e := range f.entries {
		si := r.cfg.Layout.ShardIndex(e.Pos)
		per[si] = append(per[si], e)
	}
	f.chunks = f.chunks[:0]
	for si, s := range r.cfg.Layout.Shards {
		entries := per[si]
		for {
			n, bytes := 0, 0
			for n < len(entries) && n < maxMessageEntries && (n == 0 || bytes+len(entries[n].Record.Data) <= maxMessageBytes) {
				bytes += len(entries[n].Record.Data) + 32
				n++
			}
			f.chunks = append(f.chunks, flushChunk{shard: s, entries: entries[:n:n]})
			entries = entries[n:]
			if len(entries) == 0 {
				break
			}
		}
	}
}

func (r *Replica) sendFlush(retry bool) {
	f := r.flush
	f.lastSent = r.now
	for i, c := range f.chunks {
		if retry && c.acked {
			continue
		}
		r.send(c.shard, msg.Store{Epoch: f.epoch, Batch: flushBatchBase + uint64(i), Entries: c.entries, Truncate: true, TruncateAbove: f.tail})
	}
}

func (r *Replica) maybeActivate() {
	f := r.flush
	for _, c := range f.chunks {
		if !c.acked {
			return
		}
	}
	f.flushing = false
	f.phase = coordActivate
	f.target = msg.ViewRecord{
		Number:  f.epoch,
		Members: f.newMembers,
		Leader:  r.cfg.ID,
		StartGP: f.tail,
		Dedup:   r.dedup.Marks(),
	}
	r.coordRequest(coordActivate, msg.CoordCAS{ExpectRev: f.claimRev, View: f.target})
}

func (r *Replica) coordRequest(p coordPurpose, m msg.Message) {
	// Request ids only need to be unique per replica; mix in the tick so a
	// restarted replica does not confuse answers to its previous life.
	r.coordReq = uint64(r.now)<<20 | uint64(p)<<16 | uint64(r.cfg.ID&0xFFFF)
	r.coordPurpose = p
	r.coordSentAt = r.now
	switch m := m.(type) {
	case msg.CoordGet:
		m.ReqID = r.coordReq
		r.send(msg.Coordinator, m)
	case msg.CoordCAS:
		m.ReqID = r.coordReq
		r.send(msg.Coordinator, m)
		r.pendingCAS = m
	}
}

func (r *Replica) resendCoord() {
	r.coordSentAt = r.now
	switch r.coordPurpose {
	case coordPoll:
		r.send(msg.Coordinator, msg.CoordGet{ReqID: r.coordReq})
	default:
		r.send(msg.Coordinator, r.pendingCAS)
	}
}

func (r *Replica) onCoordResp(m msg.CoordResp) {
	if m.ReqID != r.coordReq || r.coordReq == 0 {
		return
	}
	purpose := r.coordPurpose
	r.coordReq = 0
	f := r.flush
	switch {
	case purpose == coordClaim && f != nil && f.phase == coordClaim:
		if m.View.Change != nil && m.View.Change.Flusher == r.cfg.ID && m.View.Change.Epoch == f.epoch {
			r.noteSeen(m.View, m.Rev)
			r.beginFlush(m.Rev)
			return
		}
		r.flush = nil
		if m.Rev > r.seenRev && m.View.Active() && m.View.Number == r.view.Number {
			// Our revision was stale but the view is still ours: claim again.
			r.noteSeen(m.View, m.Rev)
			r.claim(f.newMembers)
			return
		}
	case purpose == coordActivate && f != nil && f.phase == coordActivate:
		if m.View.Active() && m.View.Number == f.epoch && m.View.Leader == r.cfg.ID {
			r.flush = nil
			r.viewChanges++
			r.noteSeen(m.View, m.Rev)
			r.startView(m.View, m.Rev)
			return
		}
		r.flush = nil
	}
	r.learn(m.View, m.Rev)
}

func (r *Replica) noteSeen(v msg.ViewRecord, rev uint64) {
	if rev != 0 && rev <= r.seenRev {
		return
	}
	changed := r.seen.Epoch() != v.Epoch() || r.seenRev == 0
	if rev != 0 {
		r.seen, r.seenRev = v.Clone(), rev
	}
	if changed {
		r.seenChangeAt = r.now
	}
}

// learn updates the replica from a view record read from the coordinator
// (rev > 0) or pushed by a new leader (rev == 0).
func (r *Replica) learn(v msg.ViewRecord, rev uint64) {
	if rev != 0 {
		r.noteSeen(v, rev)
	}
	if !v.Active() {
		// A change is under way. A member of the record's last active view
		// that never started it may start it now (it acknowledged nothing in
		// it, so the record holds its whole state) and then, sealed, take
		// the change over if the flusher fails.
		if r.flush == nil && v.Number > r.view.Number && v.Number > r.lastStartedView && v.HasMember(r.cfg.ID) {
			r.startView(v, rev)
		}
		if r.role != RoleNone && v.Number == r.view.Number && !r.sealed && r.flush == nil {
			r.seal()
		}
		return
	}
	if v.Number <= r.view.Number || v.Number <= r.lastStartedView {
		return
	}
	if r.flush != nil {
		return // our own change finishes or fails by itself
	}
	if v.HasMember(r.cfg.ID) {
		r.startView(v, rev)
		return
	}
	// Removed from the view: drop the old view's state.
	r.resetToView(msg.ViewRecord{}, 0)
}

// startView makes the replica a member of active view v, with the state the
// view record carries (an empty unordered log starting at v.StartGP).
func (r *Replica) startView(v msg.ViewRecord, rev uint64) {
	r.lastStartedView = v.Number
	r.persist(PersistOp{Kind: PersistStartView, View: v.Clone()})
	r.resetToView(v, rev)
	if r.role == RoleLeader {
		for _, m := range v.Members {
			if m != r.cfg.ID {
				r.send(m, msg.StartView{View: v.Clone()})
			}
		}
		for _, s := range r.cfg.Layout.Shards {
			r.send(s, msg.StableGP{Epoch: v.Number, GP: r.stableGP})
		}
	}
}

func (r *Replica) resetToView(v msg.ViewRecord, rev uint64) {
	r.view = v.Clone()
	r.viewRev = rev
	r.sealed = false
	r.log = nil
	r.ordered = nil
	r.pendingGC = nil
	r.dedup = dedup.FromMarks(v.Dedup)
	if r.cfg.Bugs.ForgetDedup {
		r.dedup = dedup.NewTable()
	}
	r.lastOrderedGP = v.StartGP
	r.nextGP = v.StartGP
	r.stableGP = v.StartGP
	r.assigned = 0
	r.batches = nil
	r.tails = nil
	r.leaderContact = r.now
	r.lastHeartbeat = r.now - int64(r.cfg.HeartbeatTicks)
	clear(r.peerContact)
	for _, m := range v.Members {
		r.peerContact[m] = r.now
	}
	switch {
	case v.Number == 0:
		r.role = RoleNone
	case v.Leader == r.cfg.ID:
		r.role = RoleLeader
	default:
		r.role = RoleFollower
	}
}
