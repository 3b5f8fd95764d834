package seq

// Followers: applying the leader's GCs and heartbeats.

import (
	"github.com/anoptic/broadside/cmdlog/msg"
)

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
	// Usually the batch is the head of our log, in the leader's order
	// (the client sent the records to every replica in the same order).
	if n := len(m.IDs); n <= len(r.log) {
		head := true
		for i, id := range m.IDs {
			if r.log[i].ID != id {
				head = false
				break
			}
		}
		if head {
			for i, rec := range r.log[:n] {
				r.ordered = append(r.ordered, msg.Entry{Pos: m.FromGP + uint64(i), Record: rec})
			}
			clear(r.log[:n])
			r.log = r.log[n:]
			r.lastOrderedGP = m.ToGP
			r.pendingGC = nil
			return true
		}
	}
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
