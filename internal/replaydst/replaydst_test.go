package replaydst

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/snapshot"
)

var (
	flagSeed  = flag.Uint64("replaydst.seed", 0, "replay one seed (with a trace)")
	flagSeeds = flag.Int("replaydst.seeds", 300, "number of seeds TestSimulate runs")
	flagFirst = flag.Uint64("replaydst.first", 1, "first seed TestSimulate runs")
	flagTicks = flag.Int("replaydst.ticks", 0, "ticks with faults per seed (0: the default)")
	flagBug   = flag.String("replaydst.bug", "", "with -replaydst.seed: inject this bug (skip-commands-after-snapshot, snapshot-before-outputs)")
)

// bugs are the injected bugs the simulator must catch.
var bugs = []struct {
	name string
	bugs replay.Bugs
}{
	{"skip-commands-after-snapshot", replay.Bugs{SkipCommandsAfterSnapshot: true}},
	{"snapshot-before-outputs", replay.Bugs{SnapshotBeforeOutputs: true}},
}

// codec decodes snapshots in every run; it is created outside the synctest
// bubbles, which must not share channels made in another bubble.
var codec = func() *snapshot.Codec {
	c, err := snapshot.DefaultCodec()
	if err != nil {
		panic(err)
	}
	return c
}()

// run runs opts in a synctest bubble of its own.
func run(t *testing.T, opts Options) Result {
	t.Helper()
	opts.Codec = codec
	if opts.Ticks == 0 {
		opts.Ticks = *flagTicks
	}
	var res Result
	synctest.Test(t, func(*testing.T) { res = Run(opts) })
	return res
}

// printf writes a summary line to standard output (seen in `make test`).
func printf(format string, args ...any) { fmt.Fprintf(os.Stdout, format, args...) }

// TestSimulate runs many seeds with faults and expects no violation. A
// failing seed is printed; `go test ./internal/replaydst -run 'TestSimulate$'
// -replaydst.seed=S -v` replays it exactly, with a trace.
func TestSimulate(t *testing.T) {
	if *flagSeed != 0 {
		var trace strings.Builder
		opts := Options{Seed: *flagSeed, Trace: &trace}
		for _, b := range bugs {
			if b.name == *flagBug {
				opts.Bugs, opts.ExternalChecksOnly = b.bugs, true
			}
		}
		res := run(t, opts)
		t.Log("\n" + trace.String())
		t.Log(res.String())
		if !res.OK() {
			t.Fatalf("seed %d failed", *flagSeed)
		}
		return
	}
	n := *flagSeeds
	if testing.Short() {
		n = min(n, 30)
	}
	var total Result
	failed, faulty := 0, 0
	for k := range n {
		seed := *flagFirst + uint64(k)
		res := run(t, Options{Seed: seed})
		if !res.OK() {
			failed++
			t.Errorf("%s\nreplay: go test ./internal/replaydst -run 'TestSimulate$' -replaydst.seed=%d -v", res.String(), seed)
		}
		if res.FaultCount() > 0 {
			faulty++
		}
		for f, c := range res.Faults {
			total.Faults[f] += c
		}
		total.Recoveries += res.Recoveries
		total.FailedRecoveries += res.FailedRecoveries
		total.Fallbacks += res.Fallbacks
		total.Replayed += res.Replayed
		total.Snapshots += res.Snapshots
		total.Checked += res.Checked
		total.Outputs += res.Outputs
	}
	var kinds strings.Builder
	for f, c := range total.Faults {
		fmt.Fprintf(&kinds, "%s %d, ", faultNames[f], c)
	}
	line := "replay-dst: %d seeds, %d violations (%d seeds with faults: %s%d recoveries, %d failed recoveries, %d fallbacks, %d ticks replayed, %d snapshots, %d hashes checked, %d outputs)\n"
	args := []any{n, failed, faulty, kinds.String(), total.Recoveries, total.FailedRecoveries, total.Fallbacks, total.Replayed,
		total.Snapshots, total.Checked, total.Outputs}
	t.Logf(line, args...)
	printf(line, args...)
	if faulty < n*9/10 {
		t.Errorf("only %d of %d seeds injected a fault", faulty, n)
	}
	for f, c := range total.Faults {
		if c == 0 && n >= 100 {
			t.Errorf("no %s fault in %d seeds", faultNames[f], n)
		}
	}
}

// TestSimulateNoFaults: without faults every check holds and nothing is
// recovered.
func TestSimulateNoFaults(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		res := run(t, Options{Seed: seed, NoFaults: true})
		if !res.OK() || res.Recoveries+res.FailedRecoveries > 0 || res.Outputs == 0 || res.Snapshots == 0 {
			t.Fatalf("%s", res.String())
		}
	}
}

// TestDeterministic: the same seed yields the same run: the same log, the
// same faults and recoveries in the same order.
func TestDeterministic(t *testing.T) {
	for _, seed := range []uint64{3, 42, 77} {
		var ta, tb strings.Builder
		a, b := run(t, Options{Seed: seed, Trace: &ta}), run(t, Options{Seed: seed, Trace: &tb})
		if a.String() != b.String() || ta.String() != tb.String() {
			t.Fatalf("seed %d ran differently:\n%s\n%s\n%s\n----\n%s", seed, a.String(), b.String(), ta.String(), tb.String())
		}
	}
}

// TestCatchesInjectedBugs proves the checks can fail: each injected
// recovery bug must be caught by the simulator's own checks (the
// supervisor's divergence reports are ignored) within a bounded number of
// seeds.
func TestCatchesInjectedBugs(t *testing.T) {
	for _, b := range bugs {
		t.Run(b.name, func(t *testing.T) {
			for seed := uint64(1); seed <= 200; seed++ {
				res := run(t, Options{Seed: seed, Bugs: b.bugs, ExternalChecksOnly: true})
				if !res.OK() {
					t.Logf("caught at seed %d: %s", seed, res.Violations[0])
					printf("replay-dst: injected bug %q caught at seed %d (go test ./internal/replaydst -run 'TestSimulate$' -replaydst.seed=%d -replaydst.bug=%s -v)\n",
						b.name, seed, seed, b.name)
					return
				}
			}
			t.Fatalf("injected bug %q was not caught in 200 seeds", b.name)
		})
	}
}
