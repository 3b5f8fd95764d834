package node

import (
	"sync"

	"github.com/anoptic/broadside/cmdlog/msg"
)

// LocalNet is an in-process Transport: every node registers its inbox.
// Messages to unknown or full inboxes are dropped, as on a network.
type LocalNet struct {
	mu    sync.RWMutex
	boxes map[msg.NodeID]Inbox
}

// NewLocalNet returns an empty in-process network.
func NewLocalNet() *LocalNet { return &LocalNet{boxes: make(map[msg.NodeID]Inbox)} }

// Register attaches id's inbox (replacing an earlier one).
func (n *LocalNet) Register(id msg.NodeID, in Inbox) {
	n.mu.Lock()
	n.boxes[id] = in
	n.mu.Unlock()
}

// Unregister detaches id (its messages are dropped from now on).
func (n *LocalNet) Unregister(id msg.NodeID) {
	n.mu.Lock()
	delete(n.boxes, id)
	n.mu.Unlock()
}

// Send implements Transport.
func (n *LocalNet) Send(env msg.Envelope) {
	n.mu.RLock()
	in := n.boxes[env.To]
	n.mu.RUnlock()
	in.Deliver(env) // the zero Inbox of an unknown node drops it
}
