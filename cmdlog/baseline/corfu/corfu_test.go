package corfu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/anoptic/broadside/cmdlog/baseline/pipe"
	"github.com/anoptic/broadside/cmdlog/shardstore"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func startCluster(t *testing.T, cfg LocalConfig) *LocalCluster {
	t.Helper()
	lc, err := StartLocal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lc.Close() })
	return lc
}

// TestAppendDistinctPositionsReadBack appends concurrently (so batches form)
// and checks that every append got its own position, that positions are
// dense, and that each position reads back the record appended there, on a
// Pebble-backed chain and an in-memory one.
func TestAppendDistinctPositionsReadBack(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  LocalConfig
	}{
		{"memory", LocalConfig{}},
		{"pebble-sync", LocalConfig{Dir: t.TempDir(), Durability: shardstore.SyncWrites}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			lc := startCluster(t, tc.cfg)
			c, err := lc.NewClient(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			const appenders, each = 16, 40
			var mu sync.Mutex
			byPos := map[uint64]string{}
			var wg sync.WaitGroup
			for g := range appenders {
				wg.Go(func() {
					for i := range each {
						rec := fmt.Sprintf("rec-%d-%d", g, i)
						pos, err := c.Append(ctx, []byte(rec))
						if err != nil {
							t.Errorf("append %s: %v", rec, err)
							return
						}
						mu.Lock()
						if prev, dup := byPos[pos]; dup {
							t.Errorf("position %d given to %s and %s", pos, prev, rec)
						}
						byPos[pos] = rec
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			if t.Failed() {
				return
			}
			const total = appenders * each
			if len(byPos) != total {
				t.Fatalf("%d positions for %d appends", len(byPos), total)
			}
			for pos := uint64(1); pos <= total; pos++ {
				want, ok := byPos[pos]
				if !ok {
					t.Fatalf("position %d not handed out (positions must be dense)", pos)
				}
				got, err := c.Read(ctx, pos)
				if err != nil {
					t.Fatalf("read %d: %v", pos, err)
				}
				if string(got) != want {
					t.Fatalf("position %d holds %q, want %q", pos, got, want)
				}
			}
			if _, err := c.Read(ctx, total+1); !errors.Is(err, ErrUnwritten) {
				t.Fatalf("read past the tail: %v, want ErrUnwritten", err)
			}
			if got := lc.Sequencer.Issued(); got != total {
				t.Fatalf("sequencer issued %d positions, want %d", got, total)
			}
		})
	}
}

// TestWriteOnce checks that a replica refuses a second write to a position
// and keeps the first record.
func TestWriteOnce(t *testing.T) {
	ctx := testCtx(t)
	lc := startCluster(t, LocalConfig{Replicas: 1})
	c, err := lc.NewClient(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pos, err := c.Append(ctx, []byte("first"))
	if err != nil {
		t.Fatal(err)
	}
	// Write the same position again, bypassing the sequencer.
	reply, err := c.chain[0].Call(ctx, appendWriteRequest(nil, pos, [][]byte{[]byte("second")}))
	if err != nil {
		t.Fatal(err)
	}
	if len(reply) != 1 || !errors.Is(statusErr(reply[0]), ErrWritten) {
		t.Fatalf("rewrite reply %v, want status written", reply)
	}
	got, err := c.Read(ctx, pos)
	if err != nil || string(got) != "first" {
		t.Fatalf("read %d: %q, %v; want \"first\"", pos, got, err)
	}
	// A malformed request is refused, and the link stays usable.
	reply, err = c.chain[0].Call(ctx, []byte{opWrite, 1, 2})
	if err != nil || len(reply) != 1 || reply[0] != statusBad {
		t.Fatalf("malformed write: %v, %v; want status bad", reply, err)
	}
	if _, err := c.Append(ctx, []byte("third")); err != nil {
		t.Fatalf("append after a malformed request: %v", err)
	}
}

func TestPipeCallAfterClose(t *testing.T) {
	ctx := testCtx(t)
	lc := startCluster(t, LocalConfig{Replicas: 1})
	c, err := lc.NewClient(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if _, err := c.Append(ctx, []byte("x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after close: %v, want ErrClosed", err)
	}
	if _, err := c.seq.Call(ctx, appendTokenRequest(nil, 1)); !errors.Is(err, pipe.ErrClosed) {
		t.Fatalf("call after close: %v, want pipe.ErrClosed", err)
	}
}

func TestWireRoundTrip(t *testing.T) {
	recs := [][]byte{[]byte("a"), {}, bytes.Repeat([]byte{7}, 300)}
	first, got, err := decodeWriteRequest(appendWriteRequest(nil, 42, recs), nil)
	if err != nil || first != 42 || len(got) != len(recs) {
		t.Fatalf("decode: %d, %d records, %v", first, len(got), err)
	}
	for i := range recs {
		if !bytes.Equal(got[i], recs[i]) {
			t.Fatalf("record %d: %q, want %q", i, got[i], recs[i])
		}
	}
	if n, err := decodeTokenRequest(appendTokenRequest(nil, 9)); err != nil || n != 9 {
		t.Fatalf("token request: %d, %v", n, err)
	}
	if p, err := decodeTokenReply(appendTokenReply(nil, 77)); err != nil || p != 77 {
		t.Fatalf("token reply: %d, %v", p, err)
	}
	if p, err := decodeReadRequest(appendReadRequest(nil, 5)); err != nil || p != 5 {
		t.Fatalf("read request: %d, %v", p, err)
	}
}

// FuzzDecodeRequest feeds arbitrary bytes to the decoders of requests a
// node receives from the network: they must return an error, never panic,
// and what they accept must re-encode to the same bytes.
func FuzzDecodeRequest(f *testing.F) {
	f.Add(appendWriteRequest(nil, 1, [][]byte{[]byte("x"), []byte("yz")}))
	f.Add(appendTokenRequest(nil, 3))
	f.Add(appendReadRequest(nil, 8))
	f.Add([]byte{opWrite, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 255, 255, 255, 255})
	f.Fuzz(func(t *testing.T, b []byte) {
		if first, recs, err := decodeWriteRequest(b, nil); err == nil {
			if again := appendWriteRequest(nil, first, recs); !bytes.Equal(again, b) {
				t.Fatalf("write request re-encodes to %x, was %x", again, b)
			}
		}
		if n, err := decodeTokenRequest(b); err == nil {
			if again := appendTokenRequest(nil, n); !bytes.Equal(again, b) {
				t.Fatalf("token request re-encodes to %x, was %x", again, b)
			}
		}
		if p, err := decodeReadRequest(b); err == nil {
			if again := appendReadRequest(nil, p); !bytes.Equal(again, b) {
				t.Fatalf("read request re-encodes to %x, was %x", again, b)
			}
		}
		_, _ = decodeTokenReply(b)
	})
}
