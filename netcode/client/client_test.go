package client

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/anoptic/broadside/netcode/wire"
)

// TestBackoff checks the reconnection backoff: doubling from MinBackoff,
// bounded by MaxBackoff, jittered to between half and all of the step, and
// reproducible from the generator's seed.
func TestBackoff(t *testing.T) {
	r := Reconnect{Attempts: 1, MinBackoff: 10 * time.Millisecond, MaxBackoff: 80 * time.Millisecond, Rand: rand.New(rand.NewPCG(1, 2))}
	r.defaults(5)
	again := r
	again.Rand = rand.New(rand.NewPCG(1, 2))
	for i, step := range []time.Duration{10, 20, 40, 80, 80, 80, 80} {
		step *= time.Millisecond
		d := r.Backoff(i)
		if d < step/2 || d > step {
			t.Fatalf("attempt %d: backoff %v outside [%v, %v]", i, d, step/2, step)
		}
		if d2 := again.Backoff(i); d2 != d {
			t.Fatalf("attempt %d: %v then %v from the same seed", i, d, d2)
		}
	}
	var z Reconnect
	z.defaults(9)
	if z.MinBackoff != 50*time.Millisecond || z.MaxBackoff != 2*time.Second || z.Rand == nil {
		t.Fatalf("defaults %+v", z)
	}
}

// TestSendSaysWhatIsSettled: each command carries the lowest sequence
// number without a verdict (GameCommand.Settled), so the server's dedup
// floor never passes a command the client may send again.
func TestSendSaysWhatIsSettled(t *testing.T) {
	c := &Client{cfg: Config{Reconnect: Reconnect{Attempts: 1}}, pending: map[uint64][]byte{}}
	settled := func(seq uint64) uint64 { return settledOf(t, c, seq) }
	for want, seq := range []uint64{1, 1, 1} { // 1, 2, 3 sent, none answered
		s, err := c.Send(wire.GameCommand{Kind: wire.CommandRudder})
		if err != nil || s != uint64(want+1) {
			t.Fatalf("send: seq %d, %v", s, err)
		}
		if got := settled(s); got != seq {
			t.Fatalf("command %d: settled %d, want %d", s, got, seq)
		}
	}
	delete(c.pending, 1) // 1's verdict arrives, 2's does not
	delete(c.pending, 3)
	s, _ := c.Send(wire.GameCommand{Kind: wire.CommandRudder})
	if got := settled(s); got != 2 {
		t.Fatalf("command %d: settled %d with 2 still awaiting its verdict, want 2", s, got)
	}
	delete(c.pending, 2)
	delete(c.pending, 4)
	s, _ = c.Send(wire.GameCommand{Kind: wire.CommandRudder})
	if got := settled(s); got != s {
		t.Fatalf("command %d: settled %d with nothing else pending, want %d", s, got, s)
	}
}

// TestSettledAcrossJumps: the lowest pending command is found when a
// caller numbers commands itself, far above the last one or below it.
func TestSettledAcrossJumps(t *testing.T) {
	c := &Client{cfg: Config{Reconnect: Reconnect{Attempts: 1}}, pending: map[uint64][]byte{}}
	settled := func(seq uint64) uint64 { return settledOf(t, c, seq) }
	for i := 0; i < 100; i++ {
		s, _ := c.Send(wire.GameCommand{Kind: wire.CommandRudder})
		if i < 99 {
			delete(c.pending, s) // answered, all but the last
		}
	}
	if s, _ := c.Send(wire.GameCommand{Kind: wire.CommandRudder, Seq: 1 << 40}); settled(s) != 100 {
		t.Fatalf("after a jump: settled %d, want 100 (still pending)", settled(s))
	}
	delete(c.pending, 100)
	if s, _ := c.Send(wire.GameCommand{Kind: wire.CommandRudder, Seq: 50}); settled(s) != 50 {
		t.Fatalf("a lower number: settled %d, want 50", settled(s))
	}
	delete(c.pending, 50)
	if s, _ := c.Send(wire.GameCommand{Kind: wire.CommandRudder}); s != 1<<40+1 || settled(s) != 1<<40 {
		t.Fatalf("after both: seq %d settled %d, want %d and %d", s, settled(s), uint64(1<<40+1), uint64(1<<40))
	}
}

// settledOf is the Settled field of pending command seq as c sent it.
func settledOf(t *testing.T, c *Client, seq uint64) uint64 {
	t.Helper()
	cmd, err := wire.DecodeGameCommand(c.pending[seq])
	if err != nil {
		t.Fatal(err)
	}
	return cmd.Settled
}
