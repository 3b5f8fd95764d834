package dst

import (
	"flag"
	"strings"
	"testing"

	"github.com/anoptic/broadside/cmdlog/seq"
)

var (
	flagSeed  = flag.Uint64("dst.seed", 0, "replay one seed (with a trace)")
	flagSeeds = flag.Int("dst.seeds", 500, "number of seeds TestSimulate runs")
	flagFirst = flag.Uint64("dst.first", 1, "first seed TestSimulate runs")
	flagFsync = flag.Bool("dst.fsync", false, "fsync durability (replicas recover from compacted write-ahead logs), for -dst.seed or all seeds")
)

// TestSimulate runs many seeds with faults and expects no violation. A
// failing seed is printed; `go test ./internal/dst -run TestSimulate
// -dst.seed=S -v` replays it with a trace.
func TestSimulate(t *testing.T) {
	if *flagSeed != 0 {
		var trace strings.Builder
		opts := Options{Seed: *flagSeed, Trace: &trace}
		if *flagFsync {
			opts.Durability = seq.Fsync
		}
		res := Run(opts)
		t.Log("\n" + trace.String())
		t.Log(res.String())
		if !res.OK() {
			t.Fatalf("seed %d failed", *flagSeed)
		}
		return
	}
	n := *flagSeeds
	if testing.Short() {
		n = min(n, 50)
	}
	var failed []uint64
	var total Result
	faulty, dedupSeeds := 0, 0
	for i := range n {
		seed := *flagFirst + uint64(i)
		opts := Options{Seed: seed}
		replay := ""
		if *flagFsync {
			opts.Durability = seq.Fsync
			replay = " -dst.fsync"
		}
		res := Run(opts)
		if !res.OK() {
			failed = append(failed, seed)
			t.Errorf("%s\nreplay: go test ./internal/dst -run 'TestSimulate$' -dst.seed=%d%s -v", res.String(), seed, replay)
		}
		total.CompactedRecoveries += res.CompactedRecoveries
		if res.Crashes+res.Partitions+res.Dropped+res.Duplicated > 0 {
			faulty++
		}
		total.Appends += res.Appends
		total.Acked += res.Acked
		total.ViewChanges += res.ViewChanges
		total.Crashes += res.Crashes
		total.FalseGone += res.FalseGone
		total.Partitions += res.Partitions
		total.Dropped += res.Dropped
		total.Duplicated += res.Duplicated
		total.Reads += res.Reads
		total.Busy += res.Busy
		total.Admission += res.Admission
		total.Rolls += res.Rolls
		total.FloorRaises += res.FloorRaises
		total.Unknown += res.Unknown
		total.Quiet += res.Quiet
		if res.DedupSeed {
			dedupSeeds++
		}
	}
	mode := ""
	if *flagFsync {
		mode = " (fsync durability)"
	}
	line := "dst%s: %d seeds, %d violations (%d seeds with faults; %d appends, %d acked, %d reads, %d view changes, %d crashes, %d false crash reports, %d recoveries from compacted WALs, %d partitions, %d drops, %d duplicates, %d busy rejects; " +
		"dedup leases in %d seeds: %d busy refusals of new clients, %d lease rolls, %d floor raises, %d outcomes unknown, %d quiet clients)\n"
	args := []any{mode, n, len(failed), faulty, total.Appends, total.Acked, total.Reads, total.ViewChanges, total.Crashes, total.FalseGone, total.CompactedRecoveries, total.Partitions, total.Dropped, total.Duplicated, total.Busy,
		dedupSeeds, total.Admission, total.Rolls, total.FloorRaises, total.Unknown, total.Quiet}
	t.Logf(line, args...)
	printf(line, args...)
	if faulty < n*9/10 {
		t.Errorf("only %d of %d seeds injected a fault", faulty, n)
	}
	if n >= 100 && (total.Admission == 0 || total.Rolls == 0 || total.FloorRaises == 0 || total.Unknown == 0) {
		t.Errorf("the dedup-lease workload did not reach every path: %d admission refusals, %d rolls, %d floor raises, %d outcomes unknown",
			total.Admission, total.Rolls, total.FloorRaises, total.Unknown)
	}
}

