package server

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/netcode/wire"
	"golang.org/x/time/rate"
)

// asyncLog is an AsyncAppender that completes appends from its own
// goroutine, in batches, as cmdlog's client loop does; its blocking
// AppendWithID must never be used.
type asyncLog struct {
	memLog
	mu      sync.Mutex
	pending []func(error)
	ids     []msg.RecordID
	data    [][]byte
	syncUse int
}

func (l *asyncLog) AppendWithID(ctx context.Context, id msg.RecordID, data []byte) error {
	l.mu.Lock()
	l.syncUse++
	l.mu.Unlock()
	return l.memLog.AppendWithID(ctx, id, data)
}

func (l *asyncLog) AppendWithIDAsync(_ context.Context, id msg.RecordID, data []byte, done func(error)) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pending = append(l.pending, done)
	l.ids = append(l.ids, id)
	l.data = append(l.data, append([]byte(nil), data...))
	return nil
}

// flush stores what is pending and calls back, like a completed round.
func (l *asyncLog) flush() int {
	l.mu.Lock()
	pending, ids, data := l.pending, l.ids, l.data
	l.pending, l.ids, l.data = nil, nil, nil
	l.mu.Unlock()
	for i, done := range pending {
		done(l.memLog.AppendWithID(context.Background(), ids[i], data[i]))
	}
	return len(pending)
}

// TestServerAppendsAsync: with an AsyncAppender the server hands it every
// command without append workers: more commands than MaxAppending are in
// the log at once, each is acknowledged when the log calls back, and the
// blocking path is never taken.
func TestServerAppendsAsync(t *testing.T) {
	al := &asyncLog{}
	ts := startServerWith(t, Config{Log: al, Durability: Durable, MaxAppending: 2, MaxInflight: 64,
		Limits: IntakeLimits{Rate: rate.Limit(1000), Burst: 100}})
	c, err := ts.dial(t, ts.token(t, "ada", 7, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const n = 40
	for i := 0; i < n; i++ {
		if _, err := c.Send(wire.GameCommand{Kind: wire.CommandRudder, Value: int32(i), Player: 7}); err != nil {
			t.Fatal(err)
		}
	}
	// All n wait in the log at once although only 2 workers would exist.
	deadline := time.Now().Add(10 * time.Second)
	for {
		al.mu.Lock()
		k := len(al.pending)
		al.mu.Unlock()
		if k == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d commands handed to the async log", k, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case r := <-c.Results():
		t.Fatalf("command %d acknowledged before the log stored it", r.Seq)
	case <-time.After(50 * time.Millisecond):
	}
	if got := al.flush(); got != n {
		t.Fatalf("flushed %d", got)
	}
	seen := map[uint64]bool{}
	for len(seen) < n {
		select {
		case r := <-c.Results():
			if r.Status != wire.AckDurable {
				t.Fatalf("command %d: %v", r.Seq, r.Status)
			}
			seen[r.Seq] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d of %d commands acknowledged", len(seen), n)
		}
	}
	if al.syncUse != 0 {
		t.Fatalf("the blocking AppendWithID was used %d times", al.syncUse)
	}
	if got := len(al.memLog.snapshot()); got != n {
		t.Fatalf("%d envelopes stored, want %d", got, n)
	}
}

// instantLog is a FloorAppender that stores nothing and calls back at
// once, for counting the server's own allocations per command.
type instantLog struct{}

func (instantLog) AppendWithID(context.Context, msg.RecordID, []byte) error { return nil }
func (instantLog) AppendWithIDAsync(_ context.Context, _ msg.RecordID, _ []byte, done func(error)) error {
	done(nil)
	return nil
}
func (instantLog) AppendWithFloorAsync(_ context.Context, _ msg.RecordID, _ uint64, _ []byte, done func(error)) error {
	done(nil)
	return nil
}

// TestSubmitAllocationFree: handing an accepted command to an
// AsyncAppender and settling it allocates nothing once warm (the job and
// its callback are pooled; before, a closure per command), and every
// command is still acknowledged once, with its own sequence number.
func TestSubmitAllocationFree(t *testing.T) {
	ts := startServerWith(t, Config{Log: instantLog{}})
	sess := &session{claims: Claims{PlayerID: 3}, id: 9, slots: make(chan struct{}, 4), resReady: make(chan struct{}, 1)}
	sess.floor.receive(1, false, 0)
	ctx := context.Background()
	env := []byte("x")
	seq := uint64(0)
	one := func() {
		seq++
		sess.slots <- struct{}{}
		sess.pending.Add(1)
		ts.srv.inflight.Add(1)
		ts.srv.submit(appendJob{ctx: ctx, sess: sess, seq: seq, env: env, received: time.Now()})
		sess.resMu.Lock()
		r := sess.results[0]
		sess.results = sess.results[:0]
		sess.resMu.Unlock()
		<-sess.slots
		if r.Seq != seq || !r.Status.Stored() {
			t.Fatalf("result %+v for seq %d", r, seq)
		}
	}
	for range 10 {
		one()
	}
	// The metrics and the floor's map may allocate now and then; the
	// closure per command allocated every time.
	if n := testing.AllocsPerRun(1000, one); n >= 0.5 {
		t.Fatalf("%.2f allocations per command", n)
	}
	if ts.srv.inflight.Load() != 0 {
		t.Fatalf("%d in flight", ts.srv.inflight.Load())
	}
}
