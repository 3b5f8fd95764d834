// Package coord holds the view coordinator: a compare-and-set register for
// the sequencing layer's ViewRecord. Memory is for one process and tests;
// NATS JetStream KV (package natscoord, which alone links nats-server)
// serves several processes or machines.
package coord

import (
	"context"
	"errors"

	"github.com/anoptic/broadside/cmdlog/msg"
)

// ErrConflict is returned by CompareAndSet when the stored revision is not
// the expected one (another node changed the view first).
var ErrConflict = errors.New("coord: revision conflict")

// ErrNotFound is returned by Get when no view record exists yet.
var ErrNotFound = errors.New("coord: no view record")

// Coordinator stores one ViewRecord with a revision. Revisions start at 1
// and increase with every successful write.
//
// Increase, not count: Memory's revisions are 1, 2, 3, ..., but NATS's are
// the KV bucket's sequence numbers, which skip the writes of other keys in
// the same bucket. Errors wrap ErrNotFound and ErrConflict (test with
// errors.Is). Any other error from CompareAndSet leaves its outcome unknown.
type Coordinator interface {
	// Get returns the current record and its revision.
	Get(ctx context.Context) (msg.ViewRecord, uint64, error)
	// CompareAndSet stores rec if the current revision is expectRev
	// (0: only if no record exists) and returns the new revision.
	CompareAndSet(ctx context.Context, expectRev uint64, rec msg.ViewRecord) (uint64, error)
}

// Update is a view record and its revision, as Watch delivers them.
type Update struct {
	View msg.ViewRecord
	Rev  uint64
}

// Watcher is implemented by coordinators that push changes (Memory, NATS).
type Watcher interface {
	// Watch returns a channel that receives the current record (if any)
	// and then every later one, in increasing revision order. It keeps
	// only the latest undelivered record: a slow reader skips intermediate
	// revisions, never sees an older one after a newer one. The channel is
	// closed when ctx is done or the watch fails.
	Watch(ctx context.Context) (<-chan Update, error)
}
