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
	"github.com/anoptic/broadside/cmdlog/rtt"
)

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
	stableGP uint64
	batches  []*batch
	// gcOut are batches GC'd locally in this round, whose GC leaves in
	// Ready; stableOut is the round's stable-gp announcement (GP 0: none).
	gcOut     []*batch
	stableOut msg.StableGP
	// unassignedSince is when the oldest record not in a batch arrived.
	unassignedSince int64
	// clients maps the nodes that appended recently to the tick of their
	// last Append: they are told at once when this replica's view is
	// sealed or it starts leading a new one (notifyClients), instead of
	// finding out when a retry times out.
	clients map[msg.NodeID]int64
	// rtt measures the shards' and followers' round trips.
	rtt             rtt.Estimator
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

	// walSince counts the records (and other operations) persisted since
	// the last checkpoint (Config.CheckpointRecords).
	walSince int

	ready      Ready
	violations []string
	// held is the record bytes in log and ordered as of tick heldAt.
	held        int64
	heldAt      int64
	busyRejects uint64
	// admitRejects counts appends refused busy because they named a new
	// client while the dedup table was full; rollWanted asks the leader
	// to roll its view (so leases expire), lastRoll is when it last did.
	admitRejects uint64
	rollWanted   bool
	lastRoll     int64
	rolls        uint64
	// floorRaises counts the clients' floors that moved a mark up.
	floorRaises uint64
	// refused counts messages from senders not allowed to send them.
	refused uint64
	// peerGoneActed counts the view changes msg.PeerGone started.
	peerGoneActed uint64

	// Counters for metrics.
	batchesOrdered, recordsOrdered uint64
	viewChanges                    uint64
}

// Message size caps: every message stays well inside the codec's limits
// (16 MiB, 65536 items) whatever the record sizes.
const (
	maxMessageBytes   = 4 << 20
	maxMessageEntries = 8192
)

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
		lastRoll:        -1 << 40,
	}
}

// Recover rebuilds a replica from its write-ahead log (fsync mode). The
// replica resumes the last view it started with the records it persisted.
// The WAL may start at any checkpoint (the operations before it deleted).
func Recover(cfg Config, wal []PersistOp) *Replica {
	r := New(cfg, 0)
	for _, op := range wal {
		r.walSince += opWeight(op)
		switch op.Kind {
		case PersistCheckpoint:
			if op.Checkpoint != nil {
				r.restore(*op.Checkpoint)
			}
			r.walSince = 0
		case PersistStartView:
			r.lastStartedView = op.View.Number
			if cfg.Durability == Fsync {
				r.resetToView(op.View, 0)
			}
		case PersistFloor:
			for _, f := range op.Floor {
				r.dedup.Raise(f.Client, f.Seq, r.view.Number)
			}
		case PersistRecords:
			for _, rec := range op.Records {
				if r.dedup.AddIn(rec.ID, r.view.Number) {
					r.log = append(r.log, rec)
				}
			}
		case PersistGC:
			r.applyGC(op.GC)
		case PersistSeal:
			r.sealed = true
		}
	}
	r.held = r.cfg.MaxHeldBytes // sum the recovered log at the next append
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
	r.leaderReady()
	r.maybeCheckpoint()
	rd := r.ready
	r.ready = Ready{}
	return rd
}

// maxReusedMessages caps the outbound slice ReuseReady keeps: a round
// that sent more (a view change's) does not pin its array.
const maxReusedMessages = 256

// ReuseReady tells the replica that its driver is done with rd, the
// Ready it returned last, before anything else was stepped: every
// message of rd was handed on (messages are values: a transport that
// queues one keeps the message, not rd's slice), and nothing refers to
// rd.Messages any more. The next Ready then collects its messages in the
// same backing array (cleared) instead of growing a new one, which cost an
// allocation per round, at one appender one per append on each replica.
// A driver that keeps rd's messages (a held round, a sync pipe) must not
// call it. Calling it is optional: it changes no behaviour.
func (r *Replica) ReuseReady(rd Ready) {
	if r.ready.Messages != nil || cap(rd.Messages) == 0 || cap(rd.Messages) > maxReusedMessages {
		return
	}
	clear(rd.Messages)
	r.ready.Messages = rd.Messages[:0]
}

