package lineage

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
)

// ErrNotFound is returned by Store getters for a missing key.
var ErrNotFound = errors.New("lineage: not found")

// ErrClosed is returned by a Store's methods after Close.
var ErrClosed = errors.New("lineage: store is closed")

// RangeInfo describes a stored Range: enough to list, skip and trim ranges
// without reading them.
type RangeInfo struct {
	Shard     ShardID
	FirstTick uint64
	LastTick  uint64
	// FirstPos and LastPos are the lowest and highest log positions input
	// to the range's ticks; both 0 if it had no inputs.
	FirstPos, LastPos uint64
	Inputs, Events    int
	// Bytes is the length of the encoded range.
	Bytes int
}

// infoOf describes r encoded in n bytes.
func infoOf(r *Range, n int) RangeInfo {
	info := RangeInfo{Shard: r.Shard, FirstTick: r.FirstTick, LastTick: r.LastTick(),
		Inputs: len(r.Inputs), Events: len(r.Events), Bytes: n}
	if len(r.Inputs) > 0 {
		info.FirstPos, info.LastPos = r.Inputs[0].Pos, r.Inputs[len(r.Inputs)-1].Pos
	}
	return info
}

// Store keeps encoded Ranges keyed by shard and first tick, and a few named
// metadata values (kind names, the trim horizon). Implementations are safe
// for concurrent use. The engine's default is Pebble (OpenPebble), beside
// the snapshots; MemStore is for tests and in-process demos.
type Store interface {
	// PutRange stores data, the encoding of the range info describes,
	// replacing a stored range of the same shard and first tick.
	PutRange(ctx context.Context, info RangeInfo, data []byte) error
	// Ranges lists the stored ranges ordered by shard, then first tick.
	Ranges(ctx context.Context) ([]RangeInfo, error)
	// GetRange returns the encoded range of shard starting at firstTick,
	// or an error wrapping ErrNotFound. The bytes are the caller's.
	GetRange(ctx context.Context, shard ShardID, firstTick uint64) ([]byte, error)
	// DeleteBefore deletes shard's ranges whose first tick is below
	// firstTick (one range deletion: call it rarely, with large steps).
	DeleteBefore(ctx context.Context, shard ShardID, firstTick uint64) error
	// PutMeta stores a named metadata value.
	PutMeta(ctx context.Context, name string, value []byte) error
	// GetMeta returns a named metadata value or an error wrapping
	// ErrNotFound.
	GetMeta(ctx context.Context, name string) ([]byte, error)
	// Close releases the store; later calls return ErrClosed.
	Close() error
}

// MemStore is a Store in memory.
type MemStore struct {
	mu     sync.Mutex
	ranges map[rangeKey]memRange
	meta   map[string][]byte
	closed bool
}

type rangeKey struct {
	shard ShardID
	first uint64
}

type memRange struct {
	info RangeInfo
	data []byte
}

var _ Store = (*MemStore)(nil)

// NewMemStore returns an empty MemStore.
func NewMemStore() *MemStore {
	return &MemStore{ranges: map[rangeKey]memRange{}, meta: map[string][]byte{}}
}

// PutRange implements Store; it copies data.
func (m *MemStore) PutRange(ctx context.Context, info RangeInfo, data []byte) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("lineage: put range: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return fmt.Errorf("lineage: put range: %w", ErrClosed)
	}
	m.ranges[rangeKey{info.Shard, info.FirstTick}] = memRange{info: info, data: append([]byte(nil), data...)}
	return nil
}

// Ranges implements Store.
func (m *MemStore) Ranges(ctx context.Context) ([]RangeInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("lineage: list ranges: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, fmt.Errorf("lineage: list ranges: %w", ErrClosed)
	}
	out := make([]RangeInfo, 0, len(m.ranges))
	for _, r := range m.ranges {
		out = append(out, r.info)
	}
	sortInfos(out)
	return out, nil
}

func sortInfos(s []RangeInfo) {
	slices.SortFunc(s, func(a, b RangeInfo) int {
		if c := cmp.Compare(a.Shard, b.Shard); c != 0 {
			return c
		}
		return cmp.Compare(a.FirstTick, b.FirstTick)
	})
}

// GetRange implements Store.
func (m *MemStore) GetRange(ctx context.Context, shard ShardID, firstTick uint64) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("lineage: get range %d/%d: %w", shard, firstTick, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, fmt.Errorf("lineage: get range %d/%d: %w", shard, firstTick, ErrClosed)
	}
	r, ok := m.ranges[rangeKey{shard, firstTick}]
	if !ok {
		return nil, fmt.Errorf("lineage: get range %d/%d: %w", shard, firstTick, ErrNotFound)
	}
	return append([]byte(nil), r.data...), nil
}

// DeleteBefore implements Store.
func (m *MemStore) DeleteBefore(ctx context.Context, shard ShardID, firstTick uint64) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("lineage: delete before %d/%d: %w", shard, firstTick, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return fmt.Errorf("lineage: delete before %d/%d: %w", shard, firstTick, ErrClosed)
	}
	for k := range m.ranges {
		if k.shard == shard && k.first < firstTick {
			delete(m.ranges, k)
		}
	}
	return nil
}

// PutMeta implements Store.
func (m *MemStore) PutMeta(ctx context.Context, name string, value []byte) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("lineage: put meta %q: %w", name, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return fmt.Errorf("lineage: put meta %q: %w", name, ErrClosed)
	}
	m.meta[name] = append([]byte(nil), value...)
	return nil
}

// GetMeta implements Store.
func (m *MemStore) GetMeta(ctx context.Context, name string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("lineage: get meta %q: %w", name, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, fmt.Errorf("lineage: get meta %q: %w", name, ErrClosed)
	}
	v, ok := m.meta[name]
	if !ok {
		return nil, fmt.Errorf("lineage: get meta %q: %w", name, ErrNotFound)
	}
	return append([]byte(nil), v...), nil
}

// Close implements Store.
func (m *MemStore) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	m.closed = true
	return nil
}

// Bytes returns the total encoded size of the stored ranges.
func (m *MemStore) Bytes() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, r := range m.ranges {
		n += len(r.data)
	}
	return n
}
