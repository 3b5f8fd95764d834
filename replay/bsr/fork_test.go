package bsr_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/lineage"
	"github.com/anoptic/broadside/netcode/wire"
	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/bsr"
)

// fork writes a fork of the recording at path and opens it.
func fork(t *testing.T, m *match, r *bsr.Reader, cfg bsr.ForkConfig) (*bsr.Reader, bsr.ForkInfo) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fork.bsr")
	w, err := bsr.Create(path, r.Header(), bsr.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Reader, cfg.Writer, cfg.NewSim, cfg.CommandKind, cfg.Of = r, w, m.newSim, kindOf, "match.bsr"
	cfg.KindNames = map[uint8]string{0: "migration", 1: "join", 2: "throttle", 3: "rudder", 4: "fire"}
	if _, _, err := bsr.Fork(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f := open(t, path)
	fi, ok, err := f.Fork()
	if err != nil || !ok {
		t.Fatalf("fork info: %v %v", ok, err)
	}
	return f, fi
}

// verifyOK re-simulates a recording and requires every hash to match.
func verifyOK(t *testing.T, m *match, r *bsr.Reader) {
	t.Helper()
	res, err := bsr.Verify(context.Background(), r, m.newSim, nil)
	if err != nil || !res.OK {
		t.Fatalf("verify: %v %s", err, res.Detail)
	}
}

// hashesEqual reports the first tick in from..to at which the two
// recordings' hashes differ (0: none).
func firstHashDiff(t *testing.T, a, b *bsr.Reader, from, to uint64) uint64 {
	t.Helper()
	for tick := from; tick <= to; tick++ {
		for s := range a.Header().Shards {
			ha, err1 := a.Hash(s, tick)
			hb, err2 := b.Hash(s, tick)
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			if ha != hb {
				return tick
			}
		}
	}
	return 0
}

// playerCommand returns the position of one of player's commands that is
// an input of a tick >= at.
func playerCommand(t *testing.T, m *match, player uint32, at uint64) uint64 {
	t.Helper()
	var tick uint64 = 1
	for _, e := range m.entries {
		env, err := wire.DecodeEnvelope(e.Record.Data)
		if err != nil {
			continue
		}
		switch {
		case env.Kind == wire.EnvelopeTick:
			tick = env.Tick + 1
		case env.Kind == wire.EnvelopePlayerCommand && env.Player == player && tick >= at:
			return e.Pos
		}
	}
	t.Fatalf("no command of player %d at or after tick %d", player, at)
	return 0
}

// TestForkDiff forks a recorded match: with nothing removed the fork is
// the original (live migrations and all); without a player, without one
// command, or with a player handed to a bot it diverges from the fork
// tick on, verifies on its own, and diff names the player's ship with the
// commands that explain it; lineage works on the fork.
func TestForkDiff(t *testing.T) {
	m := playMatch(t, smallWorld(3), 16, 420, 3)
	path, _ := record(t, m, nil, bsr.RecordConfig{Snapshots: bsr.SnapshotPolicy{FullEvery: 100, DeltaEvery: 20}}, nil)
	orig := open(t, path)
	const at = 230

	same, fi := fork(t, m, orig, bsr.ForkConfig{At: at})
	if fi.From >= at || fi.From < 200 {
		t.Fatalf("fork started from tick %d", fi.From)
	}
	if d := firstHashDiff(t, orig, same, fi.From+1, orig.LastTick()); d != 0 {
		t.Fatalf("a fork that removes nothing diverges at tick %d", d)
	}
	res, err := bsr.Diff(context.Background(), bsr.DiffConfig{A: orig, B: same, NewSim: m.newSim})
	if err != nil || res.FirstTick != 0 || len(res.Entities) != 0 {
		t.Fatalf("diff of equal recordings: %v %+v", err, res)
	}

	const player = 5
	shipName := "ship:5"
	cases := []struct {
		name string
		cfg  bsr.ForkConfig
	}{
		{"without player", bsr.ForkConfig{At: at, WithoutPlayers: []uint32{player}}},
		{"drop", bsr.ForkConfig{At: at, Drop: []uint64{playerCommand(t, m, player, at)}}},
		{"as bot", bsr.ForkConfig{At: at, Bots: map[uint32]bsr.Bot{player: broadside.ForkBot(player, 1)}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, fi := fork(t, m, orig, c.cfg)
			if c.name != "as bot" && fi.Removed == 0 {
				t.Fatal("nothing removed")
			}
			verifyOK(t, m, f)
			d := firstHashDiff(t, orig, f, fi.From+1, orig.LastTick())
			if d == 0 || d < at {
				t.Fatalf("fork diverges at tick %d (fork tick %d)", d, at)
			}
			res, err := bsr.Diff(context.Background(), bsr.DiffConfig{A: orig, B: f, NewSim: m.newSim})
			if err != nil {
				t.Fatal(err)
			}
			if res.FirstTick != d || len(res.Entities) == 0 {
				t.Fatalf("diff: %+v", res)
			}
			var ship *bsr.EntityDiff
			for i := range res.Entities {
				e := &res.Entities[i]
				if e.FirstTick < d {
					t.Fatalf("%s differs at tick %d, before the hashes do", e.Entity, e.FirstTick)
				}
				if e.Entity == shipName && ship == nil {
					ship = e
				}
			}
			if ship == nil {
				t.Fatalf("diff does not list %s: %+v", shipName, res.Entities)
			}
			if !slices.ContainsFunc(ship.Causes, func(c bsr.DiffCause) bool { return c.Player == player }) {
				t.Fatalf("%s: causes %+v lack a command of player %d", shipName, ship.Causes, player)
			}
			t.Logf("%d entities differ from tick %d; %s at %d in %v, causes %+v", len(res.Entities), res.FirstTick, ship.Entity, ship.FirstTick, ship.Fields, ship.Causes)
			// lineage why works on the fork.
			ix, err := f.Lineage()
			if err != nil {
				t.Fatal(err)
			}
			var found bool
			for s := range f.Header().Shards {
				sk, err := bsr.NewSeeker(f, m.newSim)
				if err != nil {
					t.Fatal(err)
				}
				if err := sk.Seek(f.LastTick()); err != nil {
					t.Fatal(err)
				}
				sec := sk.Sims()[s].(*broadside.Sector)
				if v, ok := sec.Ship(player); ok {
					why, err := ix.Why(lineage.ShardID(s), lineage.EntityID(v.ID), f.LastTick(), 4)
					if err != nil || why.Applications == 0 {
						t.Fatalf("why on the fork: %v %+v", err, why)
					}
					found = true
				}
			}
			if !found && !strings.Contains(c.name, "without") {
				t.Log("the player's ship is sunk or in transit at the end of the fork")
			}
		})
	}
	bsr.CountForkDiff()
}

var _ replay.TableSim = (*broadside.Sector)(nil)
