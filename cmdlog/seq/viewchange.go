package seq

// View changes: sealing, the claim and activation at the coordinator, the
// flush to shards, and learning and starting views.

import (
	"slices"

	"github.com/anoptic/broadside/cmdlog/dedup"
	"github.com/anoptic/broadside/cmdlog/msg"
)

type coordPurpose uint8

const (
	coordPoll coordPurpose = iota + 1
	coordClaim
	coordActivate
)

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

// poll asks the coordinator for the view record, unless a request is
// already outstanding (a claim or activation must never be forgotten).
func (r *Replica) poll() {
	if r.coordReq == 0 {
		r.coordRequest(coordPoll, msg.CoordGet{})
	}
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
	r.notifyClients(msg.RejectSealed)
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
		// The marks whose lease is live in the new view (the others
		// expire here).
		Dedup: r.dedup.Live(f.epoch, uint64(r.cfg.LeaseViews)),
	}
	if r.cfg.Bugs.EvictByRecency {
		f.target.Dedup = r.dedup.MostRecent(r.cfg.MaxClients)
	}
	if err := dedup.Fit(f.target.Dedup); err != nil {
		// Admission and the window keep the marks within the budget.
		r.violate("view %d: %v", f.epoch, err)
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
	if err := r.checkView(m.View); err != nil {
		// Refused as if lost: the request is retried, and the replica
		// never acts on a record it cannot trust.
		r.refused++
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
		r.notifyClients(msg.RejectWrongView)
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
	clear(r.gcOut)
	r.gcOut = r.gcOut[:0]
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
