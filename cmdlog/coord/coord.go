// Package coord holds the view coordinator: a compare-and-set register for
// the sequencing layer's ViewRecord. Memory is for one process and tests;
// NATS JetStream KV (see NATS) serves several processes or machines.
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
type Coordinator interface {
	// Get returns the current record and its revision.
	Get(ctx context.Context) (msg.ViewRecord, uint64, error)
	// CompareAndSet stores rec if the current revision is expectRev
	// (0: only if no record exists) and returns the new revision.
	CompareAndSet(ctx context.Context, expectRev uint64, rec msg.ViewRecord) (uint64, error)
}
