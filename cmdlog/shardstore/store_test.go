package shardstore

import (
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/goleak"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/cmdlog/shard"
	"github.com/anoptic/broadside/cmdlog/shardstore/storagetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestMemoryConformance(t *testing.T) {
	storagetest.Run(t, storagetest.Harness{
		Open: func(*testing.T) shard.Storage { return NewMemory() },
		Reopen: func(_ *testing.T, s shard.Storage) shard.Storage {
			return s.(*Memory).Clone()
		},
	})
}

// memFSHarness runs Pebble on an in-memory file system; a reopen is a clean
// Close and Open.
func memFSHarness(opts Options) storagetest.Harness {
	return storagetest.Harness{
		Open: func(t *testing.T) shard.Storage {
			o := opts
			o.FS = vfs.NewMem()
			return openPebble(t, "shard", o)
		},
		Reopen: func(t *testing.T, s shard.Storage) shard.Storage {
			p := s.(*Pebble)
			if err := p.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			o := opts
			o.FS = p.fs
			return openPebble(t, "shard", o)
		},
	}
}

func TestPebbleConformance(t *testing.T) {
	t.Run("memfs", func(t *testing.T) { storagetest.Run(t, memFSHarness(Options{})) })
	t.Run("memfs nosync", func(t *testing.T) { storagetest.Run(t, memFSHarness(Options{Durability: NoSyncWrites})) })
	t.Run("disk", func(t *testing.T) {
		storagetest.Run(t, storagetest.Harness{
			Open: func(t *testing.T) shard.Storage {
				return openPebble(t, filepath.Join(t.TempDir(), "shard"), Options{})
			},
			Reopen: func(t *testing.T, s shard.Storage) shard.Storage {
				p := s.(*Pebble)
				if err := p.Close(); err != nil {
					t.Fatalf("Close: %v", err)
				}
				return openPebble(t, p.dir, Options{})
			},
		})
	})
	// A reopen here is a crash: the file system keeps only what was synced.
	t.Run("crash", func(t *testing.T) {
		storagetest.Run(t, storagetest.Harness{
			Open: func(t *testing.T) shard.Storage {
				return openPebble(t, "shard", Options{FS: vfs.NewCrashableMem()})
			},
			Reopen: func(t *testing.T, s shard.Storage) shard.Storage {
				p := s.(*Pebble)
				crashed := p.fs.(*vfs.MemFS).CrashClone(vfs.CrashCloneCfg{})
				if err := p.Close(); err != nil {
					t.Fatalf("Close: %v", err)
				}
				return openPebble(t, "shard", Options{FS: crashed})
			},
		})
	})
}

