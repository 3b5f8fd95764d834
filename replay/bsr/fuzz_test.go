package bsr

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/snapshot"
)

// fuzzRecording returns a small valid recording of l's first ticks, for
// seeds.
func fuzzRecording(t testing.TB, shards uint32, ticks uint64, policy SnapshotPolicy) []byte {
	l := makeTestLog(t, shards, ticks, 99)
	path, _ := recordTestLog(t, l, RecordConfig{Snapshots: policy, Signer: testSigner(t)})
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// exercise runs every read path on a file that opened: nothing may panic,
// and every failure must be an error.
func exercise(t *testing.T, r *Reader) {
	_ = r.Info()
	_ = r.Truncated()
	for tick := r.FirstTick(); tick <= r.LastTick() && tick < r.FirstTick()+4; tick++ {
		_, _ = r.Tick(tick)
		_, _ = r.Hash(0, tick)
	}
	if r.LastTick() >= r.FirstTick() {
		_, _ = r.Hashes(0, r.FirstTick(), r.LastTick())
	}
	_, _ = r.Lineage()
	if src, err := r.Source(); err == nil {
		ctx := context.Background()
		for range 100000 {
			if _, err := src.Next(ctx); err != nil {
				break
			}
		}
	}
	_, _ = r.ScanTo(r.LastTick())
	_, _ = VerifySigned(r, testVerifier(t))
	shards := r.Header().Shards
	if shards > 8 || r.LastTick()-r.BaseTick() > 5000 {
		return // the test sim's work grows with these; the decoders are covered above
	}
	newSim := func(s uint32) (replay.TableSim, error) { return newCounterSim(s, shards) }
	if sk, err := NewSeeker(r, newSim); err == nil {
		_ = sk.Seek(r.LastTick())
		_ = sk.Seek(r.BaseTick() + (r.LastTick()-r.BaseTick())/2)
		_ = sk.Step()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _ = Verify(ctx, r, newSim, nil)
}

// FuzzOpen feeds arbitrary files to the reader: corrupted, truncated and
// foreign files must yield errors (or a recovered recording), never a
// panic or an unbounded allocation.
func FuzzOpen(f *testing.F) {
	good := fuzzRecording(f, 2, 90, SnapshotPolicy{FullEvery: 30, DeltaEvery: 10})
	f.Add(good)
	f.Add(good[:len(good)-trailerLen])
	f.Add(good[:len(good)/2])
	f.Add([]byte("BSREPLAY"))
	f.Add([]byte("\x7fELF\x02\x01\x01"))
	dir := f.TempDir()
	n := 0
	f.Fuzz(func(t *testing.T, b []byte) {
		n++
		path := filepath.Join(dir, fmt.Sprintf("f%d.bsr", n))
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(path)
		r, err := Open(path)
		if err != nil {
			return
		}
		defer r.Close()
		exercise(t, r)
	})
}

// FuzzDecodePayloads feeds arbitrary payloads to each chunk decoder.
func FuzzDecodePayloads(f *testing.F) {
	good := fuzzRecording(f, 2, 60, SnapshotPolicy{FullEvery: 30, DeltaEvery: 10})
	r, err := newReader(mustOpenFile(f, writeFile(f, good)), "seed", false)
	if err != nil {
		f.Fatal(err)
	}
	for _, c := range r.refs {
		raw, err := r.readRaw(&c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint8(c.Kind), uint8(2), c.First, c.Last, c.Aux1, c.Aux2, raw)
	}
	idx := appendIndex(nil, r.refs)
	f.Add(uint8(KindIndex), uint8(2), uint64(0), uint64(0), uint64(0), uint64(len(good)), idx)
	f.Fuzz(func(t *testing.T, kind, shards uint8, first, last, aux1, aux2 uint64, raw []byte) {
		c := chunkRef{Kind: ChunkKind(kind), First: first, Last: last, Aux1: aux1, Aux2: aux2, Stored: 1, Raw: uint32(len(raw))}
		if shards == 0 {
			shards = 1
		}
		switch c.Kind {
		case KindTicks:
			if c.check(uint32(shards)) == nil {
				if tc, err := decodeTicks(raw, &c, int(shards)); err == nil && tc.last() != last {
					t.Fatalf("decoded ticks %d..%d, chunk says %d..%d", tc.first, tc.last(), first, last)
				}
			}
		case KindCommands:
			if c.check(uint32(shards)) == nil {
				if es, err := decodeEntries(raw, &c); err == nil {
					for i := 1; i < len(es); i++ {
						if es[i].Pos <= es[i-1].Pos || es[i].Pos > aux2 {
							t.Fatalf("entries out of order")
						}
					}
				}
			}
		case KindMeta:
			_, _, _ = decodeMeta(raw, &c)
		case KindIndex:
			_, _ = decodeIndex(raw, uint32(shards), 16, int64(aux2))
		case KindTree:
			if tb, err := decodeTreeBase(raw, &c); err == nil {
				if _, err := newLogTree(tb.Size, tb.Frontier); err != nil {
					t.Fatalf("decoded tree base of %d leaves: %v", tb.Size, err)
				}
			}
		case KindCheckpoint:
			if cp, err := openCheckpoint(raw, &c, nil); err == nil && (cp.Tick != first || uint64(cp.Size) != aux2) {
				t.Fatalf("checkpoint %+v, chunk says tick %d size %d", cp, first, aux2)
			}
			_, _ = openCheckpoint(raw, &c, testVerifier(t))
		case KindFields:
			if c.check(uint32(shards)) == nil {
				if fs, err := decodeFields(raw, &c, int(shards)); err == nil && uint64(len(fs)) != (last-first+1)*uint64(shards) {
					t.Fatalf("%d field sums for ticks %d..%d of %d shards", len(fs), first, last, shards)
				}
			}
		}
	})
}

// FuzzDecodeForkMeta decodes the metadata values of forks and field
// layouts: errors, never a panic, and what decodes re-encodes the same.
func FuzzDecodeForkMeta(f *testing.F) {
	f.Add(appendForkInfo(nil, &ForkInfo{Of: "m.bsr", At: 300, From: 255, WithoutPlayers: []uint32{2}, Dropped: []uint64{9, 12}, AsBot: []uint32{4}, Removed: 7}))
	f.Add(appendLayout(nil, map[uint32][]int{3: {0, 8, 12, 16}, 5: {0, 4}}))
	f.Add([]byte{1, 0})
	f.Add(appendForkInfo(nil, &ForkInfo{Of: "m.bsr", At: 300, From: 255, AsBot: []uint32{4}, Removed: 7, Signer: "analyst"}))
	f.Add(appendFences(nil, []snapshot.Fence{{Shard: 0, Epoch: 1}, {Shard: 1, Epoch: 2}, {Shard: 3, Epoch: 1 << 40}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		if fs, err := decodeFences(b, 4); err == nil {
			if again := appendFences(nil, fs); string(again) != string(b) {
				t.Fatalf("fences %+v re-encode differently", fs)
			}
		}
		if fi, err := decodeForkInfo(b); err == nil {
			if again := appendForkInfo(nil, &fi); string(again) != string(b) {
				t.Fatalf("fork info %+v re-encodes differently", fi)
			}
		}
		if l, err := decodeLayout(b); err == nil {
			if again, err := decodeLayout(appendLayout(nil, l)); err != nil || len(again) != len(l) {
				t.Fatalf("layout %v does not round-trip: %v", l, err)
			}
		}
	})
}

func mustOpenFile(t testing.TB, path string) *os.File {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestWriteFuzzCorpus regenerates the committed seed corpus under
// testdata/fuzz (run with BSR_WRITE_CORPUS=1 after a format change).
func TestWriteFuzzCorpus(t *testing.T) {
	if os.Getenv("BSR_WRITE_CORPUS") != "1" {
		t.Skip("set BSR_WRITE_CORPUS=1 to regenerate testdata/fuzz")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzOpen")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	small := fuzzRecording(t, 2, 45, SnapshotPolicy{FullEvery: 20, DeltaEvery: 5})
	seeds := map[string][]byte{
		"valid":          small,
		"no-trailer":     small[:len(small)-trailerLen],
		"cut-mid-chunk":  small[:len(small)*2/3],
		"header-only":    small[:60],
		"bad-version":    append([]byte("BSREPLAY\x02\x00"), small[10:80]...),
		"one-shard-long": fuzzRecording(t, 1, 70, SnapshotPolicy{}),
	}
	flipped := append([]byte(nil), small...)
	flipped[len(flipped)/3] ^= 0x20
	seeds["flipped-byte"] = flipped
	for name, b := range seeds {
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// One payload of each kind for FuzzDecodePayloads.
	pdir := filepath.Join("testdata", "fuzz", "FuzzDecodePayloads")
	if err := os.MkdirAll(pdir, 0o755); err != nil {
		t.Fatal(err)
	}
	r := mustOpen(t, writeFile(t, small))
	seen := map[ChunkKind]bool{}
	for _, c := range r.refs {
		if seen[c.Kind] {
			continue
		}
		seen[c.Kind] = true
		raw, err := r.readRaw(&c)
		if err != nil {
			t.Fatal(err)
		}
		body := fmt.Sprintf("go test fuzz v1\nuint8(%d)\nuint8(2)\nuint64(%d)\nuint64(%d)\nuint64(%d)\nuint64(%d)\n[]byte(%q)\n",
			c.Kind, c.First, c.Last, c.Aux1, c.Aux2, raw)
		if err := os.WriteFile(filepath.Join(pdir, c.Kind.String()), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
