package match

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/anoptic/broadside/cmdlog/seq"
	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/replay/bsr"
)

// TestMatch runs the demo's match in short: a sim shard killed, the
// sequencing leader crashed, then the whole server killed with no clean
// stop and reopened from disk, then its checks. It asserts what the match
// reports — no acknowledged command lost (those acknowledged before the
// kill included), the re-simulation of the whole log identical tick by
// tick to the live hashes before and after the kill, the reopened sectors'
// replay identical to the killed server's hashes, a recovery, a view
// change and a restart that ticked and acknowledged again — and that the
// recording it wrote verifies.
func TestMatch(t *testing.T) {
	rep, err := Run(context.Background(), Options{Duration: 6 * time.Second, Bots: 10, Rate: 10, Seed: 5, Dir: t.TempDir(), Durability: seq.Fsync})
	if err != nil {
		t.Fatal(err)
	}
	k := rep.ServerKill
	if !k.Done || k.AckedBefore == 0 || k.FirstLiveTick <= k.TickBefore || k.TicksAfter == 0 || k.FirstTickMs <= 0 || k.FirstAckMs <= 0 {
		t.Fatalf("server kill not exercised: %+v", k)
	}
	if k.ReplayChecked == 0 || k.ReplayMismatched != 0 {
		t.Fatalf("reopened sectors: %d replayed hashes checked against the killed server's, %d differ", k.ReplayChecked, k.ReplayMismatched)
	}
	if k.Reconnects < int64(rep.Players) {
		t.Fatalf("%d sessions resumed after the kill, %d players", k.Reconnects, rep.Players)
	}
	if int64(k.AckedBefore) >= rep.Acked {
		t.Fatalf("nothing acknowledged after the restart: %d of %d before the kill", k.AckedBefore, rep.Acked)
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

// TestMatchMemorySkipsServerKill: in memory durability the demo does not
// kill the whole server (its data could not resume) and says why.
func TestMatchMemorySkipsServerKill(t *testing.T) {
	rep, err := Run(context.Background(), Options{Duration: 3 * time.Second, Bots: 3, Rate: 5, Seed: 2, Dir: t.TempDir(), Durability: seq.Memory})
	if err != nil {
		t.Fatal(err)
	}
	if rep.ServerKill.Done || !strings.Contains(rep.ServerKill.Skipped, "memory durability") {
		t.Fatalf("memory durability: server kill %+v", rep.ServerKill)
	}
}