func (r *Replica) send(to msg.NodeID, m msg.Message) {
	r.ready.Messages = append(r.ready.Messages, msg.Envelope{From: r.cfg.ID, To: to, Msg: m})
}

func (r *Replica) persist(op PersistOp) {
	r.ready.Persist = append(r.ready.Persist, op)
	r.walSince += opWeight(op)
}

// opWeight is what an operation counts towards Config.CheckpointRecords.
func opWeight(op PersistOp) int {
	return 1 + len(op.Records) + len(op.GC.IDs) + len(op.Floor)
}

// Checkpoint returns the replica's recoverable state now: what a
// PersistCheckpoint written now would hold. Tests compare recoveries with
// it.
func (r *Replica) Checkpoint() Checkpoint {
	return Checkpoint{
		View:          r.view.Clone(),
		Sealed:        r.sealed,
		Dedup:         r.dedup.Marks(),
		LastOrderedGP: r.lastOrderedGP,
		StableGP:      r.stableGP,
		Ordered:       slices.Clone(r.ordered),
		Unordered:     slices.Clone(r.log),
	}
}

// maybeCheckpoint persists a checkpoint once enough was written since the
// last one, at a point where the replica's memory is what replaying its
// WAL gives: a member of the view it last started, not running a view
// change (a replica removed from its view resets its memory without
// logging it).
func (r *Replica) maybeCheckpoint() {
	// A checkpoint re-encodes every record the replica holds, so it waits
	// until the WAL since the last one is at least twice that: each
	// operation then pays a bounded share of a checkpoint however many
	// records are unordered (under load they pile up, and checkpoints of
	// a fixed cadence would grow with them), and a recovery replays at
	// most about twice the held records beyond CheckpointRecords.
	held := len(r.ordered) + len(r.log)
	if r.cfg.Durability != Fsync || r.cfg.CheckpointRecords < 0 || r.walSince < max(r.cfg.CheckpointRecords, 2*held) ||
		r.role == RoleNone || r.flush != nil || r.view.Number != r.lastStartedView {
		return
	}
	cp := r.Checkpoint()
	if r.cfg.Bugs.CheckpointForgetsDedup {
		cp.Dedup = r.view.Clone().Dedup
	}
	r.persist(PersistOp{Kind: PersistCheckpoint, Checkpoint: &cp})
	r.walSince = 0
}

// restore resets the replica to a checkpoint (Recover).
func (r *Replica) restore(cp Checkpoint) {
	r.lastStartedView = cp.View.Number
	r.resetToView(cp.View, 0)
	r.sealed = cp.Sealed
	r.dedup = dedup.FromMarks(cp.Dedup)
	r.lastOrderedGP = cp.LastOrderedGP
	r.nextGP = cp.LastOrderedGP
	r.stableGP = cp.StableGP
	r.ordered = slices.Clone(cp.Ordered)
	r.log = slices.Clone(cp.Unordered)
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

// Step processes one incoming message.
func (r *Replica) Step(env msg.Envelope) {
	if !r.allowed(env) {
		r.refused++
		return
	}
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
	case msg.LinkUp:
		r.onLinkUp(env.From)
	case msg.PeerGone:
		r.onPeerGone(env.From)
	}
}

// recordIDs returns the ids of recs, in a slice of their own.
func recordIDs(recs []msg.Record) []msg.RecordID {
	ids := make([]msg.RecordID, len(recs))
	for i, rec := range recs {
		ids[i] = rec.ID
	}
	return ids
}

