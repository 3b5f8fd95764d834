package natsworld

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/anoptic/broadside/lineage"
)

// lineageRange encodes a small valid range of shard over ticks
// [first, first+n), one input per tick at positions from pos.
func lineageRange(t *testing.T, shard lineage.ShardID, first uint64, n int, pos uint64) (lineage.RangeInfo, []byte) {
	t.Helper()
	r := &lineage.Range{Shard: shard, FirstTick: first}
	for i := range n {
		p := pos + uint64(i)
		r.Inputs = append(r.Inputs, lineage.CommandInfo{Pos: p, Tick: first + uint64(i), Player: uint32(p % 7), Kind: 1})
		r.Events = append(r.Events, lineage.CommandEvent(lineage.EntityID(1+p%3), p))
		r.InputEnds = append(r.InputEnds, len(r.Inputs))
		r.EventEnds = append(r.EventEnds, len(r.Events))
	}
	b, err := lineage.EncodeRange(r)
	if err != nil {
		t.Fatal(err)
	}
	return lineage.RangeInfo{Shard: shard, FirstTick: first, LastTick: r.LastTick(), FirstPos: pos, LastPos: pos + uint64(n) - 1,
		Inputs: n, Events: n, Bytes: len(b)}, b
}

// TestLineageStore runs the lineage.Store contract against the NATS store:
// ordering by shard and first tick, replacement, a range above the KV
// limit (the object store), deletion, metadata, worlds kept apart, close.
func TestLineageStore(t *testing.T) {
	js := startNATS(t)
	ctx := ctxT(t)
	s, err := OpenLineageStore(ctx, js(), LineageStoreConfig{World: 1})
	if err != nil {
		t.Fatal(err)
	}
	other, err := OpenLineageStore(ctx, js(), LineageStoreConfig{World: 2})
	if err != nil {
		t.Fatal(err)
	}
	put := func(s *LineageStore, info lineage.RangeInfo, b []byte) {
		t.Helper()
		if err := s.PutRange(ctx, info, b); err != nil {
			t.Fatal(err)
		}
	}
	i1, b1 := lineageRange(t, 2, 128, 128, 1000)
	put(s, i1, b1)
	for _, r := range [][3]uint64{{1, 128, 1000}, {1, 0, 1}, {1, 256, 2000}} {
		info, b := lineageRange(t, lineage.ShardID(r[0]), r[1], 10, r[2])
		put(s, info, b)
	}
	big := bytes.Repeat([]byte{5}, 2<<20) // a blob of 2 MiB goes to the object store
	bigInfo := lineage.RangeInfo{Shard: 3, FirstTick: 7, LastTick: 7, Bytes: len(big)}
	put(s, bigInfo, big)
	oi, ob := lineageRange(t, 1, 512, 3, 1)
	put(other, oi, ob)

	infos, err := s.Ranges(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var keys [][2]uint64
	for _, in := range infos {
		keys = append(keys, [2]uint64{uint64(in.Shard), in.FirstTick})
	}
	want := [][2]uint64{{1, 0}, {1, 128}, {1, 256}, {2, 128}, {3, 7}}
	if len(keys) != len(want) {
		t.Fatalf("ranges %v, want %v", keys, want)
	}
	for i := range want {
		if keys[i] != want[i] {
			t.Fatalf("ranges %v, want %v", keys, want)
		}
	}
	if infos[3] != i1 {
		t.Fatalf("info %+v, want %+v", infos[3], i1)
	}
	if got, err := s.GetRange(ctx, 2, 128); err != nil || !bytes.Equal(got, b1) {
		t.Fatalf("get: %v", err)
	}
	if got, err := s.GetRange(ctx, 3, 7); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("get from the object store: %d bytes, %v", len(got), err)
	}
	if _, err := s.GetRange(ctx, 1, 512); !errors.Is(err, lineage.ErrNotFound) {
		t.Fatalf("another world's range: %v", err)
	}
	// A range replaced by a longer one (a partial range, then the full one).
	ri, rb := lineageRange(t, 1, 256, 20, 2000)
	put(s, ri, rb)
	if infos, _ := s.Ranges(ctx); infos[2].LastTick != 275 {
		t.Fatalf("after replace: %+v", infos[2])
	}
	if err := s.DeleteBefore(ctx, 1, 256); err != nil {
		t.Fatal(err)
	}
	if infos, _ := s.Ranges(ctx); len(infos) != 3 || infos[0].Shard != 1 || infos[0].FirstTick != 256 {
		t.Fatalf("after delete: %+v", infos)
	}
	if _, err := s.GetRange(ctx, 1, 0); !errors.Is(err, lineage.ErrNotFound) {
		t.Fatalf("deleted range: %v", err)
	}
	if infos, _ := other.Ranges(ctx); len(infos) != 1 {
		t.Fatalf("the other world's ranges after a delete: %+v", infos)
	}

	// Metadata, with the names lineage uses (and any other).
	if _, err := s.GetMeta(ctx, "kinds"); !errors.Is(err, lineage.ErrNotFound) {
		t.Fatalf("missing meta: %v", err)
	}
	if err := s.PutMeta(ctx, "kind names/v1 ü", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if v, err := s.GetMeta(ctx, "kind names/v1 ü"); err != nil || string(v) != "v" {
		t.Fatalf("meta %q %v", v, err)
	}
	if err := lineage.PutKindNames(ctx, s, map[uint8]string{1: "move"}); err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.PutMeta(cancelled, "y", nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled put: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Ranges(ctx); !errors.Is(err, lineage.ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
	if err := s.Close(); !errors.Is(err, lineage.ErrClosed) {
		t.Fatalf("second close: %v", err)
	}
}

// TestOpenWorkerLineage: off, a worker gets no store (a nil interface,
// not a nil *LineageStore it would write to); on, the shared store with
// the game's kind names, which a reader opened without them sees.
func TestOpenWorkerLineage(t *testing.T) {
	js := startNATS(t)
	ctx := ctxT(t)
	if s, err := OpenWorkerLineage(ctx, js(), false, LineageStoreConfig{World: 1}); s != nil || err != nil {
		t.Fatalf("off: %v, %v", s, err)
	}
	names := map[uint8]string{1: "move", 7: "fire"}
	if _, err := OpenWorkerLineage(ctx, js(), true, LineageStoreConfig{World: 1, KindNames: names}); err != nil {
		t.Fatal(err)
	}
	reader, err := OpenLineageStore(ctx, js(), LineageStoreConfig{World: 1})
	if err != nil {
		t.Fatal(err)
	}
	got, err := lineage.KindNames(ctx, reader)
	if err != nil || len(got) != 2 || got[7] != "fire" {
		t.Fatalf("kind names %v, %v", got, err)
	}
	if _, err := OpenWorkerLineage(ctx, js(), true, LineageStoreConfig{}); err == nil {
		t.Fatal("world 0 opened")
	}
}

// TestLineageTail: the newest tick the shared store holds of a sector,
// which bounds a takeover's restore (Worker.restore), counts that
// sector's ranges only.
func TestLineageTail(t *testing.T) {
	js := startNATS(t)
	ctx := ctxT(t)
	s, err := OpenLineageStore(ctx, js(), LineageStoreConfig{World: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range [][3]uint64{{1, 0, 1}, {1, 128, 200}, {2, 256, 900}, {12, 0, 5}} {
		info, b := lineageRange(t, lineage.ShardID(r[0]), r[1], 40, r[2])
		if err := s.PutRange(ctx, info, b); err != nil {
			t.Fatal(err)
		}
	}
	w := &Worker{cfg: WorkerConfig{Lineage: s}}
	for sector, want := range map[uint32]uint64{1: 167, 2: 295, 3: 0, 12: 39} {
		if got, err := w.lineageTail(ctx, sector); err != nil || got != want {
			t.Fatalf("sector %d: tail %d, %v; want %d", sector, got, err, want)
		}
	}
	// Any lineage.Store answers too (through Ranges).
	mem := lineage.NewMemStore()
	info, b := lineageRange(t, 2, 256, 10, 1)
	if err := mem.PutRange(ctx, info, b); err != nil {
		t.Fatal(err)
	}
	w = &Worker{cfg: WorkerConfig{Lineage: mem}}
	if got, err := w.lineageTail(ctx, 2); err != nil || got != 265 {
		t.Fatalf("memory store: tail %d, %v", got, err)
	}
}

// flakyLineage fails its first fails puts.
type flakyLineage struct {
	lineage.Store
	fails, puts int
}

func (f *flakyLineage) PutRange(ctx context.Context, info lineage.RangeInfo, b []byte) error {
	f.puts++
	if f.puts <= f.fails {
		return errors.New("nats: timeout")
	}
	return f.Store.PutRange(ctx, info, b)
}

// TestFencedLineageRetries: an owner's range write that fails, or meets
// the lease invalid for a moment (a late renewal), goes out once it can;
// one whose lease never comes back is refused when ctx ends.
func TestFencedLineageRetries(t *testing.T) {
	ctx := ctxT(t)
	info, b := lineageRange(t, 1, 0, 10, 1)
	flaky := &flakyLineage{Store: lineage.NewMemStore(), fails: 2}
	var checks int
	valid := func() bool { checks++; return checks != 2 } // invalid once
	if err := (fencedLineage{Store: flaky, valid: valid}).PutRange(ctx, info, b); err != nil {
		t.Fatal(err)
	}
	if infos, _ := flaky.Ranges(ctx); len(infos) != 1 || flaky.puts != 3 {
		t.Fatalf("after 2 failures and an invalid moment: %d puts, ranges %v", flaky.puts, infos)
	}
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	never := fencedLineage{Store: lineage.NewMemStore(), valid: func() bool { return false }}
	if err := never.PutRange(cctx, info, b); !errors.Is(err, errNotOwner) {
		t.Fatalf("a lease never valid again: %v", err)
	}
}
