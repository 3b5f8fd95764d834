//go:build !js

// Pebble does not build for js/wasm: the browser viewer reads lineage and
// snapshots from recordings, never from a Pebble store.

package snapshot

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/anoptic/broadside/internal/pebbledb"
)

// PebbleOptions configure a PebbleStore.
type PebbleOptions struct {
	// FS is the file system; nil means the operating system's. Tests pass
	// vfs.NewMem().
	FS vfs.FS
	// NoSync makes Put return before the write-ahead log is synced. The
	// default (synced) is what log trimming needs: a trimmed log position
	// must never be the only copy of a state a durable snapshot lacks.
	NoSync bool
	// Logger receives Pebble's messages (routine ones at debug level); nil
	// means slog.Default().
	Logger *slog.Logger
}

// PebbleStore is a Store on a Pebble database in one directory. Keys are a
// one-byte kind ('m' metadata, 'd' snapshot), the big-endian shard and the
// big-endian tick, so listing a shard is one bounded iteration over small
// values and deleting old snapshots is one range deletion per kind. Values
// carry their own CRC32C (see Codec).
type PebbleStore struct {
	db *pebbledb.DB
	wo *pebble.WriteOptions

	mu     sync.RWMutex
	closed bool
}

var _ Store = (*PebbleStore)(nil)

const (
	prefixMeta = 'm'
	prefixData = 'd'
)

// OpenPebble opens (creating if needed) a snapshot store in dir.
func OpenPebble(dir string, opts PebbleOptions) (*PebbleStore, error) {
	db, err := pebbledb.Open(dir, pebbledb.Options{FS: opts.FS, Logger: opts.Logger, Component: "snapshot-pebble"})
	if err != nil {
		return nil, fmt.Errorf("snapshot: open %s: %w", dir, err)
	}
	wo := pebble.Sync
	if opts.NoSync {
		wo = pebble.NoSync
	}
	return &PebbleStore{db: db, wo: wo}, nil
}

func key(prefix byte, shard uint32, tick uint64) []byte {
	k := make([]byte, 0, 13)
	k = append(k, prefix)
	k = binary.BigEndian.AppendUint32(k, shard)
	return binary.BigEndian.AppendUint64(k, tick)
}

// shardEnd is the first key after every key of shard with prefix.
func shardEnd(prefix byte, shard uint32) []byte {
	if shard == ^uint32(0) {
		return []byte{prefix + 1}
	}
	return binary.BigEndian.AppendUint32([]byte{prefix}, shard+1)
}

// reopenIfFailed reopens the database, with every other call excluded,
// when an earlier write failed (ENOSPC, EIO): Pebble cannot write again in
// place (see pebbledb.DB). What was stored before stays; the failed write
// stored nothing the caller counts on (Put reported an error, and a
// snapshot that failed is simply not one of the shard's snapshots).
func (s *PebbleStore) reopenIfFailed() error {
	if s.db.Failed() == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.db.Failed() == nil {
		return nil
	}
	if err := s.db.Reopen(); err != nil {
		return fmt.Errorf("snapshot: reopen after a failed write: %w", err)
	}
	return nil
}

func (s *PebbleStore) enter() error {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return ErrClosed
	}
	return nil
}

// Put implements Store.
func (s *PebbleStore) Put(ctx context.Context, meta Meta, snapshot []byte) error {
	wrap := func(err error) error {
		return fmt.Errorf("snapshot: put shard %d tick %d: %w", meta.Shard, meta.Tick, err)
	}
	return s.writeBatch(ctx, func(b *pebble.Batch) error {
		if err := b.Set(key(prefixMeta, meta.Shard, meta.Tick), EncodeMeta(meta), nil); err != nil {
			return wrap(err)
		}
		if err := b.Set(key(prefixData, meta.Shard, meta.Tick), snapshot, nil); err != nil {
			return wrap(err)
		}
		return nil
	}, wrap)
}

// writeBatch writes what fill puts in one batch with the store's write
// options, reopening the database first if an earlier write failed; wrap
// names the operation in the batch's own error.
func (s *PebbleStore) writeBatch(ctx context.Context, fill func(*pebble.Batch) error, wrap func(error) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.reopenIfFailed(); err != nil {
		return err
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.mu.RUnlock()
	b := s.db.NewBatch()
	defer b.Close()
	if err := fill(b); err != nil {
		return err
	}
	if err := s.db.Apply(b, s.wo); err != nil {
		return wrap(err)
	}
	return nil
}

// List implements Store.
func (s *PebbleStore) List(ctx context.Context, shard uint32) ([]Meta, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: key(prefixMeta, shard, 0), UpperBound: shardEnd(prefixMeta, shard)})
	if err != nil {
		return nil, fmt.Errorf("snapshot: list shard %d: %w", shard, err)
	}
	var out []Meta
	for it.First(); it.Valid(); it.Next() {
		m, err := DecodeMeta(it.Value())
		if err != nil || m.Shard != shard || m.Tick != binary.BigEndian.Uint64(it.Key()[5:]) {
			continue // damaged metadata: the snapshot is unusable
		}
		out = append(out, m)
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return nil, fmt.Errorf("snapshot: list shard %d: %w", shard, err)
	}
	return out, nil
}

// Get implements Store.
func (s *PebbleStore) Get(ctx context.Context, shard uint32, tick uint64) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	v, closer, err := s.db.Get(key(prefixData, shard, tick))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, fmt.Errorf("shard %d tick %d: %w", shard, tick, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot: get shard %d tick %d: %w", shard, tick, err)
	}
	defer closer.Close()
	return append([]byte(nil), v...), nil
}

// DeleteRange implements Store with one range deletion per key kind: call
// it rarely, for large ranges.
func (s *PebbleStore) DeleteRange(ctx context.Context, shard uint32, from, to uint64) error {
	if from >= to {
		return ctx.Err()
	}
	wrap := func(err error) error {
		return fmt.Errorf("snapshot: delete shard %d ticks [%d, %d): %w", shard, from, to, err)
	}
	return s.writeBatch(ctx, func(b *pebble.Batch) error {
		for _, p := range []byte{prefixMeta, prefixData} {
			if err := b.DeleteRange(key(p, shard, from), key(p, shard, to), nil); err != nil {
				return wrap(err)
			}
		}
		return nil
	}, wrap)
}

// Close waits for calls in progress and closes the database.
func (s *PebbleStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("snapshot: close: %w", err)
	}
	return nil
}