func (r *Replica) onAppend(from msg.NodeID, m msg.Append) {
	switch {
	case r.role == RoleNone:
		r.send(from, msg.AppendReject{View: r.view.Number, Reason: msg.RejectNoView, IDs: recordIDs(m.Records)})
		return
	case m.View != r.view.Number:
		r.send(from, msg.AppendReject{View: r.view.Number, Reason: msg.RejectWrongView, IDs: recordIDs(m.Records)})
		return
	case r.sealed:
		r.send(from, msg.AppendReject{View: r.view.Number, Reason: msg.RejectSealed, IDs: recordIDs(m.Records)})
		return
	}
	// Records of clients the full dedup table cannot admit are refused
	// busy, the others go on.
	shut := r.admit(m)
	recs := m.Records
	if shut != nil {
		r.admitRejects++
		recs = slices.DeleteFunc(slices.Clone(recs), func(rec msg.Record) bool { return shut[rec.ID.Client] })
	}
	if r.busy(recs) {
		r.busyRejects++
		r.send(from, msg.AppendReject{View: r.view.Number, Reason: msg.RejectBusy, IDs: recordIDs(m.Records)})
		return
	}
	r.noteClient(from)
	var raised []msg.RecordID
	for _, f := range m.Floors {
		if !shut[f.Client] && r.dedup.Raise(f.Client, f.Seq, r.view.Number) {
			raised = append(raised, f)
			r.floorRaises++
		}
	}
	if len(raised) > 0 && r.cfg.Durability == Fsync {
		r.persist(PersistOp{Kind: PersistFloor, Floor: raised})
	}
	// added counts the records new to the log; in fsync durability they
	// are also collected for the WAL (in memory durability nothing needs
	// the list).
	var added int
	var persisted []msg.Record
	var outside []msg.RecordID // not admitted, or beyond their client's window: refused busy
	if r.assigned == len(r.log) {
		r.unassignedSince = r.now
	}
	acked := make([]msg.RecordID, 0, len(m.Records))
	for _, rec := range m.Records {
		if shut[rec.ID.Client] || !r.dedup.InWindow(rec.ID, r.cfg.DedupWindow) {
			outside = append(outside, rec.ID)
			continue
		}
		acked = append(acked, rec.ID)
		if r.dedup.AddIn(rec.ID, r.view.Number) {
			r.log = append(r.log, rec)
			added++
			if r.cfg.Durability == Fsync {
				persisted = append(persisted, rec)
			}
		}
	}
	if len(persisted) > 0 {
		r.persist(PersistOp{Kind: PersistRecords, Records: persisted})
	}
	if len(acked) > 0 || len(outside) == 0 {
		r.send(from, msg.AppendAck{View: r.view.Number, IDs: acked})
	}
	if len(outside) > 0 {
		if shut == nil { // admission refusals count in admitRejects
			r.busyRejects++
		}
		r.send(from, msg.AppendReject{View: r.view.Number, Reason: msg.RejectBusy, IDs: outside})
	}
	if added > 0 && r.pendingGC != nil {
		gc := *r.pendingGC
		r.pendingGC = nil
		r.onGC(r.view.Leader, gc)
	}
	// The leader orders in Ready, with everything else that arrived.
}

// admit returns the clients of m that may not enter the dedup table (nil:
// every one may). It admits at most MaxClients clients (those the view
// record carried count), so that the marks a view record carries stay
// bounded without evicting a client whose lease is live. A client whose
// record the leader's pending GC names is always admitted (the leader
// admitted it; otherwise a full follower never catches up). A leader that
// refuses a new client asks for a view change with the same members
// (tickLeader), after which expired leases free the table.
func (r *Replica) admit(m msg.Append) map[uint64]bool {
	room := r.cfg.MaxClients - r.dedup.Len()
	var fresh, shut map[uint64]bool
	check := func(c uint64) {
		if r.dedup.Known(c) || fresh[c] || shut[c] {
			return
		}
		if room > 0 || r.cfg.Bugs.EvictByRecency || r.pendingGCNames(c) {
			if fresh == nil {
				fresh = make(map[uint64]bool)
			}
			fresh[c] = true
			room--
			return
		}
		if shut == nil {
			shut = make(map[uint64]bool)
		}
		shut[c] = true
	}
	for _, f := range m.Floors {
		check(f.Client)
	}
	for _, rec := range m.Records {
		check(rec.ID.Client)
	}
	if shut != nil && r.role == RoleLeader {
		r.rollWanted = true
	}
	return shut
}

