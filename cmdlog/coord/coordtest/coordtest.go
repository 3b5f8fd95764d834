// Package coordtest is the conformance suite every view coordinator
// (coord.Memory, natscoord.KV) passes, and the sample records its tests use.
package coordtest

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/anoptic/broadside/cmdlog/coord"
	"github.com/anoptic/broadside/cmdlog/msg"
)

// SampleRecord returns a record that uses every field, varied by n.
func SampleRecord(n uint64) msg.ViewRecord {
	rec := msg.ViewRecord{
		Number:  n,
		Members: []msg.NodeID{1, 2, msg.NodeID(n%5 + 3)},
		Leader:  1,
		StartGP: 1000 * n,
		Dedup: []msg.ClientMark{
			{Client: 7, Mark: 100 + n, Above: []uint64{102 + n, 105 + n}, View: n},
			{Client: 1 << 40, Mark: n},
		},
	}
	if n%2 == 0 {
		rec.Change = &msg.ViewChange{Epoch: n + 1, Flusher: 2, NewMembers: []msg.NodeID{2, 3, 4}}
	}
	return rec
}

// SameRecord reports whether a and b encode to the same bytes.
func SameRecord(a, b msg.ViewRecord) bool {
	return bytes.Equal(coord.EncodeViewRecord(a), coord.EncodeViewRecord(b))
}

func opCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestCoordinator is the conformance suite of coord.Coordinator (and of
// coord.Watcher, if the coordinator is one). newCoord returns a coordinator
// with no record; each call must be independent of the others.
func TestCoordinator(t *testing.T, newCoord func(t *testing.T) coord.Coordinator) {
	t.Run("create get cas", func(t *testing.T) {
		c, ctx := newCoord(t), opCtx(t)
		if _, _, err := c.Get(ctx); !errors.Is(err, coord.ErrNotFound) {
			t.Fatalf("Get on empty = %v, want coord.ErrNotFound", err)
		}
		if _, err := c.CompareAndSet(ctx, 1, SampleRecord(1)); !errors.Is(err, coord.ErrConflict) {
			t.Fatalf("CAS(1) on empty = %v, want coord.ErrConflict", err)
		}
		rev1, err := c.CompareAndSet(ctx, 0, SampleRecord(1))
		if err != nil || rev1 == 0 {
			t.Fatalf("create = %d, %v", rev1, err)
		}
		got, rev, err := c.Get(ctx)
		if err != nil || rev != rev1 || !SameRecord(got, SampleRecord(1)) {
			t.Fatalf("Get = %+v, %d, %v; want %+v, %d", got, rev, err, SampleRecord(1), rev1)
		}
		if _, err := c.CompareAndSet(ctx, 0, SampleRecord(9)); !errors.Is(err, coord.ErrConflict) {
			t.Fatalf("second create = %v, want coord.ErrConflict", err)
		}
		rev2, err := c.CompareAndSet(ctx, rev1, SampleRecord(2))
		if err != nil || rev2 <= rev1 {
			t.Fatalf("CAS(%d) = %d, %v; want a higher revision", rev1, rev2, err)
		}
		for _, stale := range []uint64{rev1, rev2 + 1, rev2 + 1000} {
			if _, err := c.CompareAndSet(ctx, stale, SampleRecord(9)); !errors.Is(err, coord.ErrConflict) {
				t.Fatalf("CAS(%d) with revision %d current = %v, want coord.ErrConflict", stale, rev2, err)
			}
		}
		got, rev, err = c.Get(ctx)
		if err != nil || rev != rev2 || !SameRecord(got, SampleRecord(2)) {
			t.Fatalf("Get after conflicts = %+v, %d, %v; want %+v, %d", got, rev, err, SampleRecord(2), rev2)
		}
	})

	t.Run("records are copies", func(t *testing.T) {
		c, ctx := newCoord(t), opCtx(t)
		in := SampleRecord(2)
		rev, err := c.CompareAndSet(ctx, 0, in)
		if err != nil {
			t.Fatal(err)
		}
		in.Members[0], in.Dedup[0].Above[0], in.Change.NewMembers[0] = 99, 99, 99
		got, _, err := c.Get(ctx)
		if err != nil || !SameRecord(got, SampleRecord(2)) {
			t.Fatalf("Get after the caller changed its record = %+v, %v", got, err)
		}
		got.Members[0], got.Dedup[0].Above[0], got.Change.NewMembers[0] = 98, 98, 98
		again, rev2, err := c.Get(ctx)
		if err != nil || rev2 != rev || !SameRecord(again, SampleRecord(2)) {
			t.Fatalf("Get after the caller changed a returned record = %+v, %v", again, err)
		}
	})

	t.Run("concurrent cas: one winner per revision", func(t *testing.T) {
		c, ctx := newCoord(t), opCtx(t)
		const contenders, rounds = 6, 5
		rev, err := c.CompareAndSet(ctx, 0, SampleRecord(0))
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
					rec := SampleRecord(round)
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
				case !errors.Is(err, coord.ErrConflict):
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
		if _, err := c.CompareAndSet(ctx, 0, SampleRecord(1)); err == nil {
			t.Error("CompareAndSet with a cancelled context succeeded")
		}
		if _, _, err := c.Get(ctx); err == nil || errors.Is(err, coord.ErrNotFound) {
			t.Errorf("Get with a cancelled context = %v, want a context error", err)
		}
	})

	t.Run("watch", func(t *testing.T) {
		c, ctx := newCoord(t), opCtx(t)
		w, ok := c.(coord.Watcher)
		if !ok {
			t.Skip("not a Watcher")
		}
		rev, err := c.CompareAndSet(ctx, 0, SampleRecord(1))
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
		if first.Rev != rev || !SameRecord(first.View, SampleRecord(1)) {
			t.Fatalf("first update = %d %+v, want the current record at %d", first.Rev, first.View, rev)
		}
		for n := uint64(2); n <= 6; n++ {
			if rev, err = c.CompareAndSet(ctx, rev, SampleRecord(n)); err != nil {
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
				if u.Rev == rev && !SameRecord(u.View, SampleRecord(6)) {
					t.Fatalf("latest update = %+v, want %+v", u.View, SampleRecord(6))
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

// BenchCompareAndSet measures one compare-and-set round trip of a typical
// record on c, which must hold no record.
func BenchCompareAndSet(b *testing.B, c coord.Coordinator) {
	ctx := context.Background()
	rev, err := c.CompareAndSet(ctx, 0, SampleRecord(1))
	if err != nil {
		b.Fatal(err)
	}
	rec := SampleRecord(2)
	b.ReportAllocs()
	for b.Loop() {
		if rev, err = c.CompareAndSet(ctx, rev, rec); err != nil {
			b.Fatal(err)
		}
	}
}
