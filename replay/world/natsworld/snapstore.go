package natsworld

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/anoptic/broadside/replay/snapshot"
)

// DefaultSnapshotBucket names the KV bucket and the object store of
// SnapshotStore when SnapshotStoreConfig.Bucket is empty.
const DefaultSnapshotBucket = "broadside-snapshots"

// SnapshotStoreConfig configures a SnapshotStore.
type SnapshotStoreConfig struct {
	// Bucket names the KV bucket and the object store (default
	// DefaultSnapshotBucket); one serves many worlds.
	Bucket string
	// World is the world id (required, not 0).
	World uint32
	// Replicas is the replication factor when the store is created: 1
	// (default) for one server, 3 for a NATS cluster.
	Replicas int
	// Cache, if set, keeps local copies of the snapshots above InlineLimit
	// (BlobCache).
	Cache *BlobCache
}

// SnapshotStore is a snapshot.Store shared by every sector worker of a
// world, on NATS: each snapshot is a blob (a KV value under InlineLimit,
// an object store object above) and its metadata a KV value of its own,
// written last (a listed snapshot can be read). Both are file-backed, R3
// on a cluster. A worker taking over a sector restores from it.
type SnapshotStore struct {
	b      blobs
	world  string
	closed atomic.Bool
}

var _ snapshot.Store = (*SnapshotStore)(nil)

// OpenSnapshotStore opens (creating if needed) the shared snapshot store
// of cfg.World in js.
func OpenSnapshotStore(ctx context.Context, js jetstream.JetStream, cfg SnapshotStoreConfig) (*SnapshotStore, error) {
	b, world, err := openWorldBlobs(ctx, js, cfg.Bucket, DefaultSnapshotBucket, cfg.World, cfg.Replicas, cfg.Cache, "sector snapshots")
	if err != nil {
		return nil, err
	}
	return &SnapshotStore{b: b, world: world}, nil
}

func (s *SnapshotStore) key(kind string, shard uint32, tick uint64) string {
	return fmt.Sprintf("%s.%s.%d.%020d", kind, s.world, shard, tick)
}

// Put implements snapshot.Store.
func (s *SnapshotStore) Put(ctx context.Context, meta snapshot.Meta, b []byte) error {
	if s.closed.Load() {
		return snapshot.ErrClosed
	}
	if err := s.b.put(ctx, s.key("d", meta.Shard, meta.Tick), b); err != nil {
		return fmt.Errorf("natsworld: put snapshot of shard %d tick %d: %w", meta.Shard, meta.Tick, err)
	}
	if _, err := s.b.kv.Put(ctx, s.key("m", meta.Shard, meta.Tick), snapshot.EncodeMeta(meta)); err != nil {
		return fmt.Errorf("natsworld: put snapshot of shard %d tick %d: metadata: %w", meta.Shard, meta.Tick, err)
	}
	return nil
}

// List implements snapshot.Store. It reads every metadata value of the
// shard through one watcher (blobs.scan), not a Get per snapshot: a
// worker taking a sector over lists it first. A value that fails its
// checksum or names another shard is left out.
func (s *SnapshotStore) List(ctx context.Context, shard uint32) ([]snapshot.Meta, error) {
	if s.closed.Load() {
		return nil, snapshot.ErrClosed
	}
	var out []snapshot.Meta
	err := s.b.scan(ctx, fmt.Sprintf("m.%s.%d.", s.world, shard), func(_ string, v []byte) {
		if m, err := snapshot.DecodeMeta(v); err == nil && m.Shard == shard {
			out = append(out, m)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("natsworld: list snapshots of shard %d: %w", shard, err)
	}
	slices.SortFunc(out, func(a, b snapshot.Meta) int { return cmp.Compare(a.Tick, b.Tick) })
	return slices.CompactFunc(out, func(a, b snapshot.Meta) bool { return a.Tick == b.Tick }), nil
}

// Get implements snapshot.Store.
func (s *SnapshotStore) Get(ctx context.Context, shard uint32, tick uint64) ([]byte, error) {
	if s.closed.Load() {
		return nil, snapshot.ErrClosed
	}
	b, found, err := s.b.get(ctx, s.key("d", shard, tick))
	switch {
	case err != nil:
		return nil, fmt.Errorf("natsworld: snapshot of shard %d tick %d: %w", shard, tick, err)
	case !found:
		return nil, fmt.Errorf("natsworld: snapshot of shard %d tick %d: %w", shard, tick, snapshot.ErrNotFound)
	}
	return b, nil
}

// DeleteRange implements snapshot.Store: metadata first, so that a listed
// snapshot stays readable.
func (s *SnapshotStore) DeleteRange(ctx context.Context, shard uint32, from, to uint64) error {
	metas, err := s.List(ctx, shard)
	if err != nil {
		return err
	}
	for _, m := range metas {
		if m.Tick < from || m.Tick >= to {
			continue
		}
		if err := s.b.kv.Purge(ctx, s.key("m", shard, m.Tick)); err != nil {
			return fmt.Errorf("natsworld: delete snapshot of shard %d tick %d: %w", shard, m.Tick, err)
		}
		if err := s.b.delete(ctx, s.key("d", shard, m.Tick)); err != nil {
			return fmt.Errorf("natsworld: delete snapshot of shard %d tick %d: %w", shard, m.Tick, err)
		}
	}
	return nil
}

// Close implements snapshot.Store; the NATS connection is the caller's.
func (s *SnapshotStore) Close() error {
	s.closed.Store(true)
	return nil
}
