package replay

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/lineage"
	"github.com/anoptic/broadside/netcode/wire"
	"github.com/anoptic/broadside/replay/snapshot"
)

func TestMain(m *testing.M) { verifyNoLeaks(m) }

func runAll(t *testing.T, cfg RunnerConfig) *Runner {
	t.Helper()
	r, err := NewRunner(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Run(ctx); err != nil {
		t.Fatal(err)
	}
	return r
}

// Commands between TICK(n-1) and TICK(n) are tick n's inputs; malformed
// records, stale markers and player-0 commands are skipped and counted.
func TestRunnerTickInputs(t *testing.T) {
	entries := entriesOf(
		cmdRec(1, 1, writeCmd(0, 10)),
		[]byte{1, 2, 3}, // malformed
		tickRec(1),
		cmdRec(2, 1, writeCmd(1, 20)),
		cmdRec(0, 1, writeCmd(1, 99)), // player 0: refused
		wire.EncodeEnvelope(nil, wire.Envelope{Kind: wire.EnvelopeControl}),
		tickRec(2),
		tickRec(2), // stale
		cmdRec(1, 2, writeCmd(0, 11)),
		tickRec(3),
	)
	sim := newCounterSim()
	var infos []TickInfo
	r := runAll(t, RunnerConfig{Sim: sim, Source: NewSliceSource(entries, 1), Observer: func(i TickInfo) { infos = append(infos, i) }})
	if got := len(infos); got != 3 {
		t.Fatalf("%d ticks published, want 3", got)
	}
	for k, want := range []struct{ tick, pos uint64 }{{1, 3}, {2, 7}, {3, 10}} {
		if infos[k].Tick != want.tick || infos[k].Pos != want.pos {
			t.Errorf("tick info %d = tick %d pos %d, want %d at %d", k, infos[k].Tick, infos[k].Pos, want.tick, want.pos)
		}
	}
	if infos[0].Inputs != 1 || infos[1].Inputs != 1 || infos[2].Inputs != 1 {
		t.Errorf("inputs per tick %d %d %d, want 1 1 1", infos[0].Inputs, infos[1].Inputs, infos[2].Inputs)
	}
	if sim.value(0) != 11 || sim.value(1) != 20 || sim.applied() != 3 {
		t.Errorf("state: slot0 %d slot1 %d applied %d", sim.value(0), sim.value(1), sim.applied())
	}
	st := r.Stats()
	if st.Malformed != 2 || st.Ignored != 2 || st.Commands != 3 || st.Ticks != 3 {
		t.Errorf("stats %+v", st)
	}
	if cp := r.Checkpoint(); cp.Tick != 3 || cp.Pos != 10 {
		t.Errorf("checkpoint %+v", cp)
	}
}

// A marker that skips ticks steps the skipped ones empty; a marker too far
// ahead is ignored.
func TestRunnerTickGap(t *testing.T) {
	entries := entriesOf(tickRec(1), cmdRec(1, 1, writeCmd(0, 5)), tickRec(4), tickRec(1_000_000), tickRec(5))
	sim := newCounterSim()
	var ticks []uint64
	var gaps int
	r := runAll(t, RunnerConfig{Sim: sim, Source: NewSliceSource(entries, 1), MaxTickGap: 100,
		Observer: func(i TickInfo) {
			ticks = append(ticks, i.Tick)
			if i.Gap {
				gaps++
				if i.Inputs != 0 {
					t.Errorf("gap tick %d had %d inputs", i.Tick, i.Inputs)
				}
			}
		}})
	if want := []uint64{1, 2, 3, 4, 5}; !equalU64(ticks, want) {
		t.Fatalf("ticks %v, want %v", ticks, want)
	}
	if gaps != 2 || r.Stats().GapTicks != 2 || r.Stats().Malformed != 1 {
		t.Errorf("gaps %d stats %+v", gaps, r.Stats())
	}
	if sim.tick() != 5 || sim.value(0) != 5 {
		t.Errorf("sim at tick %d value %d", sim.tick(), sim.value(0))
	}
}

// Outputs are appended in order with dense deterministic ids; a runner
// restarted from a checkpoint re-appends nothing that was already durable.
func TestRunnerOutputs(t *testing.T) {
	ctx := context.Background()
	log := NewMemLog()
	app := func(b []byte) { _ = log.Append(ctx, b) }
	app(cmdRec(1, 1, []byte("oA")))
	app(cmdRec(1, 2, []byte("oB")))
	app(tickRec(1))
	app(cmdRec(1, 3, []byte("oC")))
	app(tickRec(2))
	r, err := NewRunner(RunnerConfig{World: 3, Shard: 2, Sim: newCounterSim(), Source: log.Subscribe(1), Appender: log})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.RunUntil(ctx, 2); err != nil {
		t.Fatal(err)
	}
	outs := outputsIn(log.Entries(1), OutputClientID(3, 2))
	if want := []string{"A", "B", "C"}; len(outs) != 3 || outs[0] != want[0] || outs[1] != want[1] || outs[2] != want[2] {
		t.Fatalf("outputs %q, want %q", outs, want)
	}
	// Replay the whole log again from scratch (a recovery without
	// snapshot): every output is recognised, none stored twice.
	before := log.Tail()
	r2, err := NewRunner(RunnerConfig{World: 3, Shard: 2, Sim: newCounterSim(), Source: log.Subscribe(1), Appender: log})
	if err != nil {
		t.Fatal(err)
	}
	if err := r2.RunUntil(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if log.Tail() != before {
		t.Fatalf("replay appended %d records", log.Tail()-before)
	}
	if got := r2.Checkpoint().OutputSeq; got != 3 {
		t.Fatalf("output seq %d, want 3", got)
	}
}

// outputsIn returns the payloads of client's migration records, checking
// that their seqs are 1, 2, 3, ...
func outputsIn(entries []msg.Entry, client uint64) []string {
	var out []string
	for _, e := range entries {
		if e.Record.ID.Client != client {
			continue
		}
		if e.Record.ID.Seq != uint64(len(out)+1) {
			return append(out, "<bad seq>")
		}
		env, err := wire.DecodeEnvelope(e.Record.Data)
		if err != nil || env.Kind != wire.EnvelopeMigration || env.Shard != BroadcastShard {
			return append(out, "<bad envelope>")
		}
		out = append(out, string(env.Payload))
	}
	return out
}

// A panic in Step becomes an error; the runner is then dead.
func TestRunnerSimPanic(t *testing.T) {
	armed := true
	sim := newCounterSim()
	sim.panicArmed = &armed
	entries := entriesOf(tickRec(1), cmdRec(1, 1, []byte("p")), tickRec(2), tickRec(3))
	r, err := NewRunner(RunnerConfig{Sim: sim, Source: NewSliceSource(entries, 1)})
	if err != nil {
		t.Fatal(err)
	}
	err = r.Run(context.Background())
	if !errors.Is(err, ErrSimPanic) {
		t.Fatalf("err %v, want ErrSimPanic", err)
	}
	if err := r.Run(context.Background()); !errors.Is(err, ErrSimPanic) {
		t.Fatalf("dead runner ran again: %v", err)
	}
}

// Kill stops a runner blocked on its source.
func TestRunnerKill(t *testing.T) {
	log := NewMemLog()
	r, err := NewRunner(RunnerConfig{Sim: newCounterSim(), Source: log.Subscribe(1), Appender: log})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(context.Background()) }()
	_ = log.Append(context.Background(), tickRec(1))
	deadline := time.Now().Add(5 * time.Second)
	for r.Tick() < 1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	r.Kill()
	if err := <-done; !errors.Is(err, ErrKilled) {
		t.Fatalf("err %v, want ErrKilled", err)
	}
}

// A runner with snapshots stores a chain that restores to the hash of the
// tick it was taken at; a snapshot waits for the tick's outputs.
func TestRunnerSnapshots(t *testing.T) {
	ctx := context.Background()
	log := NewMemLog()
	for n := uint64(1); n <= 40; n++ {
		_ = log.Append(ctx, cmdRec(1, n, writeCmd(uint8(n%20), n)))
		if n%7 == 0 {
			_ = log.Append(ctx, cmdRec(1, n, []byte("oout")))
		}
		_ = log.Append(ctx, tickRec(n))
	}
	store := snapshot.NewMemStore()
	hashes := map[uint64]uint64{}
	r, err := NewRunner(RunnerConfig{Sim: newCounterSim(), Source: log.Subscribe(1), Appender: log,
		Snapshots: &SnapshotConfig{Store: store, PruneEvery: 100, Policy: snapshot.Policy{MaxInterval: 3, ChainFactor: 2}},
		Observer:  func(i TickInfo) { hashes[i.Tick] = i.Hash }})
	if err != nil {
		t.Fatal(err)
	}
	for n := uint64(1); n <= 40; n++ {
		// Tick by tick: RunUntil waits for the writer, which would
		// otherwise fall behind a runner racing through a log in memory
		// (the runner then skips captures).
		if err := r.RunUntil(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	metas, err := store.List(ctx, 0)
	if err != nil || len(metas) < 10 {
		t.Fatalf("%d snapshots stored (%v)", len(metas), err)
	}
	fulls := 0
	for _, m := range metas {
		if m.Full {
			fulls++
		}
		if m.Hash != hashes[m.Tick] {
			t.Errorf("snapshot at tick %d has hash %#x, tick's was %#x", m.Tick, m.Hash, hashes[m.Tick])
		}
	}
	if fulls < 2 || fulls == len(metas) {
		t.Errorf("%d full snapshots of %d", fulls, len(metas))
	}
	got, err := RestoreShard(ctx, store, nil, 0, func() (TableSim, error) { return newCounterSim(), nil })
	if err != nil || got.Tip == nil {
		t.Fatalf("restore: %v", err)
	}
	if got.Sim.Hash() != hashes[got.Tip.Tick] || got.Start.Tick != got.Tip.Tick {
		t.Fatalf("restored tick %d hash %#x, want %#x", got.Tip.Tick, got.Sim.Hash(), hashes[got.Tip.Tick])
	}
	if got.Start.OutputSeq != got.Tip.Tick/7 {
		t.Fatalf("restored output seq %d at tick %d", got.Start.OutputSeq, got.Tip.Tick)
	}
}

func equalU64(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// fakeTickRecorder records the calls a runner makes to a lineage
// TickRecorder.
type fakeTickRecorder struct {
	calls []string
}

func (f *fakeTickRecorder) Command(lineage.EntityID, uint64)           {}
func (f *fakeTickRecorder) Derived(lineage.EntityID, lineage.EntityID) {}
func (f *fakeTickRecorder) BeginTick(_ context.Context, shard lineage.ShardID, tick uint64) error {
	f.calls = append(f.calls, fmt.Sprintf("begin %d/%d", shard, tick))
	return nil
}
func (f *fakeTickRecorder) Input(c lineage.CommandInfo) {
	f.calls = append(f.calls, fmt.Sprintf("input %d %d %d", c.Pos, c.Tick, c.Kind))
}
func (f *fakeTickRecorder) EndTick(context.Context) error {
	f.calls = append(f.calls, "end")
	return nil
}
func (f *fakeTickRecorder) Flush(context.Context) error {
	f.calls = append(f.calls, "flush")
	return nil
}

// A lineage TickRecorder sees every tick bracketed, gap ticks included,
// with the tick's inputs, and is flushed when a snapshot is captured.
func TestRunnerLineageTicks(t *testing.T) {
	entries := entriesOf(cmdRec(4, 1, writeCmd(1, 1)), tickRec(1), tickRec(3))
	rec := &fakeTickRecorder{}
	runAll(t, RunnerConfig{Shard: 2, Sim: newCounterSim(), Source: NewSliceSource(entries, 1), Recorder: rec,
		CommandKind: func(c Command) uint8 { return c.Payload[0] },
		Snapshots:   &SnapshotConfig{Store: snapshot.NewMemStore(), Policy: snapshot.Policy{DeltaFraction: 1e9, RecoveryTarget: time.Hour}}})
	want := []string{"begin 2/1", "input 1 1 119", "end", "flush", "begin 2/2", "end", "begin 2/3", "end"}
	if fmt.Sprint(rec.calls) != fmt.Sprint(want) {
		t.Fatalf("calls %q, want %q", rec.calls, want)
	}
}
