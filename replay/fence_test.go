package replay_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/netcode/wire"
	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/snapshot"
)

// fencedRun plays a fenced world (every sector under a lease claimed at
// epoch 10+sector) in lockstep for ticks ticks. With takeoverAt > 0,
// sector 1 is taken over before that tick: a new owner claims it at epoch
// 100 and replays it from the start, while the old owner, paused, wakes up
// zombieTicks later. zombie (if set) is given each entry the new owner
// appended and may return a record a stale owner would append after it.
// It returns every sector's hash per tick and the log.
func fencedRun(t *testing.T, cfg broadside.Config, ticks, takeoverAt uint64, zombie func(msg.Entry) []byte) ([][]uint64, []msg.Entry, []msg.Entry, *replay.Runner) {
	h, all, z, old, _ := fencedRunStore(t, cfg, ticks, takeoverAt, zombie, nil)
	return h, all, z, old
}

// fencedRunStore is fencedRun where, with a store, the old owner of
// sector 1 snapshots into it (a full snapshot after the tick before the
// takeover) and the new owner restores from it instead of replaying from
// the start; it also returns the new owner's starting checkpoint.
func fencedRunStore(t *testing.T, cfg broadside.Config, ticks, takeoverAt uint64, zombie func(msg.Entry) []byte, store snapshot.Store) ([][]uint64, []msg.Entry, []msg.Entry, *replay.Runner, replay.Checkpoint) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := replay.NewMemLog()
	hashes := make([][]uint64, cfg.Sectors())
	var start replay.Checkpoint
	newRunner := func(shard int, epoch uint64) *replay.Runner {
		var sim replay.Sim
		var snaps *replay.SnapshotConfig
		var from replay.Checkpoint
		switch {
		case store != nil && shard == 1 && epoch == 100:
			res, err := replay.RestoreShard(ctx, store, nil, 1, func() (replay.TableSim, error) { return broadside.NewSector(cfg, 1) })
			if err != nil {
				t.Fatal(err)
			}
			sim, from, start = res.Sim, res.Start, res.Start
		case store != nil && shard == 1:
			snaps = &replay.SnapshotConfig{Store: store}
			fallthrough
		default:
			s, err := broadside.NewSector(cfg, shard)
			if err != nil {
				t.Fatal(err)
			}
			sim = s
		}
		r, err := replay.NewRunner(replay.RunnerConfig{World: 1, Shard: uint32(shard), Sim: sim, Source: log.Subscribe(from.Pos + 1), Appender: log,
			Start: from, Snapshots: snaps, Epoch: epoch, Logger: slog.New(slog.DiscardHandler),
			Observer: func(info replay.TickInfo) {
				if h := &hashes[shard]; uint64(len(*h)) < info.Tick {
					*h = append(*h, info.Hash)
				}
			}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	runners := make([]*replay.Runner, cfg.Sectors())
	for i := range runners {
		if err := log.Append(ctx, replay.LeaseClaimRecord(uint32(i), uint64(10+i))); err != nil {
			t.Fatal(err)
		}
		runners[i] = newRunner(i, uint64(10+i))
	}
	var zombieRecs []msg.Entry
	old := runners[1]
	bots := newScriptBots(12, cfg.Seed)
	scanned := uint64(0)
	for n := uint64(1); n <= ticks; n++ {
		for _, b := range bots.records(n) {
			if err := log.Append(ctx, b); err != nil {
				t.Fatal(err)
			}
		}
		if n == takeoverAt {
			if err := log.Append(ctx, replay.LeaseClaimRecord(1, 100)); err != nil {
				t.Fatal(err)
			}
			runners[1] = newRunner(1, 100)
			scanned = log.Tail()
		}
		if store != nil && n == takeoverAt-1 {
			runners[1].SnapshotNext()
		}
		if err := log.AppendWithID(ctx, msg.RecordID{Client: replay.TickerClientID(1), Seq: n}, tickRec(n)); err != nil {
			t.Fatal(err)
		}
		for _, r := range runners {
			if err := r.RunUntil(ctx, n); err != nil {
				t.Fatalf("shard %d tick %d: %v", r.Shard(), n, err)
			}
		}
		if takeoverAt > 0 && n >= takeoverAt && zombie != nil {
			for _, e := range log.Entries(scanned + 1) {
				if rec := zombie(e); rec != nil {
					if err := log.Append(ctx, rec); err != nil {
						t.Fatal(err)
					}
					zombieRecs = append(zombieRecs, log.Entries(log.Tail())[0])
				}
			}
			scanned = log.Tail()
		}
	}
	return hashes, log.Entries(1), zombieRecs, old, start
}

// A new owner restores the sector from the old owner's snapshot (with its
// fence table) rather than replaying from the start, and the world goes on
// exactly as if it had replayed.
func TestTakeoverFromSnapshot(t *testing.T) {
	cfg := testWorld(7)
	const ticks, takeoverAt = 120, 60
	replayed, _, _, _ := fencedRun(t, cfg, ticks, takeoverAt, nil)
	store := snapshot.NewMemStore()
	got, entries, _, _, start := fencedRunStore(t, cfg, ticks, takeoverAt, nil, store)
	if start.Tick != takeoverAt-1 || len(start.Fences) == 0 {
		t.Fatalf("the new owner started at %+v, want the snapshot of tick %d with its fences", start, takeoverAt-1)
	}
	if s, tick, diff := firstDiff(replayed, got); diff {
		t.Fatalf("restored takeover differs from a replayed one: sector %d tick %d", s, tick)
	}
	if s, tick, diff := firstDiff(got, resimulate(t, cfg, entries)); diff {
		t.Fatalf("live hashes differ from a re-simulation: sector %d tick %d", s, tick)
	}
}

// resimulate replays every sector over entries offline (unfenced runners,
// no appender) and returns the hashes per tick.
func resimulate(t *testing.T, cfg broadside.Config, entries []msg.Entry) [][]uint64 {
	t.Helper()
	out := make([][]uint64, cfg.Sectors())
	rec := &recording{cfg: cfg}
	for s := range out {
		out[s] = replayShard(t, rec, s, entries)
	}
	return out
}

func firstDiff(a, b [][]uint64) (shard, tick int, ok bool) {
	for s := range a {
		if len(a[s]) != len(b[s]) {
			return s, min(len(a[s]), len(b[s])) + 1, true
		}
		for i := range a[s] {
			if a[s][i] != b[s][i] {
				return s, i + 1, true
			}
		}
	}
	return 0, 0, false
}

// A sector taken over by a new owner while its old owner is paused: the
// old owner, woken up, appends outputs under its stale epoch (here copies
// of every migration the new owner appended, which would duplicate
// entities if applied). They change nothing: every tick's hash of every
// sector, live and re-simulated from the log, equals a re-simulation of
// the same log with the zombie's records made inert (kept in place: the
// game's hashes depend on log positions).
func TestZombieOwnerChangesNothing(t *testing.T) {
	cfg := testWorld(7)
	const ticks, takeoverAt = 160, 60
	copies := 0
	zombie := func(e msg.Entry) []byte {
		env, err := wire.DecodeEnvelope(e.Record.Data)
		if err != nil || env.Kind != wire.EnvelopeMigration || env.Epoch != 100 {
			return nil
		}
		copies++
		env.Epoch = 11 // the old owner's epoch
		return wire.EncodeEnvelope(nil, env)
	}
	got, entries, zombieRecs, old := fencedRun(t, cfg, ticks, takeoverAt, zombie)
	if copies == 0 {
		t.Fatal("sector 1 migrated nothing after the takeover: the test proves nothing")
	}
	zpos := map[uint64]bool{}
	for _, z := range zombieRecs {
		zpos[z.Pos] = true
	}
	// rewrite returns entries with every zombie record replaced by f's.
	rewrite := func(f func(wire.Envelope) wire.Envelope) []msg.Entry {
		out := make([]msg.Entry, 0, len(entries))
		for _, e := range entries {
			if zpos[e.Pos] {
				env, err := wire.DecodeEnvelope(e.Record.Data)
				if err != nil {
					t.Fatal(err)
				}
				e.Record.Data = wire.EncodeEnvelope(nil, f(env))
			}
			out = append(out, e)
		}
		return out
	}
	want := resimulate(t, cfg, rewrite(func(wire.Envelope) wire.Envelope {
		return wire.Envelope{Kind: wire.EnvelopeControl} // inert
	}))
	if s, tick, diff := firstDiff(want, got); diff {
		t.Fatalf("live hashes differ from the log without the zombie: sector %d tick %d", s, tick)
	}
	if s, tick, diff := firstDiff(want, resimulate(t, cfg, entries)); diff {
		t.Fatalf("re-simulated hashes differ from the log without the zombie: sector %d tick %d", s, tick)
	}
	// The paused owner itself, woken up, reads the newer claim and stops
	// before it appends anything.
	ctx := context.Background()
	if err := old.RunUntil(ctx, ticks); !errors.Is(err, replay.ErrFenced) {
		t.Fatalf("the woken-up old owner: %v, want ErrFenced", err)
	}
	if old.Tick() >= takeoverAt {
		t.Fatalf("the old owner stepped tick %d past the takeover at %d", old.Tick(), takeoverAt)
	}
	// The check could fail: the same records under the current epoch are
	// applied, and the world diverges.
	forged := rewrite(func(env wire.Envelope) wire.Envelope { env.Epoch = 100; return env })
	if _, _, diff := firstDiff(want, resimulate(t, cfg, forged)); !diff {
		t.Fatal("the zombie's records changed nothing even under the current epoch: the test proves nothing")
	}
	t.Logf("%d stale migrations appended by the zombie after the takeover at tick %d; %d ticks x %d sectors identical", copies, takeoverAt, ticks, cfg.Sectors())
}

// The old owner's outputs of its last tick land after the new owner's
// claim (it was paused between stepping and appending): they are stale,
// and its snapshot of that tick counts them. A new owner restored from
// that snapshot would never produce them again, so it refuses to run
// rather than lose them.
func TestSnapshotAheadOfFenceRefused(t *testing.T) {
	cfg := testWorld(7)
	const last = 59 // sector 1 migrates ships at tick 59 in this world
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := replay.NewMemLog()
	store := snapshot.NewMemStore()
	runners := make([]*replay.Runner, cfg.Sectors())
	for i := range runners {
		if err := log.Append(ctx, replay.LeaseClaimRecord(uint32(i), uint64(10+i))); err != nil {
			t.Fatal(err)
		}
		sim, err := broadside.NewSector(cfg, i)
		if err != nil {
			t.Fatal(err)
		}
		var snaps *replay.SnapshotConfig
		if i == 1 {
			snaps = &replay.SnapshotConfig{Store: store}
		}
		if runners[i], err = replay.NewRunner(replay.RunnerConfig{World: 1, Shard: uint32(i), Sim: sim, Source: log.Subscribe(1), Appender: log,
			Snapshots: snaps, Epoch: uint64(10 + i), Logger: slog.New(slog.DiscardHandler)}); err != nil {
			t.Fatal(err)
		}
	}
	bots := newScriptBots(12, cfg.Seed)
	step := func(n uint64, rs []*replay.Runner) error {
		for _, r := range rs {
			if err := r.RunUntil(ctx, n); err != nil {
				return err
			}
		}
		return nil
	}
	for n := uint64(1); n <= last; n++ {
		for _, b := range bots.records(n) {
			if err := log.Append(ctx, b); err != nil {
				t.Fatal(err)
			}
		}
		if n == last {
			runners[1].SnapshotNext()
		}
		if err := log.AppendWithID(ctx, msg.RecordID{Client: replay.TickerClientID(1), Seq: n}, tickRec(n)); err != nil {
			t.Fatal(err)
		}
		if n == last {
			if err := log.Append(ctx, replay.LeaseClaimRecord(1, 100)); err != nil {
				t.Fatal(err)
			}
		}
		if err := step(n, runners); err != nil {
			t.Fatal(err)
		}
	}
	res, err := replay.RestoreShard(ctx, store, nil, 1, func() (replay.TableSim, error) { return broadside.NewSector(cfg, 1) })
	if err != nil {
		t.Fatal(err)
	}
	if res.Start.Tick != last {
		t.Fatalf("restored at tick %d, want %d", res.Start.Tick, last)
	}
	newOwner, err := replay.NewRunner(replay.RunnerConfig{World: 1, Shard: 1, Sim: res.Sim, Source: log.Subscribe(res.Start.Pos + 1), Appender: log,
		Start: res.Start, Epoch: 100, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := log.AppendWithID(ctx, msg.RecordID{Client: replay.TickerClientID(1), Seq: last + 1}, tickRec(last+1)); err != nil {
		t.Fatal(err)
	}
	if err := newOwner.RunUntil(ctx, last+1); !errors.Is(err, replay.ErrSnapshotAheadOfFence) {
		t.Fatalf("new owner on a snapshot ahead of its fence: %v, want ErrSnapshotAheadOfFence", err)
	}
	// The other sectors saw the old owner's late outputs as stale.
	if err := step(last+1, []*replay.Runner{runners[0]}); err != nil {
		t.Fatal(err)
	}
	if st := runners[0].Stats(); st.Stale == 0 {
		t.Fatalf("sector 0 ignored no stale output: %+v", st)
	}
	// From the start, the new owner reproduces them and goes on.
	fresh, err := broadside.NewSector(cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	replayer, err := replay.NewRunner(replay.RunnerConfig{World: 1, Shard: 1, Sim: fresh, Source: log.Subscribe(1), Appender: log,
		Epoch: 100, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := replayer.RunUntil(ctx, last+1); err != nil {
		t.Fatal(err)
	}
	// The old owner produced Outputs through tick last; the fenced-out
	// ones are not AlreadyLogged for the new owner: it appends them again.
	oldOuts, st := runners[1].Stats().Outputs, replayer.Stats()
	if st.AlreadyLogged >= oldOuts || st.Appended+st.AlreadyLogged != st.Outputs {
		t.Fatalf("the old owner produced %d outputs; the new owner found %d logged and appended %d of %d", oldOuts, st.AlreadyLogged, st.Appended, st.Outputs)
	}
}

// TestCheckpointFencesAtItsPosition checks that a runner's Checkpoint
// carries the fence table as it was at the checkpoint, not as it is after
// the entries read past it: a successor started from it (a hot standby's)
// re-reads those entries, and must judge the migrations among them by the
// claims before them.
func TestCheckpointFencesAtItsPosition(t *testing.T) {
	cfg := broadside.DefaultConfig()
	sim, err := broadside.NewSector(cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	tick := func(n uint64) []byte {
		return wire.EncodeEnvelope(nil, wire.Envelope{Kind: wire.EnvelopeTick, Tick: n})
	}
	var entries []msg.Entry
	for i, data := range [][]byte{replay.LeaseClaimRecord(1, 5), tick(1), replay.LeaseClaimRecord(1, 7)} {
		entries = append(entries, msg.Entry{Pos: uint64(i + 1), Record: msg.Record{ID: msg.RecordID{Client: 1, Seq: uint64(i + 1)}, Data: data}})
	}
	r, err := replay.NewRunner(replay.RunnerConfig{World: 1, Shard: 0, Sim: sim, Source: replay.NewSliceSource(entries, 1), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	cp := r.Checkpoint()
	if cp.Tick != 1 || cp.Pos != 2 || len(cp.Fences) != 1 || cp.Fences[0].Shard != 1 || cp.Fences[0].Epoch != 5 {
		t.Fatalf("checkpoint %+v: want tick 1 at position 2 with sector 1 fenced at epoch 5 (the claim of epoch 7 is past it)", cp)
	}
}
