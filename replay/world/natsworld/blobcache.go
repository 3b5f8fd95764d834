package natsworld

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"

	"github.com/anoptic/broadside/internal/pebbledb"
)

// DefaultBlobCacheBytes is the default bound of a BlobCache.
const DefaultBlobCacheBytes = 256 << 20

// BlobCache is a worker's local cache, on Pebble, of the large objects of
// a world's shared stores (snapshots and lineage ranges above
// InlineLimit, which the NATS object store keeps), keyed by their SHA-256
// digest. A key names its content, so an entry never goes stale when a
// new owner rewrites a snapshot's key: the key then names another
// digest. Every value read is hashed again, and one whose digest differs
// (a damaged disk) is dropped and fetched from NATS. A get still asks NATS
// for the object's digest (one small request); what it saves is the
// object's transfer. Values under InlineLimit are not cached: their KV
// read is the one round trip a cache could not skip without risking
// a stale value.
//
// It holds at most its bound in bytes, evicting the oldest entries first
// (entries found at open count as oldest, in key order).
type BlobCache struct {
	db  *pebbledb.DB
	max int64

	mu    sync.Mutex
	size  int64
	order []string         // digests, oldest first
	sizes map[string]int64 // digest -> bytes held

	hits, misses, corrupt atomic.Uint64
}

// OpenBlobCache opens (creating if needed) a cache in dir holding at most
// maxBytes (0: DefaultBlobCacheBytes).
func OpenBlobCache(dir string, maxBytes int64, log *slog.Logger) (*BlobCache, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultBlobCacheBytes
	}
	db, err := pebbledb.Open(dir, pebbledb.Options{Logger: log, Component: "blob-cache"})
	if err != nil {
		return nil, fmt.Errorf("natsworld: blob cache %s: %w", dir, err)
	}
	c := &BlobCache{db: db, max: maxBytes, sizes: map[string]int64{}}
	it, err := db.NewIter(nil)
	if err != nil {
		db.Close()
		return nil, err
	}
	for ok := it.First(); ok; ok = it.Next() {
		k := string(it.Key())
		n := int64(len(it.Value()))
		c.order = append(c.order, k)
		c.sizes[k] = n
		c.size += n
	}
	if err := it.Close(); err != nil {
		db.Close()
		return nil, err
	}
	c.mu.Lock()
	c.evictLocked()
	c.mu.Unlock()
	return c, nil
}

// digestOf returns the object store's digest of b: "SHA-256=" and the
// URL-safe base64 of its SHA-256, as nats.go writes it.
func digestOf(b []byte) string {
	h := sha256.Sum256(b)
	return "SHA-256=" + base64.URLEncoding.EncodeToString(h[:])
}

// get returns the cached value of digest, checked against it.
func (c *BlobCache) get(digest string) ([]byte, bool) {
	if c == nil || !strings.HasPrefix(digest, "SHA-256=") {
		return nil, false
	}
	v, closer, err := c.db.Get([]byte(digest))
	if err != nil {
		if !errors.Is(err, pebble.ErrNotFound) {
			c.corrupt.Add(1)
		}
		c.misses.Add(1)
		return nil, false
	}
	b := append([]byte(nil), v...)
	closer.Close()
	if digestOf(b) != digest {
		c.corrupt.Add(1)
		c.misses.Add(1)
		c.drop(digest)
		return nil, false
	}
	c.hits.Add(1)
	return b, true
}

// put caches b under digest, if b has that digest and fits the bound.
func (c *BlobCache) put(digest string, b []byte) {
	if c == nil || int64(len(b)) > c.max || digestOf(b) != digest {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.sizes[digest]; ok {
		return
	}
	if err := c.db.Set([]byte(digest), b, pebble.NoSync); err != nil {
		return // a cache: the shared store still has it
	}
	c.order = append(c.order, digest)
	c.sizes[digest] = int64(len(b))
	c.size += int64(len(b))
	c.evictLocked()
}

// drop removes digest's entry.
func (c *BlobCache) drop(digest string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.db.Delete([]byte(digest), pebble.NoSync)
	if n, ok := c.sizes[digest]; ok {
		c.size -= n
		delete(c.sizes, digest)
	}
}

// evictLocked deletes the oldest entries until the cache fits its bound.
func (c *BlobCache) evictLocked() {
	for c.size > c.max && len(c.order) > 0 {
		k := c.order[0]
		c.order = c.order[1:]
		n, ok := c.sizes[k]
		if !ok {
			continue // dropped already
		}
		_ = c.db.Delete([]byte(k), pebble.NoSync)
		delete(c.sizes, k)
		c.size -= n
	}
}

// BlobCacheStats are a BlobCache's counters.
type BlobCacheStats struct {
	// Hits and Misses count gets; Corrupt the values found damaged (and
	// dropped); Bytes and Entries what it holds.
	Hits, Misses, Corrupt uint64
	Bytes                 int64
	Entries               int
}

// Stats returns the cache's counters.
func (c *BlobCache) Stats() BlobCacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return BlobCacheStats{Hits: c.hits.Load(), Misses: c.misses.Load(), Corrupt: c.corrupt.Load(), Bytes: c.size, Entries: len(c.sizes)}
}

// Close closes the cache's database.
func (c *BlobCache) Close() error { return c.db.Close() }
