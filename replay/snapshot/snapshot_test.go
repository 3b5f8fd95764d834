package snapshot

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/anoptic/broadside/replay/table"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testSet is a small table set whose state is a function of a counter.
type testSet struct {
	a, b *table.Table
	set  *table.Set
}

func newTestSet(t testing.TB) *testSet {
	a, err := table.New(1, 16, table.Options{RecordsPerPage: 4})
	if err != nil {
		t.Fatal(err)
	}
	b, err := table.New(2, 32, table.Options{RecordsPerPage: 8, Policy: table.NextFit})
	if err != nil {
		t.Fatal(err)
	}
	set, err := table.NewSet(a, b)
	if err != nil {
		t.Fatal(err)
	}
	return &testSet{a: a, b: b, set: set}
}

// step writes a few records, deterministically from n.
func (s *testSet) step(n uint64) {
	for s.a.Len() < 40 {
		s.a.Alloc()
	}
	s.a.Mut(int(n%40)).SetU64(0, n)
	if n%3 == 0 {
		i, _ := s.b.Alloc()
		s.b.Mut(i).SetU64(8, n*7)
	}
	if i := s.b.NextLive(int(n % 50)); n%5 == 0 && i >= 0 {
		s.b.Free(i)
	}
}

func encodeCapture(t testing.TB, c *Codec, m Meta, sc *table.SetCapture) ([]byte, Meta) {
	t.Helper()
	raw, err := sc.AppendBinary(nil)
	if err != nil {
		t.Fatal(err)
	}
	m.SetHash = sc.Hash
	m.Epoch, err = CaptureEpoch(sc)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Full {
		m.ChainRawBytes += uint64(len(raw))
	}
	b, m, _, err := c.Encode(nil, m, raw, nil)
	if err != nil {
		t.Fatal(err)
	}
	return b, m
}

func TestCodecFences(t *testing.T) {
	c, err := DefaultCodec()
	if err != nil {
		t.Fatal(err)
	}
	s := newTestSet(t)
	s.step(1)
	fences := []Fence{{Shard: 0, Epoch: 4, Base: 2}, {Shard: 5, Epoch: 90, Base: 70, Seen: 75}}
	b, m := encodeCapture(t, c, Meta{Shard: 5, Tick: 1, Pos: 9, Full: true, Base: 1, ChainLen: 1, Fences: fences}, s.set.CaptureFull())
	got, _, err := c.Decode(b)
	if err != nil || !reflect.DeepEqual(got.Fences, fences) {
		t.Fatalf("decode: %v, fences %+v, want %+v", err, got.Fences, fences)
	}
	mm, err := DecodeMeta(EncodeMeta(m))
	if err != nil || !reflect.DeepEqual(mm, m) {
		t.Fatalf("meta round trip: %v\n%+v\n%+v", err, mm, m)
	}
	// Unsorted or empty fences do not validate.
	for _, bad := range [][]Fence{{{Shard: 2, Epoch: 1}, {Shard: 1, Epoch: 1}}, {{Shard: 1}}} {
		m := m
		m.Fences = bad
		if _, err := DecodeMeta(EncodeMeta(m)); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("fences %+v: %v", bad, err)
		}
	}
}

func TestCodecRoundTripAndCorruption(t *testing.T) {
	c, err := DefaultCodec()
	if err != nil {
		t.Fatal(err)
	}
	s := newTestSet(t)
	for n := uint64(1); n <= 10; n++ {
		s.step(n)
	}
	b, m := encodeCapture(t, c, Meta{Shard: 3, Tick: 10, Pos: 99, Hash: 5, OutputSeq: 4, Full: true, Base: 10, ChainLen: 1}, s.set.CaptureFull())
	got, sc, err := c.Decode(b)
	if err != nil || !reflect.DeepEqual(got, m) {
		t.Fatalf("decode: %v\n%+v\n%+v", err, got, m)
	}
	fresh := newTestSet(t)
	if err := fresh.set.Restore(sc); err != nil || fresh.set.Hash() != s.set.Hash() {
		t.Fatalf("restore: %v", err)
	}
	if mm, err := DecodeMeta(EncodeMeta(m)); err != nil || !reflect.DeepEqual(mm, m) {
		t.Fatalf("meta round trip: %v", err)
	}
	for i := range b {
		bad := bytes.Clone(b)
		bad[i] ^= 0x20
		if _, _, err := c.Decode(bad); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("flipped byte %d: %v", i, err)
		}
	}
	if _, _, err := c.Decode(b[:len(b)-1]); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("truncated: %v", err)
	}
}

