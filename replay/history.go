package replay

import (
	"context"
	"sync"
)

// TickHash is a shard's state hash after a tick, with the log position of
// the tick's marker.
type TickHash struct {
	Tick uint64
	Pos  uint64
	Hash uint64
}

// HashHistory keeps the hashes of a shard's most recent ticks (a ring of a
// fixed number of ticks). Recovery compares replayed hashes with it, and
// servers answer clients' desync checks from it. It is safe for concurrent
// use.
type HashHistory struct {
	mu     sync.Mutex
	ring   []TickHash
	latest TickHash
}

// DefaultHistoryTicks is the default length of a hash history: ten minutes
// at the default tick rate.
const DefaultHistoryTicks = 10 * 60 * DefaultTickRate

// NewHashHistory returns a history of the last n ticks (DefaultHistoryTicks
// if n <= 0).
func NewHashHistory(n int) *HashHistory {
	if n <= 0 {
		n = DefaultHistoryTicks
	}
	return &HashHistory{ring: make([]TickHash, n)}
}

// Put records the hash of a tick and returns the hash previously recorded
// for it, if any.
func (h *HashHistory) Put(th TickHash) (prev TickHash, had bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	slot := &h.ring[th.Tick%uint64(len(h.ring))]
	if slot.Tick == th.Tick && th.Tick != 0 {
		prev, had = *slot, true
	}
	*slot = th
	if th.Tick >= h.latest.Tick {
		h.latest = th
	}
	return prev, had
}

// Get returns the recorded hash of tick, if it is still in the history.
func (h *HashHistory) Get(tick uint64) (TickHash, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	th := h.ring[tick%uint64(len(h.ring))]
	return th, th.Tick == tick && tick != 0
}

// Latest returns the highest tick recorded.
func (h *HashHistory) Latest() TickHash {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.latest
}

// watermark is a monotonic counter goroutines can wait on.
type watermark struct {
	mu sync.Mutex
	v  uint64
	ch chan struct{}
}

func newWatermark(v uint64) *watermark { return &watermark{v: v, ch: make(chan struct{})} }

// raise sets the mark to v if v is higher and wakes the waiters.
func (w *watermark) raise(v uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if v > w.v {
		w.v = v
		close(w.ch)
		w.ch = make(chan struct{})
	}
}

// wait blocks until the mark reaches v or ctx ends.
func (w *watermark) wait(ctx context.Context, v uint64) error {
	for {
		w.mu.Lock()
		cur, ch := w.v, w.ch
		w.mu.Unlock()
		if cur >= v {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
