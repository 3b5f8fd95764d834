package server

import (
	"context"
	"testing"
	"time"

	"github.com/anoptic/broadside/netcode/client"
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
