package coord

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/anoptic/broadside/cmdlog/msg"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// sampleRecord returns a record that uses every field, varied by n.
func sampleRecord(n uint64) msg.ViewRecord {
	rec := msg.ViewRecord{
		Number:  n,
		Members: []msg.NodeID{1, 2, msg.NodeID(n%5 + 3)},
		Leader:  1,
		StartGP: 1000 * n,
		Dedup: []msg.ClientMark{
			{Client: 7, Mark: 100 + n, Above: []uint64{102 + n, 105 + n}},
			{Client: 1 << 40, Mark: n},
		},
	}
	if n%2 == 0 {
		rec.Change = &msg.ViewChange{Epoch: n + 1, Flusher: 2, NewMembers: []msg.NodeID{2, 3, 4}}
	}
	return rec
}

func sameRecord(a, b msg.ViewRecord) bool {
	return bytes.Equal(EncodeViewRecord(a), EncodeViewRecord(b))
}

func opCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// testCoordinator is the conformance suite of Coordinator. newCoord returns
// a coordinator with no record; each call must be independent of the others.
func testCoordinator(t *testing.T, newCoord func(t *testing.T) Coordinator) {
	t.Run("create get cas", func(t *testing.T) {
		c, ctx := newCoord(t), opCtx(t)
		if _, _, err := c.Get(ctx); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get on empty = %v, want ErrNotFound", err)
		}
		if _, err := c.CompareAndSet(ctx, 1, sampleRecord(1)); !errors.Is(err, ErrConflict) {
			t.Fatalf("CAS(1) on empty = %v, want ErrConflict", err)
		}
		rev1, err := c.CompareAndSet(ctx, 0, sampleRecord(1))
		if err != nil || rev1 == 0 {
			t.Fatalf("create = %d, %v", rev1, err)
		}
		got, rev, err := c.Get(ctx)
		if err != nil || rev != rev1 || !sameRecord(got, sampleRecord(1)) {
			t.Fatalf("Get = %+v, %d, %v; want %+v, %d", got, rev, err, sampleRecord(1), rev1)
		}
		if _, err := c.CompareAndSet(ctx, 0, sampleRecord(9)); !errors.Is(err, ErrConflict) {
			t.Fatalf("second create = %v, want ErrConflict", err)
		}
		rev2, err := c.CompareAndSet(ctx, rev1, sampleRecord(2))
		if err != nil || rev2 <= rev1 {
			t.Fatalf("CAS(%d) = %d, %v; want a higher revision", rev1, rev2, err)
		}
		for _, stale := range []uint64{rev1, rev2 + 1, rev2 + 1000} {
			if _, err := c.CompareAndSet(ctx, stale, sampleRecord(9)); !errors.Is(err, ErrConflict) {
				t.Fatalf("CAS(%d) with revision %d current = %v, want ErrConflict", stale, rev2, err)
			}
		}
		got, rev, err = c.Get(ctx)
		if err != nil || rev != rev2 || !sameRecord(got, sampleRecord(2)) {
			t.Fatalf("Get after conflicts = %+v, %d, %v; want %+v, %d", got, rev, err, sampleRecord(2), rev2)
		}
	})

	t.Run("records are copies", func(t *testing.T) {
		c, ctx := newCoord(t), opCtx(t)
		in := sampleRecord(2)
		rev, err := c.CompareAndSet(ctx, 0, in)
		if err != nil {
			t.Fatal(err)
		}
		in.Members[0], in.Dedup[0].Above[0], in.Change.NewMembers[0] = 99, 99, 99
		got, _, err := c.Get(ctx)
		if err != nil || !sameRecord(got, sampleRecord(2)) {
			t.Fatalf("Get after the caller changed its record = %+v, %v", got, err)
		}
		got.Members[0], got.Dedup[0].Above[0], got.Change.NewMembers[0] = 98, 98, 98
		again, rev2, err := c.Get(ctx)
		if err != nil || rev2 != rev || !sameRecord(again, sampleRecord(2)) {
			t.Fatalf("Get after the caller changed a returned record = %+v, %v", again, err)
		}
	})

	t.Run("concurrent cas: one winner per revision", func(t *testing.T) {
		c, ctx := newCoord(t), opCtx(t)
		const contenders, rounds = 6, 5
		rev, err := c.CompareAndSet(ctx, 0, sampleRecord(0))
		if err != nil {
			t.Fatal(err)
		}
		for round := range uint64(rounds) {
			var wg sync.WaitGroup
			start := make(chan struct{})
			revs := make([]uint64, contenders)
			errs := make([]error, contenders)
			for g := range contenders {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rec := sampleRecord(round)
					rec.Leader = msg.NodeID(100 + g)
					<-start
					revs[g], errs[g] = c.CompareAndSet(ctx, rev, rec)
				}()
			}
			close(start)
			wg.Wait()
			winner := -1
			for g, err := range errs {
				switch {
				case err == nil && winner >= 0:
					t.Fatalf("round %d: contenders %d and %d both won revision %d", round, winner, g, rev)
				case err == nil:
					winner = g
				case !errors.Is(err, ErrConflict):
					t.Fatalf("round %d: contender %d: %v", round, g, err)
				}
			}
			if winner < 0 {
				t.Fatalf("round %d: no contender won revision %d", round, rev)
			}
			got, gotRev, err := c.Get(ctx)
			if err != nil || gotRev != revs[winner] || got.Leader != msg.NodeID(100+winner) {
				t.Fatalf("round %d: Get = leader %d rev %d, %v; want the winner %d at %d", round, got.Leader, gotRev, err, 100+winner, revs[winner])
			}
			rev = gotRev
		}
	})

	t.Run("cancelled context", func(t *testing.T) {
		c := newCoord(t)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := c.CompareAndSet(ctx, 0, sampleRecord(1)); err == nil {
			t.Error("CompareAndSet with a cancelled context succeeded")
		}
		if _, _, err := c.Get(ctx); err == nil || errors.Is(err, ErrNotFound) {
			t.Errorf("Get with a cancelled context = %v, want a context error", err)
		}
	})

	t.Run("watch", func(t *testing.T) {
		c, ctx := newCoord(t), opCtx(t)
		w, ok := c.(Watcher)
		if !ok {
			t.Skip("not a Watcher")
		}
		rev, err := c.CompareAndSet(ctx, 0, sampleRecord(1))
		if err != nil {
			t.Fatal(err)
		}
		wctx, stop := context.WithCancel(ctx)
		defer stop()
		updates, err := w.Watch(wctx)
		if err != nil {
			t.Fatal(err)
		}
		first := <-updates
		if first.Rev != rev || !sameRecord(first.View, sampleRecord(1)) {
			t.Fatalf("first update = %d %+v, want the current record at %d", first.Rev, first.View, rev)
		}
		for n := uint64(2); n <= 6; n++ {
			if rev, err = c.CompareAndSet(ctx, rev, sampleRecord(n)); err != nil {
				t.Fatal(err)
			}
		}
		last := first.Rev
		for last < rev {
			select {
			case u, ok := <-updates:
				if !ok {
					t.Fatal("updates closed early")
				}
				if u.Rev <= last {
					t.Fatalf("update at revision %d after %d", u.Rev, last)
				}
				last = u.Rev
				if u.Rev == rev && !sameRecord(u.View, sampleRecord(6)) {
					t.Fatalf("latest update = %+v, want %+v", u.View, sampleRecord(6))
				}
			case <-ctx.Done():
				t.Fatalf("no update at revision %d (last %d)", rev, last)
			}
		}
		stop()
		for range updates { // must be closed once the watch is stopped
		}
	})
}

func TestMemoryCoordinator(t *testing.T) {
	testCoordinator(t, func(*testing.T) Coordinator { return NewMemory() })
}

func TestMemoryRevisionsCount(t *testing.T) {
	m, ctx := NewMemory(), context.Background()
	for want := uint64(1); want <= 3; want++ {
		rev, err := m.CompareAndSet(ctx, want-1, sampleRecord(want))
		if err != nil || rev != want {
			t.Fatalf("CAS %d = %d, %v", want, rev, err)
		}
	}
}