// openPebble opens a store that is closed when the test ends (unless the
// test closed it).
func openPebble(t testing.TB, dir string, opts Options) *Pebble {
	t.Helper()
	p, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

func TestMemoryClone(t *testing.T) {
	m := NewMemory()
	if err := m.Apply(shard.Writes{Puts: storagetest.Range(1, 10, "a"), Meta: &shard.Meta{Epoch: 1}}); err != nil {
		t.Fatal(err)
	}
	c := m.Clone()
	if err := m.Apply(shard.Writes{Puts: storagetest.Range(5, 12, "b"), TrimTo: 2, Meta: &shard.Meta{Epoch: 2}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Apply(shard.Writes{HasDeleteAbove: true, DeleteAbove: 3}); err != nil {
		t.Fatal(err)
	}
	storagetest.CheckState(t, c, storagetest.State{Entries: storagetest.Range(1, 3, "a"), Meta: shard.Meta{Epoch: 1}})
	want := append(storagetest.Range(3, 4, "a"), storagetest.Range(5, 12, "b")...)
	storagetest.CheckState(t, m, storagetest.State{Entries: want, Meta: shard.Meta{Epoch: 2}})
	if m.Len() != 10 || c.Len() != 3 {
		t.Errorf("Len = %d, %d; want 10, 3", m.Len(), c.Len())
	}
}

func TestPebbleClosed(t *testing.T) {
	p := openPebble(t, "shard", Options{FS: vfs.NewMem()})
	if err := p.Apply(shard.Writes{Puts: storagetest.Range(1, 3, "a")}); err != nil {
		t.Fatal(err)
	}
	// Close from inside a Scan: it waits for the Scan, and calls made by the
	// callback after Close began fail instead of deadlocking.
	closed := make(chan error, 1)
	err := p.Scan(1, 3, func(e msg.Entry) bool {
		if e.Pos == 1 {
			go func() { closed <- p.Close() }()
			for {
				p.mu.Lock()
				c := p.closed
				p.mu.Unlock()
				if c {
					break
				}
				time.Sleep(time.Millisecond)
			}
		}
		if _, _, err := p.Get(e.Pos); !errors.Is(err, ErrClosed) {
			t.Errorf("Get inside Scan after Close = %v, want ErrClosed", err)
		}
		return true
	})
	if err != nil {
		t.Fatalf("Scan: %v", err)
	}
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	for name, err := range map[string]error{
		"Apply": p.Apply(shard.Writes{Puts: storagetest.Range(1, 1, "a")}),
		"Scan":  p.Scan(1, 2, func(msg.Entry) bool { return true }),
		"Sync":  p.Sync(),
		"Close": p.Close(),
	} {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", name, err)
		}
	}
	if _, err := p.Meta(); !errors.Is(err, ErrClosed) {
		t.Errorf("Meta after Close = %v, want ErrClosed", err)
	}
}

// TestPebbleCorruption writes bad values under entry and meta keys with
// Pebble directly and checks that every read path reports ErrCorrupt.
func TestPebbleCorruption(t *testing.T) {
	fs := vfs.NewMem()
	p := openPebble(t, "shard", Options{FS: fs})
	if err := p.Apply(shard.Writes{Puts: storagetest.Range(1, 5, "a"), Meta: &shard.Meta{Epoch: 1}}); err != nil {
		t.Fatal(err)
	}
	stored, closer, err := p.db.Get(entryKey(3))
	if err != nil {
		t.Fatal(err)
	}
	good := append([]byte(nil), stored...)
	closer.Close()
	flipped := append([]byte(nil), good...)
	flipped[len(flipped)-1] ^= 1
	for name, val := range map[string][]byte{
		"flipped bit":    flipped,
		"short":          {1, 2},
		"moved from 3→4": append([]byte(nil), good...), // valid for 3, not for 4
	} {
		t.Run(name, func(t *testing.T) {
			if err := p.db.Set(entryKey(4), val, pebble.Sync); err != nil {
				t.Fatal(err)
			}
			if _, _, err := p.Get(4); !errors.Is(err, ErrCorrupt) {
				t.Errorf("Get(4) = %v, want ErrCorrupt", err)
			}
			var seen []uint64
			err := p.Scan(1, 5, func(e msg.Entry) bool { seen = append(seen, e.Pos); return true })
			if !errors.Is(err, ErrCorrupt) {
				t.Errorf("Scan = %v, want ErrCorrupt", err)
			}
			if len(seen) != 3 {
				t.Errorf("Scan visited %v before the corrupt entry, want [1 2 3]", seen)
			}
			if _, ok, err := p.Get(3); err != nil || !ok {
				t.Errorf("Get(3) = %v, %v; want the intact entry", ok, err)
			}
		})
	}
	if err := p.db.Set(keyMeta, []byte{0, 0, 0, 0, 1}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Meta(); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Meta = %v, want ErrCorrupt", err)
	}
	// A key in the entry space that is not an entry key.
	if err := p.db.Set([]byte{prefixEntry, 1}, good, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := p.Scan(0, math.MaxUint64, func(msg.Entry) bool { return true }); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Scan over a bad key = %v, want ErrCorrupt", err)
	}
	// A store in another format is refused.
	if err := p.db.Set(keyFormat, []byte("other/9"), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := Open("shard", Options{FS: fs}); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Open of a foreign format = %v, want ErrCorrupt", err)
	}
}

func TestOpenErrors(t *testing.T) {
	if _, err := Open("shard", Options{FS: vfs.NewMem(), Durability: 7}); err == nil {
		t.Error("Open with an unknown durability succeeded")
	}
	f := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(filepath.Join(f, "shard"), Options{}); err == nil {
		t.Error("Open under a regular file succeeded")
	}
}

// randomWrites returns a random batch over positions 1..64 (with entries of
// up to 3 KiB so that a 64 KiB memtable flushes often).
func randomWrites(rng *rand.Rand, tag string) shard.Writes {
	var w shard.Writes
	n := rng.IntN(20)
	for range n {
		e := storagetest.E(1+rng.Uint64N(64), tag)
		e.Record.Data = append(e.Record.Data, make([]byte, rng.IntN(3<<10))...)
		w.Puts = append(w.Puts, e)
	}
	if rng.IntN(8) == 0 {
		w.HasDeleteAbove, w.DeleteAbove = true, rng.Uint64N(70)
	}
	if rng.IntN(10) == 0 {
		w.TrimTo = rng.Uint64N(30)
	}
	if rng.IntN(3) == 0 {
		w.Meta = &shard.Meta{Epoch: rng.Uint64N(5), StableGP: rng.Uint64(), Trimmed: rng.Uint64N(30)}
	}
	return w
}

// TestPebbleCrashSync applies random batches to a synced store, crashes the
// file system at random points (keeping a random share of unsynced data),
// reopens and checks that the store holds exactly what every returned Apply
// wrote.
func TestPebbleCrashSync(t *testing.T) {
	for seed := range uint64(12) {
		rng := rand.New(rand.NewPCG(seed, 1))
		fs := vfs.NewCrashableMem()
		opts := Options{FS: fs, MemTableSize: 64 << 10}
		p := openPebble(t, "shard", opts)
		model := NewMemory()
		for crash := range 3 {
			for range 20 + rng.IntN(200) {
				w := randomWrites(rng, "s")
				if err := p.Apply(w); err != nil {
					t.Fatalf("seed %d: Apply: %v", seed, err)
				}
				_ = model.Apply(w)
			}
			crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(101), RNG: rng})
			if err := p.Close(); err != nil {
				t.Fatalf("seed %d: Close: %v", seed, err)
			}
			fs = crashed
			opts.FS = fs
			p = openPebble(t, "shard", opts)
			want, _ := storagetest.ReadState(model)
			got, err := storagetest.ReadState(p)
			if err != nil {
				t.Fatalf("seed %d crash %d: read after reopen: %v", seed, crash, err)
			}
			if d := storagetest.DiffEntries(got.Entries, want.Entries); d != "" || got.Meta != want.Meta {
				t.Fatalf("seed %d crash %d: after reopen: entries %s; meta %+v, want %+v", seed, crash, d, got.Meta, want.Meta)
			}
		}
	}
}