// pendingGCNames reports whether the pending GC orders a record of client.
func (r *Replica) pendingGCNames(client uint64) bool {
	if r.pendingGC == nil {
		return false
	}
	for _, id := range r.pendingGC.IDs {
		if id.Client == client {
			return true
		}
	}
	return false
}

// rollTicks is the least time between two view changes a leader starts
// because its dedup table is full.
func (r *Replica) rollTicks() int64 { return 10 * int64(r.cfg.SuspectTicks) }

// AdmitRejects returns how many appends the replica refused busy because
// they named a new client while its dedup table was full.
func (r *Replica) AdmitRejects() uint64 { return r.admitRejects }

// FloorRaises returns how many clients' floors moved a mark up here.
func (r *Replica) FloorRaises() uint64 { return r.floorRaises }

// Rolls returns how many view changes this replica started (as leader)
// to let dedup leases expire.
func (r *Replica) Rolls() uint64 { return r.rolls }

// recordCost is what a held record counts against MaxHeldBytes.
func recordCost(rec msg.Record) int64 { return int64(len(rec.Data)) + 32 }

// busy reports whether recs would take the replica past MaxHeldBytes.
// The held bytes are summed at most once a tick and counted up between.
func (r *Replica) busy(recs []msg.Record) bool {
	var add int64
	for _, rec := range recs {
		if !r.dedup.Has(rec.ID) { // a resend of a stored record costs nothing
			add += recordCost(rec)
		}
	}
	if add == 0 {
		return false
	}
	if r.held+add <= r.cfg.MaxHeldBytes {
		r.held += add
		return false
	}
	if r.heldAt != r.now {
		r.heldAt, r.held = r.now, 0
		for _, rec := range r.log {
			r.held += recordCost(rec)
		}
		for _, e := range r.ordered {
			r.held += recordCost(e.Record)
		}
	}
	if r.held == 0 || r.held+add <= r.cfg.MaxHeldBytes {
		r.held += add
		return false
	}
	if gc := r.pendingGC; gc != nil {
		// The leader ordered records this follower is missing: take them,
		// or the follower never catches up and stable-gp stops.
		for _, rec := range recs {
			if slices.Contains(gc.IDs, rec.ID) {
				r.held += add
				return false
			}
		}
	}
	return true
}

// BusyRejects returns how many appends the replica refused as busy.
func (r *Replica) BusyRejects() uint64 { return r.busyRejects }

// clientMemoryTicks is how long a replica remembers a client that appended.
const clientMemoryTicks = 2000

func (r *Replica) noteClient(from msg.NodeID) {
	if r.clients == nil {
		r.clients = make(map[msg.NodeID]int64)
	}
	if _, known := r.clients[from]; !known && len(r.clients) >= 4096 {
		// Forget clients that went quiet, so the map stays bounded.
		for id, at := range r.clients {
			if r.now-at > clientMemoryTicks/4 {
				delete(r.clients, id)
			}
		}
	}
	r.clients[from] = r.now
}

// notifyClients tells every client that appended recently that this
// replica's view is sealed or that it now leads view r.view (an
// AppendReject without records): the client asks the coordinator for the
// view and resends what is incomplete, without waiting for a retry
// timeout. Clients are told in id order (deterministic).
func (r *Replica) notifyClients(reason msg.RejectReason) {
	ids := make([]msg.NodeID, 0, len(r.clients))
	for id, at := range r.clients {
		if r.now-at > clientMemoryTicks {
			delete(r.clients, id)
			continue
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		r.send(id, msg.AppendReject{View: r.view.Number, Reason: reason})
	}
}
