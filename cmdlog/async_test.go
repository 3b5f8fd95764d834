package cmdlog

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/anoptic/broadside/cmdlog/clientcore"
	"github.com/anoptic/broadside/cmdlog/msg"
)

// TestAppendWithIDAsync: asynchronous appends from one goroutine complete
// exactly once each, are stored once even when appended twice with the
// same id, and after Close report ErrClosed.
func TestAppendWithIDAsync(t *testing.T) {
	lc := startTestCluster(t)
	c := lc.NewClient(ClientConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 3000
	var mu sync.Mutex
	calls := map[uint64]int{}
	var wg sync.WaitGroup
	submit := func(seq uint64) {
		wg.Add(1)
		err := c.AppendWithIDAsync(ctx, msg.RecordID{Client: 77, Seq: seq}, []byte(fmt.Sprintf("r-%d", seq)), func(err error) {
			if err != nil {
				t.Errorf("append %d: %v", seq, err)
			}
			mu.Lock()
			calls[seq]++
			mu.Unlock()
			wg.Done()
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for seq := uint64(1); seq <= n; seq++ {
		submit(seq)
	}
	for seq := uint64(1); seq <= n; seq += 7 { // resends: stored once
		submit(seq)
	}
	wg.Wait()
	for seq := uint64(1); seq <= n; seq++ {
		want := 1
		if (seq-1)%7 == 0 {
			want = 2
		}
		if calls[seq] != want {
			t.Fatalf("append %d: done called %d times, want %d", seq, calls[seq], want)
		}
	}
	tail, err := c.CheckTail(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tail != n {
		t.Fatalf("tail %d, want %d (each id once)", tail, n)
	}
	acked := map[string]bool{}
	for seq := 1; seq <= n; seq++ {
		acked[fmt.Sprintf("r-%d", seq)] = true
	}
	checkExactlyOnce(t, readAll(t, c, tail), acked)

	var tooLarge error
	if err := c.AppendWithIDAsync(ctx, msg.RecordID{Client: 77, Seq: n + 1}, make([]byte, clientcore.MaxRecordSize+1),
		func(err error) { tooLarge = err }); err != nil || !errors.Is(tooLarge, ErrTooLarge) {
		t.Fatalf("oversized record: %v, done(%v)", err, tooLarge)
	}
	c.Close()
	if err := c.AppendWithIDAsync(ctx, msg.RecordID{Client: 77, Seq: n + 2}, []byte("late"), func(error) {
		t.Error("done called for an append refused at once")
	}); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after Close: %v", err)
	}
}
