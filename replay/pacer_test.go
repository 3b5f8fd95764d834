package replay

import (
	"context"
	"errors"
	"testing"
	"time"
)

// waitTimers waits (real time, bounded) until n timers are set on clk:
// whoever is waiting on the clock has reached its wait.
func waitTimers(t *testing.T, clk *FakeClock, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for clk.Pending() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d timers set, want %d", clk.Pending(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitAsync runs p.Wait in a goroutine; the channel receives its result.
// If block, it returns once the Wait has set a timer on clk (it waits).
func waitAsync(t *testing.T, clk *FakeClock, p *Pacer, block bool) chan error {
	t.Helper()
	n := clk.Pending()
	ch := make(chan error, 1)
	go func() { ch <- p.Wait(context.Background()) }()
	if block {
		waitTimers(t, clk, n+1)
	}
	return ch
}

// stillWaiting fails if the Wait on ch has returned.
func stillWaiting(t *testing.T, ch chan error, what string) {
	t.Helper()
	select {
	case err := <-ch:
		t.Fatalf("%s: Wait returned (%v), want it waiting", what, err)
	case <-time.After(10 * time.Millisecond):
	}
}

func mustReturn(t *testing.T, ch chan error, what string) {
	t.Helper()
	select {
	case err := <-ch:
		if err != nil {
			t.Fatalf("%s: Wait: %v", what, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: Wait still waiting", what)
	}
}

// Catch-up work runs in the slot after the live runners stepped a tick,
// waits while one of them has not stepped the newest tick or when the
// next tick is near, and goes on once a live tick is overdue.
func TestPacerGivesLiveTicksPrecedence(t *testing.T) {
	clk := NewFakeClock(time.Unix(1000, 0))
	p := NewPacer(PacerConfig{Rate: 30, Budget: 15 * time.Millisecond, MaxWait: 60 * time.Millisecond, Clock: clk})
	mustReturn(t, waitAsync(t, clk, p, false), "no live runner")

	p.Stepped(1, 10)
	mustReturn(t, waitAsync(t, clk, p, false), "the one live runner stepped the newest tick")

	p.Stepped(2, 9) // shard 2 has not stepped tick 10 yet
	ch := waitAsync(t, clk, p, true)
	stillWaiting(t, ch, "a live runner behind the newest tick")
	clk.Advance(10 * time.Millisecond) // within MaxWait: still waiting
	stillWaiting(t, ch, "a live runner behind the newest tick, 10 ms on")
	p.Stepped(2, 10)
	mustReturn(t, ch, "every live runner stepped tick 10")

	clk.Advance(20 * time.Millisecond) // past the budget: tick 11 is near
	ch = waitAsync(t, clk, p, true)
	stillWaiting(t, ch, "past the budget")
	p.Stepped(1, 11)
	stillWaiting(t, ch, "tick 11 stepped by one live runner of two")
	p.Stepped(2, 11)
	mustReturn(t, ch, "tick 11 stepped by both")
	mustReturn(t, waitAsync(t, clk, p, false), "the slot after tick 11")

	// The live ticks stop (a stalled Ticker): catch-up goes on once the
	// newest is MaxWait old.
	clk.Advance(20 * time.Millisecond)
	ch = waitAsync(t, clk, p, true)
	stillWaiting(t, ch, "tick 12 near")
	clk.Advance(50 * time.Millisecond) // 70 ms after tick 11 > 60
	mustReturn(t, ch, "tick 12 overdue")
	mustReturn(t, waitAsync(t, clk, p, false), "still overdue")

	// A live runner that leaves no longer holds catch-up back.
	p.Stepped(1, 12)
	ch = waitAsync(t, clk, p, true)
	stillWaiting(t, ch, "shard 2 behind tick 12")
	p.Leave(2)
	mustReturn(t, ch, "shard 2 left")
	if n, _ := p.Waited(); n < 3 {
		t.Errorf("%d waits counted, want at least 3", n)
	}

	// A bounded Wait (one takeover's pacing) waits 30 ms in all, not the
	// pacer's 60.
	b := p.Bounded(30 * time.Millisecond)
	p.Stepped(1, 13)
	clk.Advance(20 * time.Millisecond) // tick 14 near
	n := clk.Pending()
	bch := make(chan error, 1)
	go func() { bch <- b(context.Background()) }()
	waitTimers(t, clk, n+1)
	clk.Advance(20 * time.Millisecond)
	stillWaiting(t, bch, "a bounded wait, 20 ms in")
	clk.Advance(15 * time.Millisecond) // 35 ms: past the bound, before MaxWait
	mustReturn(t, bch, "a bounded wait past its bound")
	go func() { bch <- b(context.Background()) }()
	mustReturn(t, bch, "a bounded wait whose bound is spent")
	ch = waitAsync(t, clk, p, true)
	stillWaiting(t, ch, "an unbounded wait meanwhile")
	p.Stepped(1, 14)
	mustReturn(t, ch, "tick 14 stepped")
}

// A catch-up Runner does not step while a live tick is pending; it steps
// once the live runners have stepped it; ticks past PaceUntil are not
// paced; a runner killed while it waits steps nothing.
func TestPacedRunnerWaitsForTheLiveTick(t *testing.T) {
	entries := entriesOf(tickRec(1), cmdRec(1, 1, writeCmd(0, 5)), tickRec(2), tickRec(3), tickRec(4), tickRec(5))
	clk := NewFakeClock(time.Unix(1000, 0))
	p := NewPacer(PacerConfig{Rate: 30, Clock: clk})
	p.Stepped(7, 100)
	p.Stepped(8, 99) // a live tick pending: shard 8 has not stepped 100

	var ticks []uint64
	r, err := NewRunner(RunnerConfig{Sim: newCounterSim(), Source: NewSliceSource(entries, 1), Pace: p.Wait, PaceUntil: entries[2].Pos,
		Observer: func(info TickInfo) {
			ticks = append(ticks, info.Tick)
			if info.Tick == 2 {
				// Pending again: tick 3's marker is past PaceUntil, so the
				// runner does not wait for it (on this clock it would wait
				// forever).
				p.Stepped(7, 101)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	waitTimers(t, clk, 1)
	if r.Tick() != 0 {
		t.Fatalf("stepped tick %d while a live tick was pending", r.Tick())
	}
	p.Stepped(8, 100)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !equalU64(ticks, []uint64{1, 2, 3, 4, 5}) {
		t.Fatalf("ticks %v, want 1..5", ticks)
	}

	// Killed while waiting: no tick stepped, ErrKilled.
	clk2 := NewFakeClock(time.Unix(1000, 0))
	p2 := NewPacer(PacerConfig{Rate: 30, Clock: clk2})
	p2.Stepped(7, 100)
	p2.Stepped(8, 99)
	r2, err := NewRunner(RunnerConfig{Sim: newCounterSim(), Source: NewSliceSource(entries, 1), Pace: p2.Wait, PaceUntil: ^uint64(0)})
	if err != nil {
		t.Fatal(err)
	}
	go func() { done <- r2.Run(ctx) }()
	waitTimers(t, clk2, 1)
	r2.Kill()
	if err := <-done; !errors.Is(err, ErrKilled) {
		t.Fatalf("killed while pacing: %v, want ErrKilled", err)
	}
	if r2.Tick() != 0 || r2.Stats().Ticks != 0 {
		t.Fatalf("killed while pacing, yet stepped tick %d", r2.Tick())
	}
}
