package natsworld

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/anoptic/broadside/replay/snapshot"
)

func testMeta(shard uint32, tick uint64, n int) snapshot.Meta {
	return snapshot.Meta{Shard: shard, Tick: tick, Pos: tick * 10, Full: true, Base: tick, ChainLen: 1, Epoch: 1,
		RawBytes: uint64(n), StoredBytes: uint64(n), ChainRawBytes: uint64(n)}
}

func TestSnapshotStore(t *testing.T) {
	js := startNATS(t)
	ctx := ctxT(t)
	s, err := OpenSnapshotStore(ctx, js(), SnapshotStoreConfig{World: 1})
	if err != nil {
		t.Fatal(err)
	}
	other, err := OpenSnapshotStore(ctx, js(), SnapshotStoreConfig{World: 2})
	if err != nil {
		t.Fatal(err)
	}
	small := bytes.Repeat([]byte{7}, 1000)
	large := bytes.Repeat([]byte{1, 2, 3}, 1<<20) // 3 MiB: the object store
	for _, p := range []struct {
		m snapshot.Meta
		b []byte
	}{{testMeta(2, 30, len(small)), small}, {testMeta(2, 10, len(large)), large}, {testMeta(2, 20, len(small)), small}, {testMeta(3, 5, 1), []byte{9}}} {
		if err := s.Put(ctx, p.m, p.b); err != nil {
			t.Fatal(err)
		}
	}
	if err := other.Put(ctx, testMeta(2, 99, 1), []byte{1}); err != nil {
		t.Fatal(err)
	}
	list, err := s.List(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 3 || list[0].Tick != 10 || list[1].Tick != 20 || list[2].Tick != 30 {
		t.Fatalf("list: %+v", list)
	}
	if got, err := s.Get(ctx, 2, 10); err != nil || !bytes.Equal(got, large) {
		t.Fatalf("large snapshot: %d bytes, %v", len(got), err)
	}
	if got, err := s.Get(ctx, 2, 30); err != nil || !bytes.Equal(got, small) {
		t.Fatalf("small snapshot: %v", err)
	}
	if _, err := s.Get(ctx, 2, 99); !errors.Is(err, snapshot.ErrNotFound) {
		t.Fatalf("another world's snapshot: %v", err)
	}
	if err := s.DeleteRange(ctx, 2, 0, 25); err != nil {
		t.Fatal(err)
	}
	if list, _ := s.List(ctx, 2); len(list) != 1 || list[0].Tick != 30 {
		t.Fatalf("after delete: %+v", list)
	}
	if _, err := s.Get(ctx, 2, 10); !errors.Is(err, snapshot.ErrNotFound) {
		t.Fatalf("deleted large snapshot: %v", err)
	}
	if list, _ := s.List(ctx, 3); len(list) != 1 {
		t.Fatalf("shard 3: %+v", list)
	}
	s.Close()
	if _, err := s.List(ctx, 2); !errors.Is(err, snapshot.ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
}

// TestBoundedStore: a restore bounded by the shared lineage's last tick
// lists only the snapshots at or before it; when there is none, nothing
// in a young world (a replay from the start) and all of them in an older
// one (a lineage gap rather than a long replay), unless strict.
func TestBoundedStore(t *testing.T) {
	ctx := ctxT(t)
	store := func(ticks ...uint64) snapshot.Store {
		m := snapshot.NewMemStore()
		for _, tick := range ticks {
			if err := m.Put(ctx, testMeta(1, tick, 1), []byte{1}); err != nil {
				t.Fatal(err)
			}
		}
		return m
	}
	young, old := store(10, 20, 30), store(10, 20, 30, 2000, 3000)
	late := store(2000, 3000) // snapshots only long after the bound
	ticks := func(s snapshot.Store) []uint64 {
		t.Helper()
		metas, err := s.List(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		var out []uint64
		for _, m := range metas {
			out = append(out, m.Tick)
		}
		return out
	}
	for _, c := range []struct {
		s    boundedStore
		want string
	}{
		{boundedStore{Store: young, max: 25}, "[10 20]"},
		{boundedStore{Store: young, max: 30}, "[10 20 30]"},
		{boundedStore{Store: young, max: 5}, "[]"}, // a young world: replay it all
		{boundedStore{Store: young, max: 0}, "[]"},
		{boundedStore{Store: old, max: 2500}, "[10 20 30 2000]"},
		{boundedStore{Store: old, max: 5}, "[10 20 30 2000 3000]"},
		{boundedStore{Store: old, max: 5, strict: true}, "[]"},
		{boundedStore{Store: late, max: 1500}, "[2000 3000]"}, // a gap, not a replay of 1500 ticks
		{boundedStore{Store: late, max: 1500, strict: true}, "[]"},
	} {
		if got := fmt.Sprint(ticks(c.s)); got != c.want {
			t.Fatalf("bounded by %d (strict %v): %s, want %s", c.s.max, c.s.strict, got, c.want)
		}
	}
}
