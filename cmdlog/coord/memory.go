package coord

import (
	"context"
	"fmt"
	"sync"

	"github.com/anoptic/broadside/cmdlog/msg"
)

// Memory is an in-process Coordinator for one process and tests. Records
// are deep-copied on the way in and out, so callers never share slices with
// it. Revisions count successful writes: 1, 2, 3, ...
type Memory struct {
	mu       sync.Mutex
	rec      msg.ViewRecord
	rev      uint64 // 0: no record
	watchers map[*memWatcher]struct{}
}

var (
	_ Coordinator = (*Memory)(nil)
	_ Watcher     = (*Memory)(nil)
)

// NewMemory returns a Memory with no record.
func NewMemory() *Memory { return &Memory{watchers: make(map[*memWatcher]struct{})} }

// Get returns the current record and its revision, or ErrNotFound.
func (m *Memory) Get(ctx context.Context) (msg.ViewRecord, uint64, error) {
	if err := ctx.Err(); err != nil {
		return msg.ViewRecord{}, 0, fmt.Errorf("coord: get: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.rev == 0 {
		return msg.ViewRecord{}, 0, ErrNotFound
	}
	return m.rec.Clone(), m.rev, nil
}

// CompareAndSet stores rec if the current revision is expectRev (0: only if
// no record exists) and returns the new revision; otherwise it returns an
// error wrapping ErrConflict.
func (m *Memory) CompareAndSet(ctx context.Context, expectRev uint64, rec msg.ViewRecord) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("coord: compare-and-set: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.rev != expectRev {
		return 0, fmt.Errorf("coord: compare-and-set: revision is %d, expected %d: %w", m.rev, expectRev, ErrConflict)
	}
	m.rec = rec.Clone()
	m.rev++
	for w := range m.watchers {
		w.notify()
	}
	return m.rev, nil
}

// Watch implements Watcher. The goroutine it starts ends when ctx is done.
func (m *Memory) Watch(ctx context.Context) (<-chan Update, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("coord: watch: %w", err)
	}
	w := &memWatcher{wake: make(chan struct{}, 1)}
	m.mu.Lock()
	m.watchers[w] = struct{}{}
	w.notify() // deliver the current record, if any
	m.mu.Unlock()
	out := make(chan Update)
	go func() {
		defer close(out)
		defer func() {
			m.mu.Lock()
			delete(m.watchers, w)
			m.mu.Unlock()
		}()
		var sent uint64 // revision last delivered
		for {
			select {
			case <-ctx.Done():
				return
			case <-w.wake:
			}
			m.mu.Lock()
			rev, rec := m.rev, m.rec
			if rev > sent {
				rec = rec.Clone()
			}
			m.mu.Unlock()
			if rev <= sent {
				continue
			}
			select {
			case out <- Update{View: rec, Rev: rev}:
				sent = rev
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// memWatcher is one Watch: wake holds at most one pending signal.
type memWatcher struct{ wake chan struct{} }

func (w *memWatcher) notify() {
	select {
	case w.wake <- struct{}{}:
	default: // a wake-up is already pending; it will read the latest record
	}
}
