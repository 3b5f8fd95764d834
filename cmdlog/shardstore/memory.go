// Package shardstore holds the implementations of shard.Storage: Memory for
// tests and the deterministic simulator, and Pebble for real shards.
//
// Both behave identically (a shared conformance suite in
// shardstore/storagetest and a property test check it): entries are kept in
// position order, returned entries are copies the caller may keep and modify,
// and empty record data reads back as nil.
package shardstore

import (
	"math"
	"slices"
	"sync"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/cmdlog/shard"
)

// Memory is an in-memory shard.Storage. Entries are kept in a slice sorted by
// position, so every operation is deterministic (no map iteration) and
// appending in position order, the common case, is amortised O(1).
//
// Apply is atomic and, since the data lives in the process, "durable" for as
// long as the Memory value is. A simulator models a crash of the shard by
// dropping the shard core and keeping (or cloning, see Clone) its Memory:
// everything Apply returned from survives, nothing else exists.
//
// Memory is safe for concurrent use. Scan's fn may call other methods of the
// same Memory; entries applied while a Scan runs may or may not be visited.
type Memory struct {
	mu      sync.RWMutex
	entries []msg.Entry // sorted by Pos, unique; Data owned by the store, never modified
	meta    shard.Meta
}

var _ shard.Storage = (*Memory)(nil)

// NewMemory returns an empty Memory.
func NewMemory() *Memory { return &Memory{} }

// Clone returns an independent copy of the store in its current state. It is
// the cheap crash model of the simulator: a restarted shard gets the Clone of
// what its predecessor had applied. Record data is shared, not copied (the
// store never modifies it), so Clone costs one slice copy.
func (m *Memory) Clone() *Memory {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return &Memory{entries: slices.Clone(m.entries), meta: m.meta}
}

// Len returns the number of entries held.
func (m *Memory) Len() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.entries)
}

// Get returns the entry at pos, if present.
func (m *Memory) Get(pos uint64) (msg.Entry, bool, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	i, ok := m.search(pos)
	if !ok {
		return msg.Entry{}, false, nil
	}
	return shard.CopyEntry(m.entries[i]), true, nil
}

// Scan calls fn for present entries with from <= Pos <= to in ascending order
// until fn returns false. fn runs without the store's lock, so it may use
// the store.
func (m *Memory) Scan(from, to uint64, fn func(msg.Entry) bool) error {
	return shard.ScanInChunks(from, to, func(from, to uint64, buf []msg.Entry) ([]msg.Entry, error) {
		m.mu.RLock()
		defer m.mu.RUnlock()
		i, _ := m.search(from)
		for ; i < len(m.entries) && len(buf) < shard.ScanChunk && m.entries[i].Pos <= to; i++ {
			buf = append(buf, shard.CopyEntry(m.entries[i]))
		}
		return buf, nil
	}, fn)
}

// Meta returns the stored Meta (zero value if none was stored).
func (m *Memory) Meta() (shard.Meta, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.meta, nil
}

// Apply applies w atomically: Puts, then DeleteAbove, then TrimTo, then Meta.
// It never fails.
func (m *Memory) Apply(w shard.Writes) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range w.Puts {
		e = shard.CopyEntry(e)
		i, found := m.search(e.Pos)
		switch {
		case found:
			m.entries[i] = e
		case i == len(m.entries):
			m.entries = append(m.entries, e)
		default:
			m.entries = slices.Insert(m.entries, i, e)
		}
	}
	if w.HasDeleteAbove && w.DeleteAbove < math.MaxUint64 {
		i, _ := m.search(w.DeleteAbove + 1)
		m.entries = slices.Delete(m.entries, i, len(m.entries))
	}
	if w.TrimTo > 0 {
		i := len(m.entries)
		if w.TrimTo < math.MaxUint64 {
			i, _ = m.search(w.TrimTo + 1)
		}
		m.entries = slices.Delete(m.entries, 0, i)
	}
	if w.Meta != nil {
		m.meta = *w.Meta
	}
	return nil
}

// search returns the index of the first entry with Pos >= pos and whether its
// Pos is pos.
func (m *Memory) search(pos uint64) (int, bool) {
	return slices.BinarySearchFunc(m.entries, pos, func(e msg.Entry, p uint64) int {
		switch {
		case e.Pos < p:
			return -1
		case e.Pos > p:
			return 1
		}
		return 0
	})
}
