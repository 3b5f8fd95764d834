package lineage

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// testRange returns a small valid range of shard over ticks
// [first, first+n) with one input per tick at positions from pos.
func testRange(shard ShardID, first uint64, n int, pos uint64) *Range {
	r := &Range{Shard: shard, FirstTick: first}
	for i := 0; i < n; i++ {
		p := pos + uint64(i)
		r.Inputs = append(r.Inputs, CommandInfo{Pos: p, Tick: first + uint64(i), Player: uint32(p % 7), Kind: 1})
		r.Events = append(r.Events, CommandEvent(EntityID(1+p%3), p))
		r.InputEnds = append(r.InputEnds, len(r.Inputs))
		r.EventEnds = append(r.EventEnds, len(r.Events))
	}
	return r
}

func putTestRange(t *testing.T, s Store, r *Range) []byte {
	t.Helper()
	b, err := EncodeRange(r)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PutRange(context.Background(), infoOf(r, len(b)), b); err != nil {
		t.Fatal(err)
	}
	return b
}

func firstTicks(t *testing.T, s Store) []uint64 {
	t.Helper()
	infos, err := s.Ranges(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []uint64
	for _, in := range infos {
		out = append(out, uint64(in.Shard)<<32|in.FirstTick)
	}
	return out
}

// testStore runs the Store contract against s.
func testStore(t *testing.T, s Store) {
	ctx := context.Background()
	b1 := putTestRange(t, s, testRange(2, 128, 128, 1000))
	putTestRange(t, s, testRange(1, 128, 128, 1000))
	putTestRange(t, s, testRange(1, 0, 128, 1))
	putTestRange(t, s, testRange(1, 256, 10, 2000))
	if got, want := firstTicks(t, s), []uint64{1 << 32, 1<<32 | 128, 1<<32 | 256, 2<<32 | 128}; !equalU64(got, want) {
		t.Fatalf("ranges %x, want %x", got, want)
	}
	infos, _ := s.Ranges(ctx)
	if in := infos[3]; in.Shard != 2 || in.LastTick != 255 || in.FirstPos != 1000 || in.LastPos != 1127 || in.Inputs != 128 || in.Events != 128 || in.Bytes != len(b1) {
		t.Fatalf("info %+v", in)
	}
	got, err := s.GetRange(ctx, 2, 128)
	if err != nil || !bytes.Equal(got, b1) {
		t.Fatalf("get: %v", err)
	}
	if _, err := s.GetRange(ctx, 2, 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get missing: %v", err)
	}
	// Replacing a range (a partial range flushed, then the full one).
	putTestRange(t, s, testRange(1, 256, 20, 2000))
	infos, _ = s.Ranges(ctx)
	if len(infos) != 4 || infos[2].LastTick != 275 {
		t.Fatalf("after replace: %+v", infos)
	}
	if err := s.DeleteBefore(ctx, 1, 256); err != nil {
		t.Fatal(err)
	}
	if got, want := firstTicks(t, s), []uint64{1<<32 | 256, 2<<32 | 128}; !equalU64(got, want) {
		t.Fatalf("after delete %x, want %x", got, want)
	}
	if _, err := s.GetMeta(ctx, "x"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing meta: %v", err)
	}
	if err := s.PutMeta(ctx, "x", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if v, err := s.GetMeta(ctx, "x"); err != nil || string(v) != "v" {
		t.Fatalf("meta %q %v", v, err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.PutMeta(cancelled, "y", nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled put: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Ranges(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
	if err := s.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second close: %v", err)
	}
}

func equalU64(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestMemStore(t *testing.T) { testStore(t, NewMemStore()) }

func TestPebbleStore(t *testing.T) {
	s, err := OpenPebble("db", PebbleOptions{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	testStore(t, s)
}

func TestPebbleStoreReopensAndChecks(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	s, err := OpenPebble("db", PebbleOptions{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	b := putTestRange(t, s, testRange(0, 0, 50, 1))
	if err := PutKindNames(ctx, s, map[uint8]string{1: "fire"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = OpenPebble("db", PebbleOptions{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got, err := s.GetRange(ctx, 0, 0); err != nil || !bytes.Equal(got, b) {
		t.Fatalf("after reopen: %v", err)
	}
	if names, err := KindNames(ctx, s); err != nil || names[1] != "fire" {
		t.Fatalf("kind names %v %v", names, err)
	}
	// A damaged RangeInfo is reported, not trusted.
	key := pebRangeKey(pebPrefixInfo, 0, 0)
	v, closer, err := s.db.Get(key)
	if err != nil {
		t.Fatal(err)
	}
	bad := append([]byte(nil), v...)
	closer.Close()
	bad[0] ^= 1
	if err := s.db.Set(key, bad, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Ranges(ctx); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("damaged info: %v", err)
	}
	// A store of another format is refused.
	if err := s.db.Set([]byte{pebPrefixFormat}, []byte("other/1"), nil); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := OpenPebble("db", PebbleOptions{FS: fs}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("foreign format: %v", err)
	}
}

func TestTrim(t *testing.T) {
	ctx := context.Background()
	s := NewMemStore()
	// Shard 0: ticks 0..127 (positions 1..128), 128..255 (129..256),
	// 256..383 (no inputs), 384..511 (1000..1127); shard 1: 0..199
	// (1..200).
	putTestRange(t, s, testRange(0, 0, 128, 1))
	putTestRange(t, s, testRange(0, 128, 128, 129))
	putTestRange(t, s, &Range{Shard: 0, FirstTick: 256, InputEnds: make([]int, 128), EventEnds: make([]int, 128)})
	putTestRange(t, s, testRange(0, 384, 128, 1000))
	putTestRange(t, s, testRange(1, 0, 200, 1))

	if err := Trim(ctx, s, Retention{BeforeTick: 130}); err != nil {
		t.Fatal(err)
	}
	if got, want := firstTicks(t, s), []uint64{128, 256, 384, 1 << 32}; !equalU64(got, want) {
		t.Fatalf("trim by tick: %x, want %x", got, want)
	}
	if h, err := Horizon(ctx, s); err != nil || h != 128 {
		t.Fatalf("horizon %d %v", h, err)
	}
	// Position 300 is after every input of ticks < 384: those go, in both
	// shards (shard 1 has nothing at or after 300).
	if err := Trim(ctx, s, Retention{BeforePos: 300}); err != nil {
		t.Fatal(err)
	}
	if got, want := firstTicks(t, s), []uint64{384}; !equalU64(got, want) {
		t.Fatalf("trim by position: %x, want %x", got, want)
	}
	if h, _ := Horizon(ctx, s); h != 384 {
		t.Fatalf("horizon %d", h)
	}
	if err := Trim(ctx, s, Retention{}); err != nil || len(firstTicks(t, s)) != 1 {
		t.Fatalf("empty retention trimmed: %v", err)
	}
	// Quiet ticks after the last inputs may be after the cut: a range
	// with no inputs that follows every range with inputs is kept.
	q := NewMemStore()
	putTestRange(t, q, testRange(2, 0, 128, 1))
	putTestRange(t, q, &Range{Shard: 2, FirstTick: 128, InputEnds: make([]int, 128), EventEnds: make([]int, 128)})
	if err := Trim(ctx, q, Retention{BeforePos: 300}); err != nil {
		t.Fatal(err)
	}
	if got, want := firstTicks(t, q), []uint64{2<<32 | 128}; !equalU64(got, want) {
		t.Fatalf("trailing quiet range: %x, want %x", got, want)
	}
}

func TestKindNamesRejectCorruption(t *testing.T) {
	ctx := context.Background()
	s := NewMemStore()
	if names, err := KindNames(ctx, s); err != nil || len(names) != 0 {
		t.Fatalf("no names: %v %v", names, err)
	}
	if err := s.PutMeta(ctx, metaKinds, []byte{1, 200, 'x'}); err != nil {
		t.Fatal(err)
	}
	if _, err := KindNames(ctx, s); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("corrupt names: %v", err)
	}
	if err := s.PutMeta(ctx, metaHorizon, []byte{0x80}); err != nil {
		t.Fatal(err)
	}
	if _, err := Horizon(ctx, s); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("corrupt horizon: %v", err)
	}
}
