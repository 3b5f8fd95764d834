package dst

import (
	"container/heap"
	"math/rand/v2"

	"github.com/anoptic/broadside/cmdlog/msg"
)

// network is a simulated message network: every message gets a random
// delay (so messages reorder), some are dropped or duplicated, and
// partitioned pairs lose everything between them.
type network struct {
	rng      *rand.Rand
	queue    msgQueue
	seq      uint64
	dropRate float64
	dupRate  float64
	maxDelay int
	// cut[a] is the tick until which node a is isolated from every other
	// node except the coordinator.
	cut map[msg.NodeID]int64

	sent, dropped, duplicated int
}

type inflight struct {
	at  int64
	seq uint64
	env msg.Envelope
}

type msgQueue []inflight

func (q msgQueue) Len() int { return len(q) }
func (q msgQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q msgQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *msgQueue) Push(x any)   { *q = append(*q, x.(inflight)) }
func (q *msgQueue) Pop() any {
	old := *q
	n := len(old)
	x := old[n-1]
	*q = old[:n-1]
	return x
}

func (n *network) isolated(a msg.NodeID, now int64) bool {
	if a == msg.Coordinator {
		return false
	}
	return n.cut[a] > now
}

func (n *network) blocked(e msg.Envelope, now int64) bool {
	return n.isolated(e.From, now) || n.isolated(e.To, now)
}

func (n *network) send(e msg.Envelope, now int64, faults bool) {
	n.sent++
	if faults && n.blocked(e, now) {
		n.dropped++
		return
	}
	if faults && n.rng.Float64() < n.dropRate {
		n.dropped++
		return
	}
	copies := 1
	if faults && n.rng.Float64() < n.dupRate {
		copies = 2
		n.duplicated++
	}
	for range copies {
		n.seq++
		delay := int64(1 + n.rng.IntN(n.maxDelay))
		heap.Push(&n.queue, inflight{at: now + delay, seq: n.seq, env: e})
	}
}

// due pops the next message deliverable at or before now.
func (n *network) due(now int64) (msg.Envelope, bool) {
	if len(n.queue) == 0 || n.queue[0].at > now {
		return msg.Envelope{}, false
	}
	return heap.Pop(&n.queue).(inflight).env, true
}