// stores returns a memory store and a Pebble store (on an in-memory file
// system and, as used in production, on disk).
func stores(t *testing.T) map[string]Store {
	mem, err := OpenPebble("db", PebbleOptions{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	disk, err := OpenPebble(filepath.Join(t.TempDir(), "snap"), PebbleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		mem.Close()
		disk.Close()
	})
	return map[string]Store{"mem": NewMemStore(), "pebble-memfs": mem, "pebble-disk": disk}
}

// A writer's chains restore to the state they captured, through every
// store; Latest picks the newest complete chain and falls back past a
// damaged one; old chains are pruned.
func TestWriterChainsAndLatest(t *testing.T) {
	for name, store := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var stored []Stored
			w, err := NewWriter(WriterConfig{Store: store, Shard: 7, PruneEvery: 2, KeepChains: 2, OnStored: func(s Stored) { stored = append(stored, s) }})
			if err != nil {
				t.Fatal(err)
			}
			wctx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- w.Run(wctx) }()
			s := newTestSet(t)
			hashes := map[uint64]uint64{}
			for n := uint64(1); n <= 60; n++ {
				s.step(n)
				hashes[n] = s.set.Hash()
				if n%2 != 0 {
					continue
				}
				full := w.NeedFull() || n%10 == 0
				buf := w.Buffer()
				for buf == nil {
					if err := w.Flush(ctx); err != nil {
						t.Fatal(err)
					}
					buf = w.Buffer()
				}
				s.set.CaptureInto(buf, full)
				w.Submit(Job{Meta: Meta{Tick: n, Pos: 1000 + n, Hash: hashes[n], OutputSeq: n / 2, Full: full}, Capture: buf})
			}
			if err := w.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			stop()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatal(err)
			}
			for _, st := range stored {
				if st.Err != nil {
					t.Fatalf("tick %d: %v", st.Meta.Tick, st.Err)
				}
			}
			metas, err := store.List(ctx, 7)
			if err != nil {
				t.Fatal(err)
			}
			// Bases at 2, 10, 20, ..., 60; pruning keeps the last two
			// chains once two more accumulated.
			if len(metas) == 0 || metas[0].Tick < 30 || metas[len(metas)-1].Tick != 60 {
				t.Fatalf("snapshots from tick %d to %d", metas[0].Tick, metas[len(metas)-1].Tick)
			}
			load := func() (LoadStats, *testSet) {
				fresh := newTestSet(t)
				st, err := Latest(ctx, store, nil, 7, func(tip Meta, full *table.SetCapture, deltas []*table.SetCapture) error {
					if err := fresh.set.Restore(full, deltas...); err != nil {
						return err
					}
					if fresh.set.Hash() != tip.Hash {
						return fmt.Errorf("hash %#x, want %#x", fresh.set.Hash(), tip.Hash)
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				return st, fresh
			}
			st, fresh := load()
			if st.Tip.Tick != 60 || fresh.set.Hash() != hashes[60] || st.Chain != 1 {
				t.Fatalf("latest: %+v", st)
			}
			// Damage the newest base: Latest falls back to the previous
			// chain's tip (tick 58).
			b, err := store.Get(ctx, 7, 60)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)/2] ^= 1
			m := metas[len(metas)-1]
			if err := store.Put(ctx, m, b); err != nil {
				t.Fatal(err)
			}
			st, fresh = load()
			if st.Tip.Tick != 58 || fresh.set.Hash() != hashes[58] || st.Skipped != 1 || st.Chain != 5 {
				t.Fatalf("fallback: %+v", st)
			}
			base, ok, err := NewestBase(ctx, store, 7)
			if err != nil || !ok || base.Tick != 60 || base.Pos != 1060 {
				t.Fatalf("newest base %+v %v %v", base, ok, err)
			}
		})
	}
}

