package natsworld

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// InlineLimit is the largest blob (a snapshot, a lineage range) the shared
// stores keep as a KV value; larger ones go to the object store (NATS advises KV below 1 MiB, its
// default max payload).
const InlineLimit = 1<<20 - 4<<10

// objectMarker is the KV value of a blob kept in the object store.
var objectMarker = []byte("BSOBJ")

// blobs is a KV bucket with an object store of the same name beside it: a
// value up to InlineLimit is a KV value, a larger one an object whose KV
// value is objectMarker. The shared stores of a world (snapshots,
// lineage) keep their data in blobs.
type blobs struct {
	kv    jetstream.KeyValue
	obj   jetstream.ObjectStore
	cache *BlobCache // nil: none
}

// openBlobs opens (creating if needed) bucket, file-backed with replicas
// copies; what names what is stored in it, for errors and descriptions.
func openBlobs(ctx context.Context, js jetstream.JetStream, bucket, what string, replicas int) (blobs, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket, History: 1,
		Description: "Broadside " + what, Replicas: replicas, Storage: jetstream.FileStorage})
	if err != nil {
		return blobs{}, fmt.Errorf("natsworld: %s bucket %s: %w", what, bucket, err)
	}
	obj, err := js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: bucket,
		Description: "Broadside " + what + " above the KV limit", Replicas: replicas, Storage: jetstream.FileStorage})
	if err != nil {
		return blobs{}, fmt.Errorf("natsworld: %s object store %s: %w", what, bucket, err)
	}
	return blobs{kv: kv, obj: obj}, nil
}

// openWorldBlobs opens the blobs of one world's shared store (snapshots,
// lineage): bucket defaults to defaultBucket, replicas to 1; world 0 is
// refused. It returns the blobs, with cache, and the world's key part.
func openWorldBlobs(ctx context.Context, js jetstream.JetStream, bucket, defaultBucket string, world uint32, replicas int, cache *BlobCache, what string) (blobs, string, error) {
	if bucket == "" {
		bucket = defaultBucket
	}
	if replicas == 0 {
		replicas = 1
	}
	if world == 0 {
		return blobs{}, "", fmt.Errorf("natsworld: %s store: world 0", what)
	}
	b, err := openBlobs(ctx, js, bucket, what, replicas)
	if err != nil {
		return blobs{}, "", err
	}
	b.cache = cache
	return b, strconv.FormatUint(uint64(world), 10), nil
}

// put stores b under key.
func (s blobs) put(ctx context.Context, key string, b []byte) error {
	val := b
	if len(b) > InlineLimit {
		if _, err := s.obj.PutBytes(ctx, key, b); err != nil {
			return fmt.Errorf("object: %w", err)
		}
		s.cache.put(digestOf(b), b)
		val = objectMarker
	}
	_, err := s.kv.Put(ctx, key, val)
	return err
}

// get returns what key holds; found is false if it holds nothing.
func (s blobs) get(ctx context.Context, key string) (b []byte, found bool, err error) {
	e, err := s.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if !bytes.Equal(e.Value(), objectMarker) {
		return e.Value(), true, nil
	}
	var digest string
	if s.cache != nil {
		// The digest first: a cached copy of it is as good as the object.
		info, err := s.obj.GetInfo(ctx, key)
		if errors.Is(err, jetstream.ErrObjectNotFound) {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, fmt.Errorf("object: %w", err)
		}
		if b, ok := s.cache.get(info.Digest); ok {
			return b, true, nil
		}
		digest = info.Digest
	}
	b, err = s.obj.GetBytes(ctx, key)
	if err == nil && digest != "" {
		s.cache.put(digest, b) // only if b has that digest (not a newer object under key)
	}
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("object: %w", err)
	}
	return b, true, nil
}

// delete removes key's value and its object, if any.
func (s blobs) delete(ctx context.Context, key string) error {
	if err := s.kv.Purge(ctx, key); err != nil {
		return err
	}
	if err := s.obj.Delete(ctx, key); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return fmt.Errorf("object: %w", err)
	}
	return nil
}

// scan calls f with every current KV value whose key starts with prefix
// (a small value each: metadata, not blobs), through one watcher: one
// consumer delivering them all, not a Get per key.
func (s blobs) scan(ctx context.Context, prefix string, f func(key string, v []byte)) error {
	watcher, err := s.kv.WatchFiltered(ctx, []string{prefix + ">"}, jetstream.IgnoreDeletes())
	if err != nil {
		return err
	}
	defer watcher.Stop()
	for {
		select {
		case e := <-watcher.Updates():
			if e == nil { // every current value delivered
				return nil
			}
			if strings.HasPrefix(e.Key(), prefix) {
				f(e.Key(), e.Value())
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