// TestPebbleCrashNoSync checks what NoSyncWrites promises: after a crash the
// store holds the state after some prefix of the Applies, and that prefix
// includes every Apply before the last Sync.
func TestPebbleCrashNoSync(t *testing.T) {
	lossy, crashes := 0, 0
	for seed := range uint64(12) {
		rng := rand.New(rand.NewPCG(seed, 2))
		fs := vfs.NewCrashableMem()
		opts := Options{FS: fs, MemTableSize: 64 << 10, Durability: NoSyncWrites}
		p := openPebble(t, "shard", opts)
		model := NewMemory()
		for crash := range 3 {
			history := []*Memory{model.Clone()} // history[k]: state after k Applies since the last crash
			synced := 0
			for range 20 + rng.IntN(200) {
				w := randomWrites(rng, "n")
				if err := p.Apply(w); err != nil {
					t.Fatalf("seed %d: Apply: %v", seed, err)
				}
				_ = model.Apply(w)
				history = append(history, model.Clone())
				if rng.IntN(40) == 0 {
					if err := p.Sync(); err != nil {
						t.Fatalf("seed %d: Sync: %v", seed, err)
					}
					synced = len(history) - 1
				}
			}
			crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(101), RNG: rng})
			if err := p.Close(); err != nil {
				t.Fatalf("seed %d: Close: %v", seed, err)
			}
			fs = crashed
			opts.FS = fs
			p = openPebble(t, "shard", opts)
			got, err := storagetest.ReadState(p)
			if err != nil {
				t.Fatalf("seed %d crash %d: read after reopen: %v", seed, crash, err)
			}
			k := len(history) - 1
			for ; k >= synced; k-- {
				want, _ := storagetest.ReadState(history[k])
				if storagetest.DiffEntries(got.Entries, want.Entries) == "" && got.Meta == want.Meta {
					break
				}
			}
			if k < synced {
				t.Fatalf("seed %d crash %d: recovered state is not the state after any prefix of >= %d of %d applies",
					seed, crash, synced, len(history)-1)
			}
			crashes++
			if k < len(history)-1 {
				lossy++
			}
			model = history[k]
		}
	}
	// Losses show the crash model bites, so TestPebbleCrashSync would catch
	// a store that does not sync.
	t.Logf("%d of %d crashes lost unsynced applies", lossy, crashes)
}

