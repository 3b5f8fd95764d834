package server

import (
	"context"
	"testing"
	"time"

	"github.com/anoptic/broadside/netcode/client"
	"github.com/anoptic/broadside/netcode/wire"
)

// TestCarriedAcks: acknowledgements taken into state datagrams are
// repeated in every later window until a StateAck of a tick at or after
// the first that carried them; confirming releases exactly their slots;
// one that does not fit the window, or rides ackRepairTicks unconfirmed,
// moves to the stream (spill), and the update that goes on the stream
// takes all of them.
func TestCarriedAcks(t *testing.T) {
	sess := &session{slots: make(chan struct{}, 128), resReady: make(chan struct{}, 1)}
	hold := func(n int) {
		for range n {
			sess.slots <- struct{}{}
		}
	}
	ack := func(seqs ...uint64) {
		hold(len(seqs))
		for _, s := range seqs {
			sess.queueResult(wire.CommandResult{Seq: s, Status: wire.AckDurable})
		}
	}
	take := func(tick uint64, want wire.AckWindow, wantSpill bool) {
		t.Helper()
		w, spilled := sess.takeAcks(tick, wire.AckDurable)
		if w != want || spilled != wantSpill {
			t.Fatalf("tick %d: window %+v spilled %v, want %+v %v", tick, w, spilled, want, wantSpill)
		}
	}
	d := wire.AckDurable
	take(99, wire.AckWindow{}, false) // nothing to carry
	ack(5, 6, 8)
	take(100, wire.AckWindow{From: 5, Bits: 0b1011, Status: d}, false)
	take(101, wire.AckWindow{From: 5, Bits: 0b1011, Status: d}, false) // repeated: 100 may be lost
	ack(9)
	take(102, wire.AckWindow{From: 5, Bits: 0b11011, Status: d}, false)
	sess.confirm(99) // older than any carrier: confirms nothing
	if len(sess.carried) != 4 || len(sess.slots) != 4 {
		t.Fatalf("StateAck 99 confirmed: carried %+v, %d slots", sess.carried, len(sess.slots))
	}
	sess.confirm(101) // the update of 101 carried 5, 6, 8, not 9
	if len(sess.carried) != 1 || sess.carried[0].seq != 9 || len(sess.slots) != 1 {
		t.Fatalf("after StateAck 101: carried %+v, %d slots held", sess.carried, len(sess.slots))
	}
	take(103, wire.AckWindow{From: 9, Bits: 1, Status: d}, false)

	// Outside the window of 64 from the lowest carried: on the stream.
	ack(9 + 64)
	take(104, wire.AckWindow{From: 9, Bits: 1, Status: d}, true)
	if len(sess.spill) != 1 || sess.spill[0].Seq != 73 {
		t.Fatalf("spill %+v", sess.spill)
	}
	// Carried for ackRepairTicks without a confirmation: on the stream.
	take(102+ackRepairTicks-1, wire.AckWindow{From: 9, Bits: 1, Status: d}, false)
	take(102+ackRepairTicks, wire.AckWindow{}, true)
	if len(sess.carried) != 0 || len(sess.spill) != 2 || sess.spill[1].Seq != 9 {
		t.Fatalf("after the repair limit: carried %+v, spill %+v", sess.carried, sess.spill)
	}
	// A StateAck now confirms nothing: the stream owns them (one release).
	sess.confirm(1000)
	if len(sess.slots) != 2 {
		t.Fatalf("%d slots held, want the 2 of the spilled acknowledgements", len(sess.slots))
	}

	// An update too large for a datagram takes every carried one along.
	ack(200, 201)
	take(2000, wire.AckWindow{From: 200, Bits: 0b11, Status: d}, false)
	sess.spillCarried(d)
	if len(sess.carried) != 0 || len(sess.spill) != 4 {
		t.Fatalf("after spillCarried: carried %+v, spill %+v", sess.carried, sess.spill)
	}
}

