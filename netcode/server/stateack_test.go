package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/anoptic/broadside/netcode/client"
	"github.com/anoptic/broadside/netcode/wire"
)

// TestStateAckEvery: a client acknowledges state at most every
// StateAckEvery ticks (its first acknowledgement at once), so the server
// sees the acknowledged ticks step by that much, never each one.
func TestStateAckEvery(t *testing.T) {
	ts := startServerWith(t, Config{State: &fakeState{size: 100}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.Config{Addr: ts.srv.Addr(), TLS: ts.client, Token: ts.token(t, "ada", 7, time.Hour), StateAckEvery: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitSessions(t, ts.srv, 1)
	first := publishUntil(t, ts.srv, c, 10).Tick
	ts.srv.mu.Lock()
	sess := ts.srv.players[7]
	ts.srv.mu.Unlock()
	seen := map[uint64]bool{}
	for tick := first; tick < first+12; tick++ {
		if err := c.AckState(tick); err != nil {
			t.Fatal(err)
		}
		// Wait until the server holds this tick's acknowledgement or, for a
		// tick the client should skip, give it time to show up wrongly.
		deadline := time.Now().Add(200 * time.Millisecond)
		for time.Now().Before(deadline) && sess.ackTick.Load() != tick {
			time.Sleep(2 * time.Millisecond)
		}
		if sess.ackTick.Load() == tick {
			seen[tick] = true
		}
	}
	for tick := first; tick < first+12; tick++ {
		want := (tick-first)%4 == 0
		if seen[tick] != want {
			t.Fatalf("tick %d (first %d): acknowledged %v, want %v (StateAckEvery 4)", tick, first, seen[tick], want)
		}
	}
}

// TestStateAckRidesWithCommand: a state acknowledgement waits up to
// StateAckDelay for the client's next command and goes out with it; with
// no command it goes out alone when the delay ends.
func TestStateAckRidesWithCommand(t *testing.T) {
	ts := startServerWith(t, Config{State: &fakeState{size: 100}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.Config{Addr: ts.srv.Addr(), TLS: ts.client, Token: ts.token(t, "ada", 7, time.Hour),
		StateAckEvery: 1, StateAckDelay: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitSessions(t, ts.srv, 1)
	first := publishUntil(t, ts.srv, c, 10).Tick
	ts.srv.mu.Lock()
	sess := ts.srv.players[7]
	ts.srv.mu.Unlock()
	waitAck := func(tick uint64, within time.Duration) time.Duration {
		t.Helper()
		start := time.Now()
		for time.Since(start) < within && sess.ackTick.Load() != tick {
			time.Sleep(time.Millisecond)
		}
		if sess.ackTick.Load() != tick {
			t.Fatalf("acknowledgement of tick %d not at the server within %v (it holds %d)", tick, within, sess.ackTick.Load())
		}
		return time.Since(start)
	}

	// Alone: it arrives once the delay has passed, not before.
	start := time.Now()
	if err := c.AckState(first); err != nil {
		t.Fatal(err)
	}
	waitAck(first, 10*time.Second)
	if waited := time.Since(start); waited < 2*time.Second {
		t.Fatalf("a lone acknowledgement arrived after %v, before its 2 s delay", waited)
	}

	// With a command: it rides with it at once.
	if err := c.AckState(first + 1); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if got := sess.ackTick.Load(); got != first {
		t.Fatalf("the acknowledgement of tick %d went out before a command (server holds %d)", first+1, got)
	}
	start = time.Now()
	if _, err := c.Send(wire.GameCommand{Kind: wire.CommandRudder, Value: 1, Player: 7}); err != nil {
		t.Fatal(err)
	}
	waitAck(first+1, 5*time.Second)
	if waited := time.Since(start); waited >= 2*time.Second {
		t.Fatalf("the acknowledgement did not ride with the command: it arrived %v after it", waited)
	}
}

// TestAckRidesWithState: with AckHold, a command's acknowledgement waits
// for the session's next state update (a datagram or, when large, the
// stream) and goes out with it; with no update it goes out alone when
// AckHold ends.
func TestAckRidesWithState(t *testing.T) {
	for _, size := range []int{100, 5000} {
		t.Run(fmt.Sprintf("payload %d bytes", size), func(t *testing.T) {
			const hold = 2 * time.Second
			ts, c := stateSession(t, Config{State: &fakeState{size: size}, AckHold: hold, Limits: IntakeLimits{Rate: 100, Burst: 10}})
			result := func(within time.Duration) (wire.CommandResult, bool) { return resultWithin(c, within) }

			// Held until the next update, then with it.
			seq, err := c.Send(wire.GameCommand{Kind: wire.CommandRudder, Value: 1, Player: 7})
			if err != nil {
				t.Fatal(err)
			}
			if r, ok := result(300 * time.Millisecond); ok {
				t.Fatalf("acknowledgement %+v went out before a state update (AckHold %v)", r, hold)
			}
			start := time.Now()
			publishUntil(t, ts.srv, c, 100)
			r, ok := result(hold / 2)
			if !ok || r.Seq != seq || !r.Status.Stored() {
				t.Fatalf("after a state update: acknowledgement %+v (%v), want seq %d stored within %v", r, ok, seq, hold/2)
			}
			if waited := time.Since(start); waited >= hold {
				t.Fatalf("the acknowledgement came %v after the update: it did not ride with it", waited)
			}

			// Alone: when AckHold ends.
			start = time.Now()
			seq, err = c.Send(wire.GameCommand{Kind: wire.CommandRudder, Value: 2, Player: 7})
			if err != nil {
				t.Fatal(err)
			}
			r, ok = result(10 * time.Second)
			if !ok || r.Seq != seq {
				t.Fatalf("no acknowledgement of a command without updates: %+v %v", r, ok)
			}
			if waited := time.Since(start); waited < hold-100*time.Millisecond {
				t.Fatalf("a lone acknowledgement came after %v, before AckHold %v", waited, hold)
			}
		})
	}
}

// TestAckHoldOnlyWhenAnUpdateIsDue: an acknowledgement waits for the next
// state update only when that update is due within AckHold (the last
// Publish plus a tick period); right after a Publish, with the next one
// more than AckHold away, it goes at once instead of waiting out the hold.
func TestAckHoldOnlyWhenAnUpdateIsDue(t *testing.T) {
	const hold = 1500 * time.Millisecond
	// 1 tick a second: the next update is due a second after a Publish.
	ts, c := stateSession(t, Config{State: &fakeState{size: 100}, AckHold: hold, TickRate: 1, Limits: IntakeLimits{Rate: 100, Burst: 10}})
	// The hold is longer than the period: the update is always due, so
	// the acknowledgement waits for it (as TestAckRidesWithState).
	seq, err := c.Send(wire.GameCommand{Kind: wire.CommandRudder, Value: 1, Player: 7})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-c.Results():
		t.Fatalf("acknowledgement %+v did not wait for the update due within AckHold", r)
	case <-time.After(300 * time.Millisecond):
	}
	publishUntil(t, ts.srv, c, 100)
	select {
	case r := <-c.Results():
		if r.Seq != seq {
			t.Fatalf("acknowledgement %+v, want seq %d", r, seq)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no acknowledgement after the update")
	}

	// With the hold shorter than the period, right after a Publish the
	// next update is not due within the hold: no waiting.
	ts2 := startServerWith(t, Config{State: &fakeState{size: 100}, AckHold: 900 * time.Millisecond, TickRate: 1, Limits: IntakeLimits{Rate: 100, Burst: 10}})
	c2, err := ts2.dial(t, ts2.token(t, "bea", 8, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	waitSessions(t, ts2.srv, 1)
	publishUntil(t, ts2.srv, c2, 10)
	ts2.srv.Publish(200) // the next update is due in a second
	seq, err = c2.Send(wire.GameCommand{Kind: wire.CommandRudder, Value: 2, Player: 8})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-c2.Results():
		if r.Seq != seq || !r.Status.Stored() {
			t.Fatalf("acknowledgement %+v, want seq %d stored", r, seq)
		}
	case <-time.After(800 * time.Millisecond):
		t.Fatal("the acknowledgement waited although no update was due within AckHold")
	}
}

// stateSession starts a server with cfg and one client, player 7, that
// has received state (closed when the test ends).
func stateSession(t *testing.T, cfg Config) (*testServer, *client.Client) {
	t.Helper()
	ts := startServerWith(t, cfg)
	c, err := ts.dial(t, ts.token(t, "ada", 7, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	waitSessions(t, ts.srv, 1)
	publishUntil(t, ts.srv, c, 10)
	return ts, c
}

// resultWithin returns c's next command result, or false if none comes
// within d.
func resultWithin(c *client.Client, d time.Duration) (wire.CommandResult, bool) {
	select {
	case r := <-c.Results():
		return r, true
	case <-time.After(d):
		return wire.CommandResult{}, false
	}
}
