package snapshot

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
)

// ErrNotFound is returned by Store.Get for a snapshot that is not stored.
var ErrNotFound = errors.New("snapshot: not found")

// ErrClosed is returned by a store's methods after Close.
var ErrClosed = errors.New("snapshot: store closed")

// Store keeps encoded snapshots, keyed by shard and tick. Implementations
// are safe for concurrent use.
type Store interface {
	// Put stores an encoded snapshot (Codec.Encode) and its metadata
	// together, replacing any snapshot of the same shard and tick. Once it
	// returns the snapshot is durable (as durable as the store is).
	Put(ctx context.Context, meta Meta, snapshot []byte) error
	// List returns the metadata of shard's snapshots in increasing tick
	// order. Metadata that fails its checksum is left out.
	List(ctx context.Context, shard uint32) ([]Meta, error)
	// Get returns the encoded snapshot of shard at tick, or an error
	// wrapping ErrNotFound.
	Get(ctx context.Context, shard uint32, tick uint64) ([]byte, error)
	// DeleteRange deletes shard's snapshots with from <= tick < to.
	DeleteRange(ctx context.Context, shard uint32, from, to uint64) error
	// Close releases the store.
	Close() error
}

// MemStore is a Store in memory, for tests and benchmarks. It keeps the
// encoded bytes (metadata included), so what it returns went through the
// codec like a disk store's.
type MemStore struct {
	mu     sync.Mutex
	shards map[uint32]map[uint64]memEntry
	closed bool
}

type memEntry struct {
	meta []byte
	data []byte
}

var _ Store = (*MemStore)(nil)

// NewMemStore returns an empty in-memory store.
func NewMemStore() *MemStore { return &MemStore{shards: map[uint32]map[uint64]memEntry{}} }

// Put implements Store.
func (s *MemStore) Put(_ context.Context, meta Meta, snapshot []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	m := s.shards[meta.Shard]
	if m == nil {
		m = map[uint64]memEntry{}
		s.shards[meta.Shard] = m
	}
	m[meta.Tick] = memEntry{meta: EncodeMeta(meta), data: slices.Clone(snapshot)}
	return nil
}

// List implements Store.
func (s *MemStore) List(_ context.Context, shard uint32) ([]Meta, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	out := make([]Meta, 0, len(s.shards[shard]))
	for _, e := range s.shards[shard] {
		if m, err := DecodeMeta(e.meta); err == nil {
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b Meta) int { return cmpU64(a.Tick, b.Tick) })
	return out, nil
}

// Get implements Store.
func (s *MemStore) Get(_ context.Context, shard uint32, tick uint64) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	e, ok := s.shards[shard][tick]
	if !ok {
		return nil, fmt.Errorf("shard %d tick %d: %w", shard, tick, ErrNotFound)
	}
	return slices.Clone(e.data), nil
}

// DeleteRange implements Store.
func (s *MemStore) DeleteRange(_ context.Context, shard uint32, from, to uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	for t := range s.shards[shard] {
		if t >= from && t < to {
			delete(s.shards[shard], t)
		}
	}
	return nil
}

// Close implements Store.
func (s *MemStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

// Corrupt flips one byte of the stored snapshot of shard at tick (off is
// taken modulo its length), for tests of recovery from damaged storage. It
// reports whether the snapshot exists.
func (s *MemStore) Corrupt(shard uint32, tick uint64, off int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.shards[shard][tick]
	if !ok || len(e.data) == 0 {
		return false
	}
	e.data[off%len(e.data)] ^= 0x5a
	return true
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