// TestAcksRideInsideState: with AckHold, a client that reads
// acknowledgements in state updates gets its command's acknowledgement
// inside the next datagram (not on the stream), once although the server
// repeats it until the client acknowledges the state; the StateAck frees
// the command's slot. A client that does not acknowledge state gets its
// slots back after ackRepairTicks (the acknowledgements then go on the
// stream too, and are not delivered twice). A client that asks for
// acknowledgements on the stream gets them there.
func TestAcksRideInsideState(t *testing.T) {
	const hold = 2 * time.Second
	ts, c := stateSession(t, Config{State: &fakeState{size: 100}, AckHold: hold, AcksInState: true, MaxInflight: 4, Limits: IntakeLimits{Rate: 100, Burst: 20}})
	ts.srv.mu.Lock()
	sess := ts.srv.players[7]
	ts.srv.mu.Unlock()
	if !sess.acksInState {
		t.Fatal("the client did not ask for acknowledgements in state")
	}
	result := func(within time.Duration) (wire.CommandResult, bool) { return resultWithin(c, within) }
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	carried := func() int {
		sess.resMu.Lock()
		defer sess.resMu.Unlock()
		return len(sess.carried)
	}
	tick := uint64(1000)
	// Eight commands through a window of 4: each slot comes back with the
	// StateAck of a tick whose update carried the acknowledgement.
	for i := range 8 {
		seq, err := c.Send(wire.GameCommand{Kind: wire.CommandRudder, Value: 1, Player: 7})
		if err != nil {
			t.Fatal(err)
		}
		waitFor("the command stored", func() bool { return len(ts.log.snapshot()) == i+1 })
		var r wire.CommandResult
		for ok := false; !ok; {
			tick++
			ts.srv.Publish(tick)
			r, ok = result(100 * time.Millisecond)
		}
		if r.Seq != seq || r.Status != wire.AckReplicated {
			t.Fatalf("command %d: result %+v, want seq %d replicated", i, r, seq)
		}
		if got := c.AckedInState(); got != uint64(i+1) {
			t.Fatalf("%d commands settled by state updates, want %d", got, i+1)
		}
		// Unconfirmed, it rides in every update; the client drops repeats.
		for range 3 {
			tick++
			ts.srv.Publish(tick)
		}
		if r, ok := result(100 * time.Millisecond); ok {
			t.Fatalf("a repeated acknowledgement was delivered again: %+v", r)
		}
		if carried() != 1 || len(sess.slots) != 1 {
			t.Fatalf("before the StateAck: %d carried, %d slots held", carried(), len(sess.slots))
		}
		// The tracker's usual acknowledgement of the newest state.
		u := <-c.Updates()
		for len(c.Updates()) > 0 {
			u = <-c.Updates()
		}
		if err := c.AckState(u.Tick + 100); err != nil { // past every throttle
			t.Fatal(err)
		}
		waitFor("the StateAck to confirm", func() bool { return carried() == 0 && len(sess.slots) == 0 })
	}
	if c.Pending() != 0 {
		t.Fatalf("%d commands pending", c.Pending())
	}

	// No StateAck: the slot comes back after ackRepairTicks.
	seq, err := c.Send(wire.GameCommand{Kind: wire.CommandRudder, Value: 2, Player: 7})
	if err != nil {
		t.Fatal(err)
	}
	waitFor("the command stored", func() bool { return len(ts.log.snapshot()) == 9 })
	waitFor("the acknowledgement queued", func() bool {
		sess.resMu.Lock()
		defer sess.resMu.Unlock()
		return len(sess.results) == 1
	})
	for range ackRepairTicks + 1 {
		tick++
		ts.srv.Publish(tick)
	}
	if r, ok := result(2 * time.Second); !ok || r.Seq != seq {
		t.Fatalf("result %+v %v, want seq %d", r, ok, seq)
	}
	waitFor("the repaired acknowledgement's slot", func() bool { return carried() == 0 && len(sess.slots) == 0 })
	if r, ok := result(200 * time.Millisecond); ok {
		t.Fatalf("the acknowledgement sent on the stream as well was delivered twice: %+v", r)
	}

	// A client that wants acknowledgements on the stream.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	old, err := client.Dial(ctx, client.Config{Addr: ts.srv.Addr(), TLS: ts.client, Token: ts.token(t, "bo", 8, time.Hour), AcksOnStream: true})
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	waitSessions(t, ts.srv, 2)
	publishUntil(t, ts.srv, old, tick+1)
	seq, err = old.Send(wire.GameCommand{Kind: wire.CommandRudder, Value: 3, Player: 8})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for got := false; !got; {
		if time.Now().After(deadline) {
			t.Fatal("no acknowledgement for the AcksOnStream client")
		}
		tick++
		ts.srv.Publish(tick + 10)
		select {
		case r := <-old.Results():
			if r.Seq != seq || !r.Status.Stored() {
				t.Fatalf("result %+v, want seq %d stored", r, seq)
			}
			got = true
		case <-time.After(100 * time.Millisecond):
		}
	}
	if n := old.AckedInState(); n != 0 {
		t.Fatalf("an AcksOnStream client had %d acknowledgements in state updates", n)
	}
}
