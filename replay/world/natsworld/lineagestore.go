package natsworld

import (
	"cmp"
	"context"
	"encoding/hex"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/anoptic/broadside/lineage"
)

// DefaultLineageBucket names the KV bucket and the object store of
// LineageStore when LineageStoreConfig.Bucket is empty.
const DefaultLineageBucket = "broadside-lineage"

// LineageStoreConfig configures a LineageStore.
type LineageStoreConfig struct {
	// Bucket names the KV bucket and the object store (default
	// DefaultLineageBucket); one serves many worlds.
	Bucket string
	// World is the world id (required, not 0).
	World uint32
	// Replicas is the replication factor when the store is created: 1
	// (default) for one server, 3 for a NATS cluster.
	Replicas int
	// Cache, if set, keeps local copies of the lineage ranges above InlineLimit
	// (BlobCache).
	Cache *BlobCache
	// KindNames, if set, are stored (lineage.PutKindNames) for the
	// queries to print the kinds of commands by name: a sector worker
	// gives its game's (world.Game.KindNames); a reader need not.
	KindNames map[uint8]string
}

// LineageStore is a lineage.Store shared by every sector worker and front
// end of a world, on NATS: each range is a blob (a KV value, or an object
// above InlineLimit) and its description a KV value of its own, written
// after it (a listed range can be read). A worker that takes a sector over
// goes on writing its lineage where the previous owner left it, and any
// front end answers lineage queries about the whole world.
type LineageStore struct {
	b      blobs
	world  string
	closed atomic.Bool
}

var _ lineage.Store = (*LineageStore)(nil)

// OpenLineageStore opens (creating if needed) the shared lineage store of
// cfg.World in js.
func OpenLineageStore(ctx context.Context, js jetstream.JetStream, cfg LineageStoreConfig) (*LineageStore, error) {
	b, world, err := openWorldBlobs(ctx, js, cfg.Bucket, DefaultLineageBucket, cfg.World, cfg.Replicas, cfg.Cache, "lineage")
	if err != nil {
		return nil, err
	}
	s := &LineageStore{b: b, world: world}
	if cfg.KindNames != nil {
		if err := lineage.PutKindNames(ctx, s, cfg.KindNames); err != nil {
			return nil, fmt.Errorf("natsworld: lineage store: %w", err)
		}
	}
	return s, nil
}

// OpenWorkerLineage returns what a sector worker gives as
// WorkerConfig.Lineage: the shared lineage store of cfg.World when on
// (OpenLineageStore; give the game's KindNames), else nil (the worker
// then records no lineage).
func OpenWorkerLineage(ctx context.Context, js jetstream.JetStream, on bool, cfg LineageStoreConfig) (lineage.Store, error) {
	if !on {
		return nil, nil
	}
	s, err := OpenLineageStore(ctx, js, cfg)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// rangeKey names a range ("r") or its description ("i").
func (s *LineageStore) rangeKey(kind string, shard lineage.ShardID, first uint64) string {
	return fmt.Sprintf("%s.%s.%d.%020d", kind, s.world, shard, first)
}

// metaKey names a metadata value; names are hex-encoded (a KV key allows
// only a few characters).
func (s *LineageStore) metaKey(name string) string {
	return "m." + s.world + "." + hex.EncodeToString([]byte(name))
}

func (s *LineageStore) check(ctx context.Context) error {
	if s.closed.Load() {
		return lineage.ErrClosed
	}
	return ctx.Err()
}

// PutRange implements lineage.Store.
func (s *LineageStore) PutRange(ctx context.Context, info lineage.RangeInfo, data []byte) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if err := s.b.put(ctx, s.rangeKey("r", info.Shard, info.FirstTick), data); err != nil {
		return fmt.Errorf("natsworld: put lineage of shard %d from tick %d: %w", info.Shard, info.FirstTick, err)
	}
	if _, err := s.b.kv.Put(ctx, s.rangeKey("i", info.Shard, info.FirstTick), lineage.EncodeRangeInfo(info)); err != nil {
		return fmt.Errorf("natsworld: put lineage of shard %d from tick %d: description: %w", info.Shard, info.FirstTick, err)
	}
	return nil
}