// TestSimulateNoFaults checks the fault-free path end to end.
func TestSimulateNoFaults(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		// Without faults the views still change often (the seeds' tiny
		// byte budgets make followers fall behind, be dropped and
		// rejoin): a lease far longer than the default lets every
		// append complete. TestSimulate runs the default lease, where an
		// append pending through 8 view changes ends with its outcome
		// unknown.
		res := Run(Options{Seed: seed, NoFaults: true, LeaseViews: 1 << 20})
		if !res.OK() {
			t.Fatalf("%s", res.String())
		}
		if res.Acked != res.Appends {
			t.Fatalf("seed %d: %d of %d appends acknowledged", seed, res.Acked, res.Appends)
		}
	}
}

// TestDeterministic: the same seed yields the same run.
func TestDeterministic(t *testing.T) {
	a := Run(Options{Seed: 42})
	b := Run(Options{Seed: 42})
	if a.String() != b.String() {
		t.Fatalf("seed 42 ran differently:\n%s\n%s", a.String(), b.String())
	}
}

// TestCheckerCatchesInjectedBugs proves the checker can fail: each known
// protocol bug must be caught by the simulator's own checks (the cores'
// self-checks are switched off) within a bounded number of seeds.
func TestCheckerCatchesInjectedBugs(t *testing.T) {
	bugs := []struct {
		name  string
		bug   seq.Bugs
		wal   WALBugs
		fsync bool
		dedup bool // every seed runs the dedup-lease workload
		lease bool // clients resend past their lease (clientcore.Config.IgnoreLeaseBug)
	}{
		{"stable-gp advanced before followers GC", seq.Bugs{StableBeforeFollowerGC: true}, WALBugs{}, false, false, false},
		{"dedup state not carried across view change", seq.Bugs{ForgetDedup: true}, WALBugs{}, false, false, false},
		{"flush does not rewrite ordered, unstable records", seq.Bugs{FlushOnlyUnordered: true}, WALBugs{}, false, false, false},
		{"checkpoint forgets the dedup marks stored since the view began", seq.Bugs{CheckpointForgetsDedup: true}, WALBugs{}, true, false, false},
		{"WAL compaction deletes the checkpoint too", seq.Bugs{}, WALBugs{KeepNothingBeforeCheckpoint: true}, true, false, false},
		{"a full dedup table evicts by recency", seq.Bugs{EvictByRecency: true}, WALBugs{}, false, true, false},
		{name: "clients resend past their dedup lease", dedup: true, lease: true},
	}
	for _, b := range bugs {
		t.Run(b.name, func(t *testing.T) {
			for seed := uint64(1); seed <= 1000; seed++ {
				opts := Options{Seed: seed, Bugs: b.bug, WALBugs: b.wal, ExternalChecksOnly: true}
				if b.dedup {
					opts.Dedup = 1
				}
				opts.ClientIgnoresLease = b.lease
				if b.fsync {
					opts.Durability = seq.Fsync
				}
				res := Run(opts)
				if !res.OK() {
					t.Logf("caught at seed %d: %s", seed, res.Violations[0])
					printf("dst: injected bug %q caught at seed %d\n", b.name, seed)
					return
				}
			}
			t.Fatalf("injected bug %q was not caught in 1000 seeds", b.name)
		})
	}
}

// TestSimulateFsync runs seeds with fsync durability, where every replica
// may crash at once and recovers from its write-ahead log.
func TestSimulateFsync(t *testing.T) {
	n := 100
	if testing.Short() {
		n = 20
	}
	bad, compacted := 0, 0
	for seed := uint64(1); seed <= uint64(n); seed++ {
		res := Run(Options{Seed: seed, Durability: seq.Fsync})
		compacted += res.CompactedRecoveries
		if !res.OK() {
			bad++
			t.Errorf("%s\nreplay: go test ./internal/dst -run 'TestSimulate$' -dst.seed=%d -dst.fsync -v", res.String(), seed)
		}
	}
	printf("dst (fsync durability): %d seeds, %d violations, %d recoveries from compacted WALs\n", n, bad, compacted)
	if compacted == 0 {
		t.Errorf("no replica recovered from a compacted WAL")
	}
}
