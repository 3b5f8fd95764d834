package seq

// The leader: ordering batches (store to shards, GC on followers, then
// stable-gp), retransmissions, failure suspicion and tail queries.

import (
	"slices"

	"github.com/anoptic/broadside/cmdlog/msg"
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
	// sentAt is when the batch's Stores were first sent (a round-trip
	// sample when they are acknowledged without a retransmission).
	sentAt int64
}

// maxBackoff caps the doublings of a retransmission interval, so that a
// peer that comes back (a restarted shard) is served again soon.
const maxBackoff = 3

type parkedTail struct {
	from  msg.NodeID
	reqID uint64
	tail  uint64
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
	rto := r.rtt.Timeout(int64(r.cfg.RetryTicks))
	for _, b := range r.batches {
		// Links are reliable streams: a retransmission covers a reset link
		// or a slow peer, so wait for the measured round trip and back off
		// exponentially instead of piling duplicate work on a shard that
		// is busy writing.
		if r.now-b.lastSent < rto<<min(b.resends, maxBackoff) {
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
		return
	}
	// A full dedup table refused a new client: change to a view with the
	// same members, where the leases that ran out are gone.
	if r.rollWanted && r.now-r.lastRoll >= r.rollTicks() {
		r.rollWanted = false
		r.lastRoll = r.now
		r.rolls++
		r.startViewChange(nil, nil)
	}
}

// order cuts new batches from the unassigned part of the log.
func (r *Replica) order() {
	if d := int64(r.cfg.OrderDelayTicks); d > 0 && len(r.log)-r.assigned < r.cfg.BatchSize &&
		r.now-r.unassignedSince < d && len(r.tails) == 0 {
		return // wait a little for more records (Config.OrderDelayTicks)
	}
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
			sentAt:   r.now,
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
			if b.resends == 0 {
				r.rtt.Observe(r.now - b.sentAt)
			}
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
			// The GC leaves in Ready, merged with the GCs of the other
			// batches stored in this round (one message per follower).
			r.gcOut = append(r.gcOut, b)
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
		if b.resends == 0 {
			r.rtt.Observe(r.now - b.gcAt)
		}
		r.setStable(b.to)
		r.batches = r.batches[1:]
	}
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
	// Announced to shards in Ready, once for every batch that became
	// stable in this round.
	r.stableOut = msg.StableGP{Epoch: r.view.Number, GP: gp}
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

// leaderReady cuts new batches from what arrived since the last Ready and
// sends the round's coalesced GCs and stable-gp announcement: the driver
// steps every message it has before calling Ready, so one round orders
// everything that arrived together and one GC per follower covers every
// batch the shards acknowledged together.
func (r *Replica) leaderReady() {
	if len(r.gcOut) > 0 {
		r.sendMergedGC(r.gcOut)
		clear(r.gcOut)
		r.gcOut = r.gcOut[:0]
	}
	if r.stableOut.GP != 0 {
		for _, s := range r.cfg.Layout.Shards {
			r.send(s, r.stableOut)
		}
		r.stableOut = msg.StableGP{}
	}
	if r.role == RoleLeader && !r.sealed && r.flush == nil {
		r.order()
	}
}

// sendMergedGC sends the GCs of consecutive batches as few messages as the
// size cap allows.
func (r *Replica) sendMergedGC(bs []*batch) {
	for len(bs) > 0 {
		from, to := bs[0].from, bs[0].to
		n, ids := 1, len(bs[0].records)
		for n < len(bs) && bs[n].from == to+1 && ids+len(bs[n].records) <= maxMessageEntries {
			to = bs[n].to
			ids += len(bs[n].records)
			n++
		}
		gc := msg.GC{View: r.view.Number, FromGP: from, ToGP: to, IDs: make([]msg.RecordID, 0, ids)}
		for _, b := range bs[:n] {
			for _, rec := range b.records {
				gc.IDs = append(gc.IDs, rec.ID)
			}
		}
		for _, m := range r.view.Members {
			if m != r.cfg.ID {
				r.send(m, gc)
			}
		}
		bs = bs[n:]
	}
}

// onLinkUp makes the leader resend at its next tick what it waits for from
// a peer with a new link (a shard's Store acks, a follower's GC acks), with
// the retransmission backoff reset.
func (r *Replica) onLinkUp(peer msg.NodeID) {
	if r.role != RoleLeader || r.sealed {
		return
	}
	for _, b := range r.batches {
		acked, waiting := b.shards[peer]
		if (!b.stored && waiting && !acked) || (b.gcSent && r.view.HasMember(peer) && !b.gcAcks[peer]) {
			b.lastSent = r.now - 1<<30
			b.resends = 0
		}
	}
}

// onPeerGone suspects a member of the view whose process the local mesh
// saw end (msg.PeerGone): a follower its leader, a leader a follower, at
// once rather than after SuspectTicks of silence. Either way the view
// changes to one without that member, exactly as after a silence timeout,
// so a false report (a liveness connection reset by the network) costs a
// view change and nothing else; the member rejoins when it asks to.
func (r *Replica) onPeerGone(peer msg.NodeID) {
	if r.sealed || r.flush != nil || !r.view.HasMember(peer) {
		return
	}
	switch {
	case r.role == RoleFollower && peer == r.view.Leader:
		r.peerGoneActed++
		r.startViewChange(nil, []msg.NodeID{peer})
	case r.role == RoleLeader:
		r.peerGoneActed++
		r.startViewChange(nil, []msg.NodeID{peer})
	}
}
