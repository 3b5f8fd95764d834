package server

import (
	"context"
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