// TestPebbleCrashConcurrent crashes while several goroutines apply synced
// batches (exercising group commit) and checks that every Apply that had
// returned before the crash survived, and that each writer's surviving
// batches form a prefix of what it applied.
func TestPebbleCrashConcurrent(t *testing.T) {
	const writers = 4
	fs := vfs.NewCrashableMem()
	p := openPebble(t, "shard", Options{FS: fs, MemTableSize: 64 << 10})
	var acked [writers]atomic.Uint64 // batches that returned, per writer
	stop := make(chan struct{})
	var wg sync.WaitGroup
	// Writer g's batch i puts positions (i*writers+g)*8+1 .. +8.
	batch := func(g, i uint64) []msg.Entry {
		first := (i*writers+g)*8 + 1
		return storagetest.Range(first, first+7, "c")
	}
	for g := range uint64(writers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := uint64(0); ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if err := p.Apply(shard.Writes{Puts: batch(g, i)}); err != nil {
					t.Errorf("writer %d: Apply: %v", g, err)
					return
				}
				acked[g].Store(i + 1)
			}
		}()
	}
	for acked[0].Load() < 50 {
		time.Sleep(time.Millisecond)
	}
	var before [writers]uint64
	for g := range before {
		before[g] = acked[g].Load()
	}
	crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 50, RNG: rand.New(rand.NewPCG(3, 3))})
	close(stop)
	wg.Wait()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	q := openPebble(t, "shard", Options{FS: crashed})
	for g := range uint64(writers) {
		var i uint64
		for ; ; i++ {
			got, err := storagetest.ScanAll(q, batch(g, i)[0].Pos, batch(g, i)[7].Pos)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) == 0 {
				break
			}
			if d := storagetest.DiffEntries(got, batch(g, i)); d != "" {
				t.Fatalf("writer %d batch %d partially recovered: %s", g, i, d)
			}
		}
		if i < before[g] {
			t.Errorf("writer %d: %d batches recovered, but %d had been acknowledged before the crash", g, i, before[g])
		}
		for j := i + 1; j < i+50; j++ { // nothing after the first gap
			if got, _ := storagetest.ScanAll(q, batch(g, j)[0].Pos, batch(g, j)[7].Pos); len(got) != 0 {
				t.Errorf("writer %d: batch %d recovered after missing batch %d", g, j, i)
			}
		}
		t.Logf("writer %d: %d acknowledged before the crash, %d recovered", g, before[g], i)
	}
}

// TestPebbleScanPanic checks that a panicking Scan callback releases the
// iterator and the store, so Close still succeeds.
func TestPebbleScanPanic(t *testing.T) {
	p := openPebble(t, "shard", Options{FS: vfs.NewMem()})
	if err := p.Apply(shard.Writes{Puts: storagetest.Range(1, 3, "a")}); err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the callback's panic did not propagate")
			}
		}()
		_ = p.Scan(1, 3, func(msg.Entry) bool { panic("callback") })
	}()
	if err := p.Close(); err != nil {
		t.Fatalf("Close after a panicking Scan: %v", err)
	}
}

func TestMetaKeySortsAboveEntries(t *testing.T) {
	// The Meta key is rewritten with nearly every batch; below the entries
	// it would make every flushed table's key range cover all older entries
	// (see the key layout in codec.go).
	for _, k := range [][]byte{entryKey(0), entryKey(math.MaxUint64), keyEntriesEnd} {
		if string(keyMeta) <= string(k) {
			t.Errorf("Meta key %x sorts at or below %x", keyMeta, k)
		}
	}
}

func TestOpenMovesFormat1(t *testing.T) {
	for _, withMeta := range []bool{true, false} {
		fs := vfs.NewMem()
		p, err := Open("shard", Options{FS: fs})
		if err != nil {
			t.Fatal(err)
		}
		w := shard.Writes{Puts: storagetest.Range(1, 5, "a")}
		want := shard.Meta{}
		if withMeta {
			want = shard.Meta{Epoch: 3, StableGP: 4, Trimmed: 0}
			w.Meta = &want
		}
		if err := p.Apply(w); err != nil {
			t.Fatal(err)
		}
		// Rewrite the store as format 1 left it: Meta below the entries.
		if withMeta {
			v, closer, err := p.db.Get(keyMeta)
			if err != nil {
				t.Fatal(err)
			}
			v = append([]byte(nil), v...)
			_ = closer.Close()
			if err := p.db.Set(keyMetaV1, v, pebble.Sync); err != nil {
				t.Fatal(err)
			}
			if err := p.db.Delete(keyMeta, pebble.Sync); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.db.Set(keyFormat, []byte(formatV1), pebble.Sync); err != nil {
			t.Fatal(err)
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}

		p = openPebble(t, "shard", Options{FS: fs})
		storagetest.CheckState(t, p, storagetest.State{Entries: storagetest.Range(1, 5, "a"), Meta: want})
		v, closer, err := p.db.Get(keyFormat)
		if err != nil {
			t.Fatal(err)
		}
		if string(v) != formatVersion {
			t.Errorf("format after Open = %q, want %q", v, formatVersion)
		}
		_ = closer.Close()
		if _, _, err := p.db.Get(keyMetaV1); !errors.Is(err, pebble.ErrNotFound) {
			t.Errorf("format 1's Meta key after Open: %v, want gone", err)
		}
		next := shard.Meta{Epoch: 4, StableGP: 5}
		if err := p.Apply(shard.Writes{Meta: &next}); err != nil {
			t.Fatal(err)
		}
		if m, err := p.Meta(); err != nil || m != next {
			t.Errorf("Meta after a write = %+v, %v; want %+v", m, err, next)
		}
	}
}
