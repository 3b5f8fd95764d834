package match

import (
	"context"
	"testing"
	"time"

	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/replay/bsr"
)

// TestMatch runs the demo's match in short: a sim shard killed and the
// sequencing leader crashed, then its checks. It asserts what the match
// reports — no acknowledged command lost, the re-simulation identical tick
// by tick, a recovery and a view change — and that the recording it wrote
// verifies.
func TestMatch(t *testing.T) {
	rep, err := Run(context.Background(), Options{Duration: 6 * time.Second, Bots: 10, Rate: 10, Seed: 5, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Acked == 0 || rep.Applied == 0 || rep.Lost != 0 || rep.Duplicated != 0 {
		t.Fatalf("acked %d, applied %d, lost %d, duplicated %d", rep.Acked, rep.Applied, rep.Lost, rep.Duplicated)
	}
	if !rep.DeterminismOK || rep.TicksChecked < 4*100 {
		t.Fatalf("determinism %v over %d tick hashes (%s)", rep.DeterminismOK, rep.TicksChecked, rep.FirstDiverging)
	}
	if rep.Recoveries < 1 || len(rep.RecoveryMs) != rep.Recoveries || rep.ViewChangeMs <= 0 {
		t.Fatalf("faults not exercised: %d recoveries, view change %v ms", rep.Recoveries, rep.ViewChangeMs)
	}
	r, err := bsr.Open(rep.Recording)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.LastTick() < rep.Ticks {
		t.Fatalf("recording ends at tick %d, the match at %d", r.LastTick(), rep.Ticks)
	}
	game, _, err := broadside.GameOf(r.Header().GameConfig)
	if err != nil {
		t.Fatal(err)
	}
	res, err := bsr.Verify(context.Background(), r, game.NewSim, nil)
	if err != nil || !res.OK {
		t.Fatalf("the match's recording does not verify: %+v %v", res, err)
	}
}
