package natsworld

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/anoptic/broadside/replay/snapshot"
)

// DefaultSnapshotBucket names the KV bucket and the object store of
// SnapshotStore when SnapshotStoreConfig.Bucket is empty.
const DefaultSnapshotBucket = "broadside-snapshots"

// InlineLimit is the largest snapshot SnapshotStore keeps as a KV value;
// larger ones go to the object store (NATS advises KV below 1 MiB, its
// default max payload).
const InlineLimit = 1<<20 - 4<<10

// objectMarker is the KV value of a snapshot kept in the object store.
var objectMarker = []byte("BSOBJ")

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
}

// SnapshotStore is a snapshot.Store shared by every sector worker of a
// world, on NATS: a snapshot under InlineLimit is a KV value, a larger one
// an object store object; its metadata is a KV value of its own, written
// last (a listed snapshot can be read). Both are file-backed, R3 on a
// cluster. A worker taking over a sector restores from it.
type SnapshotStore struct {
	kv     jetstream.KeyValue
	obj    jetstream.ObjectStore
	world  string
	closed atomic.Bool
}

var _ snapshot.Store = (*SnapshotStore)(nil)

// OpenSnapshotStore opens (creating if needed) the shared snapshot store
// of cfg.World in js.
func OpenSnapshotStore(ctx context.Context, js jetstream.JetStream, cfg SnapshotStoreConfig) (*SnapshotStore, error) {
	if cfg.Bucket == "" {
		cfg.Bucket = DefaultSnapshotBucket
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 1
	}
	if cfg.World == 0 {
		return nil, errors.New("natsworld: snapshot store: world 0")
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: cfg.Bucket, History: 1,
		Description: "Broadside sector snapshots", Replicas: cfg.Replicas, Storage: jetstream.FileStorage})
	if err != nil {
		return nil, fmt.Errorf("natsworld: snapshot bucket %s: %w", cfg.Bucket, err)
	}
	obj, err := js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: cfg.Bucket,
		Description: "Broadside sector snapshots above the KV limit", Replicas: cfg.Replicas, Storage: jetstream.FileStorage})
	if err != nil {
		return nil, fmt.Errorf("natsworld: snapshot object store %s: %w", cfg.Bucket, err)
	}
	return &SnapshotStore{kv: kv, obj: obj, world: strconv.FormatUint(uint64(cfg.World), 10)}, nil
}

func (s *SnapshotStore) key(kind string, shard uint32, tick uint64) string {
	return fmt.Sprintf("%s.%s.%d.%020d", kind, s.world, shard, tick)
}

// Put implements snapshot.Store.
func (s *SnapshotStore) Put(ctx context.Context, meta snapshot.Meta, b []byte) error {
	if s.closed.Load() {
		return snapshot.ErrClosed
	}
	dk := s.key("d", meta.Shard, meta.Tick)
	val := b
	if len(b) > InlineLimit {
		if _, err := s.obj.PutBytes(ctx, dk, b); err != nil {
			return fmt.Errorf("natsworld: put snapshot of shard %d tick %d: object: %w", meta.Shard, meta.Tick, err)
		}
		val = objectMarker
	}
	if _, err := s.kv.Put(ctx, dk, val); err != nil {
		return fmt.Errorf("natsworld: put snapshot of shard %d tick %d: %w", meta.Shard, meta.Tick, err)
	}
	if _, err := s.kv.Put(ctx, s.key("m", meta.Shard, meta.Tick), snapshot.EncodeMeta(meta)); err != nil {
		return fmt.Errorf("natsworld: put snapshot of shard %d tick %d: metadata: %w", meta.Shard, meta.Tick, err)
	}
	return nil
}

// List implements snapshot.Store. It reads every metadata value of the
// shard through one watcher (one consumer delivering them all), not a Get
// per snapshot: a worker taking a sector over lists it first.
func (s *SnapshotStore) List(ctx context.Context, shard uint32) ([]snapshot.Meta, error) {
	if s.closed.Load() {
		return nil, snapshot.ErrClosed
	}
	prefix := fmt.Sprintf("m.%s.%d.", s.world, shard)
	watcher, err := s.kv.WatchFiltered(ctx, []string{prefix + "*"}, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("natsworld: list snapshots of shard %d: %w", shard, err)
	}
	defer watcher.Stop()
	var out []snapshot.Meta
	for {
		select {
		case e := <-watcher.Updates():
			if e == nil { // every current value delivered
				slices.SortFunc(out, func(a, b snapshot.Meta) int { return cmp.Compare(a.Tick, b.Tick) })
				return slices.CompactFunc(out, func(a, b snapshot.Meta) bool { return a.Tick == b.Tick }), nil
			}
			if !strings.HasPrefix(e.Key(), prefix) {
				continue
			}
			m, err := snapshot.DecodeMeta(e.Value())
			if err != nil || m.Shard != shard {
				continue // fails its checksum: left out, as the interface says
			}
			out = append(out, m)
		case <-ctx.Done():
			return nil, fmt.Errorf("natsworld: list snapshots of shard %d: %w", shard, ctx.Err())
		}
	}
}

// Get implements snapshot.Store.
func (s *SnapshotStore) Get(ctx context.Context, shard uint32, tick uint64) ([]byte, error) {
	if s.closed.Load() {
		return nil, snapshot.ErrClosed
	}
	dk := s.key("d", shard, tick)
	e, err := s.kv.Get(ctx, dk)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("natsworld: snapshot of shard %d tick %d: %w", shard, tick, snapshot.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("natsworld: snapshot of shard %d tick %d: %w", shard, tick, err)
	}
	if !bytes.Equal(e.Value(), objectMarker) {
		return e.Value(), nil
	}
	b, err := s.obj.GetBytes(ctx, dk)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, fmt.Errorf("natsworld: snapshot of shard %d tick %d: object: %w", shard, tick, snapshot.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("natsworld: snapshot of shard %d tick %d: object: %w", shard, tick, err)
	}
	return b, nil
}

// DeleteRange implements snapshot.Store.
func (s *SnapshotStore) DeleteRange(ctx context.Context, shard uint32, from, to uint64) error {
	metas, err := s.List(ctx, shard)
	if err != nil {
		return err
	}
	for _, m := range metas {
		if m.Tick < from || m.Tick >= to {
			continue
		}
		// Metadata first: a listed snapshot stays readable.
		for _, k := range []string{s.key("m", shard, m.Tick), s.key("d", shard, m.Tick)} {
			if err := s.kv.Purge(ctx, k); err != nil {
				return fmt.Errorf("natsworld: delete snapshot of shard %d tick %d: %w", shard, m.Tick, err)
			}
		}
		if err := s.obj.Delete(ctx, s.key("d", shard, m.Tick)); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			return fmt.Errorf("natsworld: delete snapshot of shard %d tick %d: object: %w", shard, m.Tick, err)
		}
	}
	return nil
}

// Close implements snapshot.Store; the NATS connection is the caller's.
func (s *SnapshotStore) Close() error {
	s.closed.Store(true)
	return nil
}