// A failed store breaks the chain: later deltas are dropped and the writer
// asks for a full snapshot.
func TestWriterBrokenChain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	store := &failingStore{Store: NewMemStore(), failAt: 4}
	var errs []error
	w, err := NewWriter(WriterConfig{Store: store, Buffers: 8, OnStored: func(s Stored) { errs = append(errs, s.Err) }})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	s := newTestSet(t)
	for n := uint64(1); n <= 6; n++ {
		s.step(n)
		buf := w.Buffer()
		s.set.CaptureInto(buf, n == 1)
		w.Submit(Job{Meta: Meta{Tick: n, Pos: n, Hash: s.set.Hash(), Full: n == 1}, Capture: buf})
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if !w.NeedFull() {
		t.Fatal("writer does not ask for a full snapshot after a failure")
	}
	stop()
	<-done
	if len(errs) != 6 || errs[2] != nil || errs[3] == nil || !errors.Is(errs[4], ErrChainBroken) || !errors.Is(errs[5], ErrChainBroken) {
		t.Fatalf("outcomes %v", errs)
	}
}

type failingStore struct {
	Store
	puts, failAt int
}

func (f *failingStore) Put(ctx context.Context, m Meta, b []byte) error {
	f.puts++
	if f.puts == f.failAt {
		return errors.New("disk full")
	}
	return f.Store.Put(ctx, m, b)
}

// The policy captures when the recovery estimate would exceed its budget
// or the dirty share of a full snapshot reaches DeltaFraction, and starts a
// new base when the chain grows too heavy.
func TestPolicy(t *testing.T) {
	s := NewScheduler(Policy{RecoveryTarget: 100 * time.Millisecond, Headroom: 0.5, DeltaFraction: 0.1, ChainFactor: 2, FixedCost: time.Millisecond, ReplayFactor: 1})
	if take, full := s.Decide(1, 0, true); !take || !full {
		t.Fatal("no first full snapshot")
	}
	s.Taken(1, true, 100_000)
	for range 100 {
		s.ObserveStep(time.Millisecond)
	}
	// 1 ms per tick, 50 ms budget, 0.3 ms restore: due after ~48 ticks.
	var at uint64
	for tick := uint64(2); tick < 200; tick++ {
		if take, _ := s.Decide(tick, 1000, false); take {
			at = tick
			break
		}
	}
	if at < 40 || at > 50 {
		t.Fatalf("captured at tick %d, want about 48", at)
	}
	if take, _ := s.Decide(at, 10_000, false); !take {
		t.Fatal("a dirty share of 10% does not trigger a capture")
	}
	// Deltas of 40% of the base: the third would make the chain heavier
	// than twice the base.
	s.Taken(at, false, 40_000)
	if _, full := s.Decide(at+1, 40_000, false); full {
		t.Fatal("full too early")
	}
	s.Taken(at+1, false, 40_000)
	if take, full := s.Decide(at+2, 40_000, false); !take || !full {
		t.Fatal("no new base for a heavy chain")
	}
	if est := s.Estimate(at + 11); est < 11*time.Millisecond || est > 14*time.Millisecond {
		t.Fatalf("estimate %v", est)
	}
}

