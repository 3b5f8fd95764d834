package natsworld

import (
	"bytes"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// TestBlobCache: a second worker's cache serves a large snapshot after its
// first read; a rewritten key is never answered from the cache (its
// content, so its digest, changed); a damaged entry is dropped and the
// object fetched; the bound holds; entries survive a reopen.
func TestBlobCache(t *testing.T) {
	js := startNATS(t)
	ctx := ctxT(t)
	open := func(dir string, max int64) *BlobCache {
		c, err := OpenBlobCache(dir, max, quiet())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	dirA, dirB := t.TempDir(), t.TempDir()
	ca, cb := open(dirA, 0), open(dirB, 0)
	a, err := OpenSnapshotStore(ctx, js(), SnapshotStoreConfig{World: 1, Cache: ca})
	if err != nil {
		t.Fatal(err)
	}
	b, err := OpenSnapshotStore(ctx, js(), SnapshotStoreConfig{World: 1, Cache: cb})
	if err != nil {
		t.Fatal(err)
	}
	v1 := bytes.Repeat([]byte{1, 2, 3}, 1<<20) // 3 MiB: an object
	if err := a.Put(ctx, testMeta(0, 10, len(v1)), v1); err != nil {
		t.Fatal(err)
	}
	if st := ca.Stats(); st.Entries != 1 {
		t.Fatalf("the writer's cache holds %d entries, want its own snapshot", st.Entries)
	}
	get := func(want []byte) {
		t.Helper()
		got, err := b.Get(ctx, 0, 10)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("get: %d bytes (%v), want %d", len(got), err, len(want))
		}
	}
	get(v1)
	get(v1)
	if st := cb.Stats(); st.Hits != 1 || st.Misses != 1 {
		t.Fatalf("reader's cache after two gets: %+v, want 1 miss then 1 hit", st)
	}
	// A new owner rewrites the key: the reader must see the new content.
	v2 := bytes.Repeat([]byte{4, 5, 6}, 1<<20)
	if err := a.Put(ctx, testMeta(0, 10, len(v2)), v2); err != nil {
		t.Fatal(err)
	}
	get(v2)
	// A damaged entry: dropped, and the object fetched again.
	if err := cb.db.Set([]byte(digestOf(v2)), []byte("garbage"), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	get(v2)
	if st := cb.Stats(); st.Corrupt != 1 {
		t.Fatalf("reader's cache: %+v, want the damaged entry counted", st)
	}
	get(v2)
	// Entries survive a reopen; the bound holds.
	if err := cb.Close(); err != nil {
		t.Fatal(err)
	}
	cb = open(dirB, 4<<20)
	if st := cb.Stats(); st.Entries != 1 || st.Bytes > 4<<20 {
		t.Fatalf("reopened with a 4 MiB bound: %+v, want one entry (the oldest evicted)", st)
	}
	cb.put(digestOf(v1), v1)
	if st := cb.Stats(); st.Entries != 1 || st.Bytes != int64(len(v1)) {
		t.Fatalf("after another 3 MiB under a 4 MiB bound: %+v", st)
	}
	cb.Close()
	ca.Close()
}
