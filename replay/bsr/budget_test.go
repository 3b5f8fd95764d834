package bsr

import (
	"context"
	"errors"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// allocated returns the bytes allocated so far.
func allocated() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.TotalAlloc
}

// TestHostileCommandsChunk: a commands chunk of millions of empty entries
// compresses to a few KB; reading it is refused before the entries are
// allocated (without the budget they took about 400 MB).
func TestHostileCommandsChunk(t *testing.T) {
	const n = 8<<20 - 1
	dst := filepath.Join(t.TempDir(), "hostile.bsr")
	// Write the hostile file: the header, then a commands chunk of n
	// entries of 4 bytes (position +1, client 0, seq 0, no data).
	w, err := Create(dst, testHeader(1), WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	raw := make([]byte, 0, 4*n+8)
	raw = appendUvarint(raw, n)
	for range n {
		raw = append(raw, 1, 0, 0, 0)
	}
	if err := w.writeChunk(chunkRef{Kind: KindCommands, First: 1, Last: 1, Aux1: 0, Aux2: n}, raw); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	raw = nil
	if st := w.Stats(); st.Bytes > 64<<10 {
		t.Fatalf("the hostile file is %d bytes", st.Bytes)
	}
	runtime.GC()
	before := allocated()
	r := mustOpen(t, dst)
	c := r.refs[0]
	_, err = r.commandsChunk(&c)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "budget") {
		t.Fatalf("hostile chunk: %v", err)
	}
	if got := allocated() - before; got > 2*MaxCachedRaw {
		t.Fatalf("reading the hostile chunk allocated %d MiB", got>>20)
	}
	// A chunk header declaring more than the budget is refused before
	// anything is decompressed.
	hc := chunkRef{Kind: KindCommands, First: 1, Last: 1, Aux2: 1, Raw: MaxCachedRaw + 1, Stored: 10}
	if err := hc.check(1); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("over-budget header: %v", err)
	}
}

func appendUvarint(b []byte, x uint64) []byte {
	for x >= 0x80 {
		b = append(b, byte(x)|0x80)
		x >>= 7
	}
	return append(b, byte(x))
}

// TestCacheByteBudget: the chunk cache never holds more decoded bytes
// than its budget (but the chunk in use).
func TestCacheByteBudget(t *testing.T) {
	l := makeTestLog(t, 2, 600, 22)
	path, _ := recordTestLog(t, l, RecordConfig{FlushTicks: 10})
	r := mustOpen(t, path)
	r.cacheBudget = 4 << 10
	for i := range r.cmds {
		es, err := r.commandsChunk(&r.cmds[i])
		if err != nil {
			t.Fatal(err)
		}
		if len(es) == 0 {
			t.Fatal("empty chunk")
		}
		if _, err := r.ticksChunk(&r.ticks[i]); err != nil {
			t.Fatal(err)
		}
		r.cacheMu.Lock()
		held, n := r.cacheBytes, r.lru.Len()
		r.cacheMu.Unlock()
		if held > r.cacheBudget && n > 1 {
			t.Fatalf("after chunk %d the cache holds %d bytes in %d chunks (budget %d)", i, held, n, r.cacheBudget)
		}
	}
	if len(r.cmds) < 20 {
		t.Fatalf("only %d commands chunks", len(r.cmds))
	}
	// The reader still works through a small cache.
	if res, err := Verify(context.Background(), r, l.newSim, nil); err != nil || !res.OK {
		t.Fatalf("%+v %v", res, err)
	}
}