// FuzzDecodeSnapshot feeds arbitrary bytes to the snapshot and metadata
// decoders, as they are and with their checksums corrected. They must never
// panic, and what they accept must be consistent. The seed corpus
// (testdata/fuzz/FuzzDecodeSnapshot) holds full and delta snapshots.
func FuzzDecodeSnapshot(f *testing.F) {
	c, err := DefaultCodec()
	if err != nil {
		f.Fatal(err)
	}
	s := newTestSet(f)
	s.step(1)
	full, _ := encodeCapture(f, c, Meta{Shard: 1, Tick: 1, Pos: 3, Full: true, Base: 1, ChainLen: 1}, s.set.CaptureFull())
	s.step(2)
	delta, m := encodeCapture(f, c, Meta{Shard: 1, Tick: 2, Pos: 6, Base: 1, Prev: 1, ChainLen: 2, ChainRawBytes: 1000}, s.set.Capture())
	f.Add(full)
	f.Add(delta)
	f.Add(EncodeMeta(m))
	s.step(3)
	fenced, fm := encodeCapture(f, c, Meta{Shard: 1, Tick: 3, Pos: 9, Full: true, Base: 3, ChainLen: 1,
		Fences: []Fence{{Shard: 0, Epoch: 4, Base: 2}, {Shard: 1, Epoch: 9, Base: 7}}}, s.set.CaptureFull())
	f.Add(fenced)
	f.Add(EncodeMeta(fm))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkDecode(t, c, data)
		if len(data) >= 4 {
			checkDecode(t, c, reseal(data))
		}
		if len(data) >= headerLen+4 {
			// Also reach the payload checks: a valid header with the
			// payload length recorded as given.
			b := bytes.Clone(data)
			if m, hl, err := decodeHeader(b); err == nil && hl <= len(b)-4 {
				m.StoredBytes = uint64(len(b) - hl - 4)
				b = appendHeader(nil, &m)
				b = append(b, data[hl:len(data)-4]...)
				checkDecode(t, c, reseal(append(b, 0, 0, 0, 0)))
			}
		}
	})
}

func le32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }

func crc(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

func reseal(data []byte) []byte {
	b := bytes.Clone(data[:len(data)-4])
	return append(b, le32(crc(b))...)
}

func checkDecode(t *testing.T, c *Codec, data []byte) {
	if m, sc, err := c.Decode(data); err == nil {
		if err := m.Validate(); err != nil {
			t.Fatalf("accepted invalid metadata: %v", err)
		}
		if sc.Full != m.Full || sc.Hash != m.SetHash {
			t.Fatal("accepted a capture that disagrees with its metadata")
		}
		if m.Full {
			fresh := newTestSet(t)
			if fresh.set.Restore(sc) == nil && fresh.set.Hash() != sc.Hash {
				t.Fatal("restored set does not have the capture's hash")
			}
		}
	} else if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("error not wrapping ErrCorrupt: %v", err)
	}
	if m, err := DecodeMeta(data); err == nil {
		if !bytes.Equal(EncodeMeta(m), data) {
			t.Fatal("metadata re-encodes differently")
		}
	}
}

// TestWriteFuzzCorpus regenerates the seed corpus when
// BROADSIDE_WRITE_CORPUS is set.
func TestWriteFuzzCorpus(t *testing.T) {
	if os.Getenv("BROADSIDE_WRITE_CORPUS") == "" {
		t.Skip("set BROADSIDE_WRITE_CORPUS=1 to regenerate testdata/fuzz/FuzzDecodeSnapshot")
	}
	c, _ := DefaultCodec()
	s := newTestSet(t)
	s.step(1)
	full, _ := encodeCapture(t, c, Meta{Shard: 1, Tick: 1, Pos: 3, Full: true, Base: 1, ChainLen: 1}, s.set.CaptureFull())
	s.step(2)
	delta, m := encodeCapture(t, c, Meta{Shard: 1, Tick: 2, Pos: 6, Base: 1, Prev: 1, ChainLen: 2, ChainRawBytes: 1000}, s.set.Capture())
	dir := filepath.Join("testdata", "fuzz", "FuzzDecodeSnapshot")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"full": full, "delta": delta, "meta": EncodeMeta(m), "truncated": full[:len(full)/2]} {
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
