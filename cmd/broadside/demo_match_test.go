package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/replay/bsr"
)

// TestMatchDemo runs 'broadside demo' in short: the match with a sim shard
// killed and the sequencing leader crashed, then its checks. It asserts
// what the demo reports — no acknowledged command lost, the re-simulation
// identical tick by tick, a recovery and a view change — and that the
// recording it wrote verifies.
func TestMatchDemo(t *testing.T) {
	dir := t.TempDir()
	jsonFile := filepath.Join(dir, "d.json")
	rep, err := runMatchDemo(context.Background(), io.Discard, matchOptions{
		duration: 6 * time.Second, bots: 10, rate: 10, seed: 5, dir: dir, jsonFile: jsonFile,
	})
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
	var fromFile map[string]any
	b, err := os.ReadFile(jsonFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &fromFile); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"acked", "applied", "lost", "recoveries", "recovery_ms", "determinism_ok", "recording"} {
		if _, ok := fromFile[k]; !ok {
			t.Errorf("--json lacks key %q", k)
		}
	}
	r, game, err := broadside.OpenRecording(rep.Recording)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.LastTick() < rep.Ticks {
		t.Fatalf("recording ends at tick %d, the match at %d", r.LastTick(), rep.Ticks)
	}
	res, err := bsr.Verify(context.Background(), r, describedSectors(game), nil)
	if err != nil || !res.OK {
		t.Fatalf("the demo's recording does not verify: %+v %v", res, err)
	}
}
