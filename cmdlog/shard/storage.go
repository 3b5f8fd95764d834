package shard

import (
	"math"
	"slices"

	"github.com/anoptic/broadside/cmdlog/msg"
)

// Meta is the small persistent state of a shard besides its entries.
type Meta struct {
	// Epoch is the highest writer epoch the shard has accepted; Stores from
	// lower epochs are rejected (they come from a view that was replaced).
	Epoch uint64
	// StableGP is the highest stable position the shard has been told of.
	StableGP uint64
	// Trimmed is the highest trimmed position: every position <= Trimmed
	// is gone.
	Trimmed uint64
}

// Writes is one atomic, durable batch of changes to a shard's storage. The
// driver applies it (synced) before it sends the messages that depend on it.
// Order of application: Puts, then DeleteAbove, then TrimTo, then Meta.
type Writes struct {
	Puts []msg.Entry
	// DeleteAbove, when HasDeleteAbove, removes every entry with Pos > DeleteAbove.
	HasDeleteAbove bool
	DeleteAbove    uint64
	// TrimTo, when > 0, removes every entry with Pos <= TrimTo.
	TrimTo uint64
	// Meta, when non-nil, replaces the stored Meta.
	Meta *Meta
	// Lazy marks writes that no message waits for (a stable-gp
	// announcement, which nobody acknowledges): a driver may apply a round
	// of only lazy writes without a sync (LazyApplier). They become
	// durable with the next synced batch; a crash before it may lose them,
	// and the shard then restarts with an older stable-gp (it serves less
	// until the leader announces again, which it does every heartbeat).
	Lazy bool
}

// Empty reports whether w changes nothing.
func (w *Writes) Empty() bool {
	return len(w.Puts) == 0 && !w.HasDeleteAbove && w.TrimTo == 0 && w.Meta == nil
}

// Storage is where a shard keeps its entries: Pebble in production
// (cmdlog/shardstore), a map in tests and the simulator. Reads see every
// batch Apply has returned from.
type Storage interface {
	// Get returns the entry at pos, if present.
	Get(pos uint64) (msg.Entry, bool, error)
	// Scan calls fn for present entries with from <= Pos <= to in ascending
	// order until fn returns false.
	Scan(from, to uint64, fn func(msg.Entry) bool) error
	// Meta returns the stored Meta (zero value if none was stored).
	Meta() (Meta, error)
	// Apply makes w durable.
	Apply(w Writes) error
}

// BatchApplier is implemented by storages that can make several Writes
// durable together, as one atomic batch with one sync (group commit): the
// driver of a shard hands it everything one round of steps produced.
// ApplyAll(ws) must leave the storage as Apply(ws[0]), ..., Apply(ws[n-1])
// would, and make either all of it durable or none of it.
type BatchApplier interface {
	ApplyAll(ws []Writes) error
}

// LazyApplier is implemented by storages that can apply writes without
// waiting for them to be durable (see Writes.Lazy). A later synced batch
// makes them durable too (the storage's log is sequential).
type LazyApplier interface {
	ApplyLazy(ws []Writes) error
}

// ScanChunk is how many entries an in-memory Storage copies under its lock
// at a time in ScanInChunks.
const ScanChunk = 128

// ScanInChunks implements Scan for a store that holds its entries in
// memory under a lock: chunk appends to buf (copies, with CopyEntry) up to
// ScanChunk present entries with from <= Pos <= to, in ascending order,
// taking and releasing the store's lock itself; fn is then called on them
// without the lock, so fn may use the store. Entries applied while a scan
// runs may or may not be visited.
func ScanInChunks(from, to uint64, chunk func(from, to uint64, buf []msg.Entry) ([]msg.Entry, error), fn func(msg.Entry) bool) error {
	buf := make([]msg.Entry, 0, ScanChunk)
	for from <= to {
		var err error
		if buf, err = chunk(from, to, buf[:0]); err != nil {
			return err
		}
		if len(buf) == 0 {
			return nil
		}
		for _, e := range buf {
			if !fn(e) {
				return nil
			}
		}
		last := buf[len(buf)-1].Pos
		if last == math.MaxUint64 {
			return nil
		}
		from = last + 1
	}
	return nil
}

// CopyEntry returns e with its own copy of the data (nil when empty), so
// neither a store's caller nor the store can change the other's bytes.
func CopyEntry(e msg.Entry) msg.Entry {
	if len(e.Record.Data) == 0 {
		e.Record.Data = nil
	} else {
		e.Record.Data = slices.Clone(e.Record.Data)
	}
	return e
}