// Ranges implements lineage.Store. A description that fails its checksum
// or does not match its key is left out.
func (s *LineageStore) Ranges(ctx context.Context) ([]lineage.RangeInfo, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	return s.ranges(ctx, "i."+s.world+".")
}

func (s *LineageStore) ranges(ctx context.Context, prefix string) ([]lineage.RangeInfo, error) {
	var out []lineage.RangeInfo
	err := s.b.scan(ctx, prefix, func(key string, v []byte) {
		info, err := lineage.DecodeRangeInfo(v)
		if err != nil || key != s.rangeKey("i", info.Shard, info.FirstTick) {
			return
		}
		out = append(out, info)
	})
	if err != nil {
		return nil, fmt.Errorf("natsworld: list lineage: %w", err)
	}
	slices.SortFunc(out, func(a, b lineage.RangeInfo) int {
		return cmp.Or(cmp.Compare(a.Shard, b.Shard), cmp.Compare(a.FirstTick, b.FirstTick))
	})
	return out, nil
}

// shardRanges returns the descriptions of shard's ranges (Ranges, one
// shard's).
func (s *LineageStore) shardRanges(ctx context.Context, shard lineage.ShardID) ([]lineage.RangeInfo, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	return s.ranges(ctx, fmt.Sprintf("i.%s.%d.", s.world, shard))
}

// GetRange implements lineage.Store.
func (s *LineageStore) GetRange(ctx context.Context, shard lineage.ShardID, firstTick uint64) ([]byte, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	b, found, err := s.b.get(ctx, s.rangeKey("r", shard, firstTick))
	switch {
	case err != nil:
		return nil, fmt.Errorf("natsworld: lineage of shard %d from tick %d: %w", shard, firstTick, err)
	case !found:
		return nil, fmt.Errorf("natsworld: lineage of shard %d from tick %d: %w", shard, firstTick, lineage.ErrNotFound)
	}
	return b, nil
}

// DeleteBefore implements lineage.Store: descriptions first, so that a
// listed range stays readable.
func (s *LineageStore) DeleteBefore(ctx context.Context, shard lineage.ShardID, firstTick uint64) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	infos, err := s.ranges(ctx, fmt.Sprintf("i.%s.%d.", s.world, shard))
	if err != nil {
		return err
	}
	for _, info := range infos {
		if info.Shard != shard || info.FirstTick >= firstTick {
			continue
		}
		if err := s.b.kv.Purge(ctx, s.rangeKey("i", shard, info.FirstTick)); err != nil {
			return fmt.Errorf("natsworld: delete lineage of shard %d from tick %d: %w", shard, info.FirstTick, err)
		}
		if err := s.b.delete(ctx, s.rangeKey("r", shard, info.FirstTick)); err != nil {
			return fmt.Errorf("natsworld: delete lineage of shard %d from tick %d: %w", shard, info.FirstTick, err)
		}
	}
	return nil
}

// PutMeta implements lineage.Store.
func (s *LineageStore) PutMeta(ctx context.Context, name string, value []byte) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if err := s.b.put(ctx, s.metaKey(name), value); err != nil {
		return fmt.Errorf("natsworld: put lineage metadata %q: %w", name, err)
	}
	return nil
}

// GetMeta implements lineage.Store.
func (s *LineageStore) GetMeta(ctx context.Context, name string) ([]byte, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	b, found, err := s.b.get(ctx, s.metaKey(name))
	switch {
	case err != nil:
		return nil, fmt.Errorf("natsworld: lineage metadata %q: %w", name, err)
	case !found:
		return nil, fmt.Errorf("natsworld: lineage metadata %q: %w", name, lineage.ErrNotFound)
	}
	return b, nil
}

// Close implements lineage.Store; the NATS connection is the caller's.
func (s *LineageStore) Close() error {
	if s.closed.Swap(true) {
		return lineage.ErrClosed
	}
	return nil
}
