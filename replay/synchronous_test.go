package replay

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/anoptic/broadside/replay/snapshot"
)

// fixedClock is a Clock that stands still.
type fixedClock struct{ t time.Time }

func (c fixedClock) Now() time.Time { return c.t }
func (c fixedClock) After(time.Duration) <-chan time.Time {
	return make(chan time.Time) // never fires
}

// A Synchronous runner starts no goroutine: when the observer sees a tick,
// the tick's outputs are in the log and its snapshot is stored. Its
// progress is read from its clock.
func TestRunnerSynchronous(t *testing.T) {
	ctx := context.Background()
	var recs [][]byte
	for k := uint64(1); k <= 20; k++ {
		recs = append(recs, cmdRec(1, k, append([]byte{'o'}, byte(k))), tickRec(k))
	}
	log, store := NewMemLog(), snapshot.NewMemStore()
	clock := fixedClock{time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	before := runtime.NumGoroutine()
	var checked, snaps int
	var r *Runner
	r, err := NewRunner(RunnerConfig{
		World: 1, Shard: 3, Sim: newCounterSim(), Source: NewSliceSource(entriesOf(recs...), 1), Appender: log,
		Snapshots: &SnapshotConfig{Store: store, Policy: snapshot.Policy{MinInterval: 3, MaxInterval: 3}},
		Clock:     clock, Synchronous: true, Logger: quiet,
		Observer: func(info TickInfo) {
			checked++
			if n := runtime.NumGoroutine(); n > before {
				t.Errorf("tick %d: %d goroutines, %d before Run", info.Tick, n, before)
			}
			outs := 0
			for _, e := range log.Entries(1) {
				if e.Record.ID.Client == OutputClientID(1, 3) {
					outs++
				}
			}
			if outs != int(info.Tick) {
				t.Errorf("tick %d: %d outputs in the log", info.Tick, outs)
			}
			if info.Snapshot != NoSnapshot {
				snaps++
				if _, err := store.Get(ctx, 3, info.Tick); err != nil {
					t.Errorf("tick %d: snapshot not stored: %v", info.Tick, err)
				}
			}
			if !r.LastProgress().Equal(clock.t) {
				t.Errorf("tick %d: progress at %v, clock at %v", info.Tick, r.LastProgress(), clock.t)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if checked != 20 || snaps < 5 {
		t.Fatalf("%d ticks observed, %d snapshots", checked, snaps)
	}
}
