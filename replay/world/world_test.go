package world_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"log/slog"

	"github.com/anoptic/broadside/cmdlog"
	"github.com/anoptic/broadside/cmdlog/embedded"
	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/lineage"
	"github.com/anoptic/broadside/netcode/wire"
	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/world"
)

// TestWorldTrimsAndRecovers runs a world with a short retention on an
// embedded log: the log and the lineage are trimmed behind the snapshots,
// and a sector killed after a trim still recovers (its snapshots and the
// log after them are kept), with every replayed hash as published.
func TestWorldTrimsAndRecovers(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	el, err := embedded.Start(ctx, embedded.Options{Dir: filepath.Join(dir, "log")})
	if err != nil {
		t.Fatal(err)
	}
	defer el.Close()
	game, err := broadside.NewGame(broadside.Config{Seed: 3, Width: 1500, Height: 1500, SectorsX: 2, SectorsY: 1, Islands: 2}, 0)
	if err != nil {
		t.Fatal(err)
	}
	recovered := make(chan replay.Recovery, 4)
	w, err := world.Start(ctx, world.Config{
		Game: game, Dir: filepath.Join(dir, "world"), Log: el.World(), Logger: slog.New(slog.DiscardHandler),
		Retain: time.Second, TrimStep: 16, MinSnapshotInterval: 10,
		OnRecovery: func(r replay.Recovery) { recovered <- r },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop(ctx)
	for deadline := time.Now().Add(10 * time.Second); w.Ready(ctx) != nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the world is not ready after 10 s: %v", w.Ready(ctx))
		}
	}
	// Players join and steer, so the log holds commands too.
	for p := uint32(1); p <= 6; p++ {
		if err := appendCommand(ctx, el.Log(), p, 1, broadside.Join()); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for w.Trimmed() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("nothing trimmed by tick %d", w.Tick())
		}
		time.Sleep(50 * time.Millisecond)
	}
	trimmed := w.Trimmed()
	if _, err := el.Log().Read(ctx, 1, 1); !errors.Is(err, cmdlog.ErrTrimmed) {
		t.Fatalf("reading position 1 after a trim to %d: %v", trimmed, err)
	}
	// Lineage goes in whole ranges (128 ticks): wait for the first one to
	// fall behind the trim.
	for {
		store, release := w.LineageStore()
		ix, err := lineage.LoadIndex(ctx, store)
		release()
		if err != nil {
			t.Fatal(err)
		}
		if ix.Stats().FirstTick > 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lineage not trimmed with the log (trimmed to %d): ticks %d..%d", w.Trimmed(), ix.Stats().FirstTick, ix.Stats().LastTick)
		}
		time.Sleep(100 * time.Millisecond)
	}
	trimmed = w.Trimmed()
	w.Kill(1)
	select {
	case r := <-recovered:
		if r.Mismatched != 0 || r.From.Pos < trimmed {
			t.Fatalf("recovery after a trim to %d: from %+v, %d mismatched", trimmed, r.From, r.Mismatched)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("sector 1 did not recover after the log was trimmed")
	}
}

// appendCommand appends a player command envelope as the server would.
func appendCommand(ctx context.Context, c *cmdlog.Client, player uint32, seq uint64, pc broadside.PlayerCommand) error {
	payload, err := broadside.EncodeCommand(pc)
	if err != nil {
		return err
	}
	return c.Append(ctx, wire.EncodeEnvelope(nil, wire.Envelope{Kind: wire.EnvelopePlayerCommand, Player: player, ClientSeq: seq, Payload: payload}))
}
