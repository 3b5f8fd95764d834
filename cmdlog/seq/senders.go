package seq

import (
	"fmt"
	"github.com/anoptic/broadside/cmdlog/dedup"
	"slices"

	"github.com/anoptic/broadside/cmdlog/msg"
)

// MaxViewNumber bounds the view numbers and epochs a replica accepts: a
// record beyond it (or one jumping further than maxViewJump past what the
// replica knows) is refused, so a forged or corrupted record cannot exhaust
// the numbering or fence every honest writer for ever.
const MaxViewNumber = 1 << 48

// maxViewJump is how far past the highest view number a replica knows a
// view record may go. View changes add one epoch each; a replica that was
// away misses at most a few thousand.
const maxViewJump = 1 << 20

// isReplica reports whether id is a configured sequencing replica:
// Config.Replicas, or, when that is empty, an id below the lowest shard
// (the cluster's numbering: replicas 1, 2, ..., shards from 101).
func (c *Config) isReplica(id msg.NodeID) bool {
	if len(c.Replicas) > 0 {
		return slices.Contains(c.Replicas, id)
	}
	if len(c.Layout.Shards) == 0 {
		return id != msg.Coordinator
	}
	return id >= 1 && id < slices.Min(c.Layout.Shards)
}

// allowed reports whether env may come from env.From: the cores act only on
// messages from the role and member allowed to send them (DESIGN.md §10).
// The mesh proves env.From (the peer's certificate names it).
func (r *Replica) allowed(env msg.Envelope) bool {
	from := env.From
	switch m := env.Msg.(type) {
	case msg.Append, msg.CheckTail, msg.LinkUp:
		// Clients, from anywhere; LinkUp is the local mesh's.
		return from != msg.Coordinator
	case msg.PeerGone:
		// The local mesh's report on another sequencing replica.
		return from != r.cfg.ID && r.cfg.isReplica(from)
	case msg.StoreAck, msg.StoreReject:
		return slices.Contains(r.cfg.Layout.Shards, from)
	case msg.GC, msg.Heartbeat:
		return r.role != RoleNone && from == r.view.Leader
	case msg.GCAck, msg.HeartbeatAck, msg.Seal:
		return r.role != RoleNone && from != r.cfg.ID && r.view.HasMember(from)
	case msg.StartView:
		// Pushed by the new view's leader, a configured replica.
		return m.View.Active() && from == m.View.Leader && r.checkView(m.View) == nil
	case msg.Join:
		return from != r.cfg.ID && r.cfg.isReplica(from)
	case msg.CoordResp:
		return from == msg.Coordinator
	}
	return false
}

// checkView validates a view record read from the coordinator or pushed
// by a leader: sane numbers, members and flusher among the configured
// replicas, the leader a member. The zero record (none written yet) is
// valid.
func (r *Replica) checkView(v msg.ViewRecord) error {
	known := max(r.view.Number, r.lastStartedView, r.seen.Epoch())
	if v.Number > MaxViewNumber || v.Epoch() > MaxViewNumber {
		return fmt.Errorf("view %d (epoch %d) beyond the maximum %d", v.Number, v.Epoch(), uint64(MaxViewNumber))
	}
	if v.Epoch() > known+maxViewJump {
		return fmt.Errorf("epoch %d jumps more than %d past %d", v.Epoch(), maxViewJump, known)
	}
	if v.Number == 0 {
		if len(v.Members) != 0 || v.Leader != 0 {
			return fmt.Errorf("view 0 names members %v, leader %d", v.Members, v.Leader)
		}
	} else {
		if err := r.checkMembers("members", v.Members); err != nil {
			return err
		}
		if !v.HasMember(v.Leader) {
			return fmt.Errorf("view %d: leader %d is not a member of %v", v.Number, v.Leader, v.Members)
		}
	}
	if c := v.Change; c != nil {
		if c.Epoch <= v.Number {
			return fmt.Errorf("view %d: change to epoch %d does not move forward", v.Number, c.Epoch)
		}
		if !r.cfg.isReplica(c.Flusher) {
			return fmt.Errorf("view %d: flusher %d is not a configured replica", v.Number, c.Flusher)
		}
		if err := r.checkMembers("new members", c.NewMembers); err != nil {
			return err
		}
	}
	if err := dedup.Fit(v.Dedup); err != nil {
		return fmt.Errorf("view %d: %w", v.Number, err)
	}
	return nil
}

func (r *Replica) checkMembers(what string, ms []msg.NodeID) error {
	if len(ms) == 0 {
		return fmt.Errorf("no %s", what)
	}
	for i, m := range ms {
		if !r.cfg.isReplica(m) {
			return fmt.Errorf("%s %v: %d is not a configured replica", what, ms, m)
		}
		if slices.Contains(ms[:i], m) {
			return fmt.Errorf("%s %v: %d twice", what, ms, m)
		}
	}
	return nil
}

// Refused returns how many messages the replica refused so far: from a
// sender not allowed to send them, or carrying an invalid view record.
func (r *Replica) Refused() uint64 { return r.refused }

// PeerGoneActed returns how many view changes a report of a member's
// process ending (msg.PeerGone) started, before any silence timeout.
func (r *Replica) PeerGoneActed() uint64 { return r.peerGoneActed }
