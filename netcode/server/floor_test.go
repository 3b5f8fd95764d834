package server

import (
	"bytes"
	"testing"
	"time"

	"github.com/anoptic/broadside/netcode/wire"
)

// TestSessionFloor: the floor is the lowest command neither stored nor
// refused, counting from the first one the connection received, never
// above the command it goes with; a failed append keeps it down.
func TestSessionFloor(t *testing.T) {
	var f sessionFloor
	steps := []struct {
		seq     uint64
		refused bool
		stored  []uint64 // settled before this command arrives
		want    uint64
	}{
		{seq: 7, want: 7},                // a resumed session: 1..6 have results
		{seq: 8, want: 7},                // 7 in flight
		{seq: 9, refused: true, want: 7}, // rate-limited: settled
		{seq: 10, stored: []uint64{7}, want: 8},
		{seq: 11, stored: []uint64{8, 10}, want: 11}, // 9 refused, 10 stored: the hole closes
		{seq: 12, want: 11},                          // 11's append failed: it stays open
	}
	for i, s := range steps {
		for _, st := range s.stored {
			f.stored(st)
		}
		if got := f.receive(s.seq, s.refused, 0); !s.refused && got != s.want {
			t.Fatalf("step %d (seq %d): floor %d, want %d", i, s.seq, got, s.want)
		}
	}
	f.mu.Lock()
	if got := f.floorLocked(100); got != 11 {
		t.Fatalf("floor %d after a failed append, want 11", got)
	}
	f.mu.Unlock()
}

// TestSessionFloorWaitsForTheClientsVerdict: a refusal lost with its
// connection is resent on the next one, so the floor must not pass a
// refused command before the client says it has the refusal
// (GameCommand.Settled). Without that bound, 6 below is abandoned at the
// log while the client still waits for it, and its resend is answered as
// a duplicate: acknowledged, never stored.
func TestSessionFloorWaitsForTheClientsVerdict(t *testing.T) {
	var f sessionFloor
	if got := f.receive(5, false, 5); got != 5 {
		t.Fatalf("floor %d with 5 in flight, want 5", got)
	}
	f.receive(6, true, 5) // rate-limited; its refusal may never arrive
	f.stored(5)
	// The client has 5's verdict, not 6's: it settled below 6 only.
	if got := f.receive(7, false, 6); got != 6 {
		t.Fatalf("floor %d before the client has 6's refusal, want 6", got)
	}
	// Now it has: the hole closes.
	if got := f.receive(8, false, 7); got != 7 {
		t.Fatalf("floor %d once the client settled 6, want 7 (7 in flight)", got)
	}
	// A client that says nothing keeps the server's own view.
	var g sessionFloor
	g.receive(5, false, 0)
	g.receive(6, true, 0)
	g.stored(5)
	if got := g.receive(7, false, 0); got != 7 {
		t.Fatalf("floor %d without Settled, want the server's view 7", got)
	}
}

// TestIntakeKeepsSettledOutOfTheLog: a command with Settled is canonical
// and accepted, and the log gets the same bytes as without it (what the
// client holds is no part of the game).
func TestIntakeKeepsSettledOutOfTheLog(t *testing.T) {
	cmd := wire.GameCommand{Seq: 4, Kind: wire.CommandRudder, Value: -3}
	plain := NewIntake(5, IntakeLimits{}).Frame(wire.EncodeGameCommand(nil, cmd), time.Now())
	cmd.Settled = 3
	with := NewIntake(5, IntakeLimits{}).Frame(wire.EncodeGameCommand(nil, cmd), time.Now())
	if !plain.Accepted || !with.Accepted || with.Command.Settled != 3 {
		t.Fatalf("verdicts %+v and %+v, want both accepted, Settled 3 read", plain, with)
	}
	if !bytes.Equal(plain.Append, with.Append) {
		t.Fatalf("the log would store Settled: %x, without it %x", with.Append, plain.Append)
	}
}
