package replay_test

import (
	"context"
	"testing"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/snapshot"
	"github.com/anoptic/broadside/replay/table"
	"pgregory.net/rapid"
)

// The recording the property tests draw from: shorter than the kill
// tests', so that each check replays it whole in a few milliseconds.
const (
	propShips = 24
	propTicks = 200
)

// snapshotRun replays the recording's shard with snapshots per policy up to
// tick end, keeping every snapshot (the writer has a buffer for each, so
// the runner never skips a capture while the writer catches up).
func snapshotRun(t *rapid.T, rec *recording, shard int, policy snapshot.Policy, end uint64) *snapshot.MemStore {
	store := snapshot.NewMemStore()
	sim, err := broadside.NewSector(rec.cfg, shard)
	if err != nil {
		t.Fatal(err)
	}
	r, err := replay.NewRunner(replay.RunnerConfig{World: 1, Shard: uint32(shard), Sim: sim, Source: replay.NewSliceSource(rec.entries, 1),
		Snapshots: &replay.SnapshotConfig{Store: store, Policy: policy, PruneEvery: 1 << 20, Buffers: int(end) + 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.RunUntil(context.Background(), end); err != nil {
		t.Fatal(err)
	}
	if st := r.Stats(); st.SkippedCaptures != 0 {
		t.Fatalf("%d captures skipped", st.SkippedCaptures)
	}
	return store
}

// restoreChain restores a chain (base first) into a fresh sector.
func restoreChain(t *rapid.T, rec *recording, store snapshot.Store, chain []snapshot.Meta) *broadside.Sector {
	codec, err := snapshot.DefaultCodec()
	if err != nil {
		t.Fatal(err)
	}
	tip := chain[len(chain)-1]
	sec, err := broadside.NewSector(rec.cfg, int(tip.Shard))
	if err != nil {
		t.Fatal(err)
	}
	var full *table.SetCapture
	var deltas []*table.SetCapture
	for k, m := range chain {
		b, err := store.Get(context.Background(), m.Shard, m.Tick)
		if err != nil {
			t.Fatal(err)
		}
		got, sc, err := codec.Decode(b)
		if err != nil || !got.Equal(m) {
			t.Fatalf("snapshot at tick %d: %v (meta %+v, listed %+v)", m.Tick, err, got, m)
		}
		if k == 0 {
			full = sc
		} else {
			deltas = append(deltas, sc)
		}
	}
	if err := sec.Tables().Restore(full, deltas...); err != nil {
		t.Fatalf("restore chain to tick %d: %v", tip.Tick, err)
	}
	if err := sec.Restored(); err != nil {
		t.Fatalf("restored sector at tick %d: %v", tip.Tick, err)
	}
	return sec
}

// Properties of snapshots: restoring any stored chain reproduces the hash
// the shard had at the chain's tick, and replaying the log from there
// reaches the live hashes, tick by tick, to the end.
func TestPropertySnapshotRestoreAndReplay(t *testing.T) {
	rec := record(t, 2, propShips, propTicks)
	rapid.Check(t, func(t *rapid.T) {
		shard := rapid.IntRange(0, rec.cfg.Sectors()-1).Draw(t, "shard")
		policy := snapshot.Policy{
			MaxInterval:   rapid.Uint64Range(1, 50).Draw(t, "maxInterval"),
			ChainFactor:   rapid.Float64Range(0.2, 6).Draw(t, "chainFactor"),
			DeltaFraction: rapid.SampledFrom([]float64{0.05, 0.3, 1e9}).Draw(t, "deltaFraction"),
		}
		end := rapid.Uint64Range(1, rec.ticks).Draw(t, "end")
		store := snapshotRun(t, rec, shard, policy, end)
		metas, err := store.List(context.Background(), uint32(shard))
		if err != nil || len(metas) == 0 {
			t.Fatalf("no snapshots (%v)", err)
		}
		chains := snapshot.Chains(metas)
		if len(chains) != len(metas) {
			t.Fatalf("%d snapshots form %d complete chains", len(metas), len(chains))
		}
		chain := chains[rapid.IntRange(0, len(chains)-1).Draw(t, "chain")]
		tip := chain[len(chain)-1]
		sec := restoreChain(t, rec, store, chain)
		if want := rec.hashes[shard][tip.Tick-1]; sec.Hash() != want || tip.Hash != want {
			t.Fatalf("chain to tick %d restores hash %#x (snapshot says %#x), live hash %#x", tip.Tick, sec.Hash(), tip.Hash, want)
		}
		if tip.Pos != rec.tickPos[tip.Tick-1] {
			t.Fatalf("snapshot at tick %d records position %d, marker at %d", tip.Tick, tip.Pos, rec.tickPos[tip.Tick-1])
		}
		replayed := uint64(0)
		r, err := replay.NewRunner(replay.RunnerConfig{World: 1, Shard: uint32(shard), Sim: sec,
			Source: replay.NewSliceSource(rec.entries, tip.Pos+1), Start: replay.CheckpointOf(tip),
			Observer: func(info replay.TickInfo) {
				replayed++
				if want := rec.hashes[shard][info.Tick-1]; info.Hash != want {
					t.Fatalf("replay from tick %d: tick %d hash %#x, live %#x", tip.Tick, info.Tick, info.Hash, want)
				}
			}})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		if replayed != rec.ticks-tip.Tick || sec.Hash() != rec.hashes[shard][rec.ticks-1] {
			t.Fatalf("replay from tick %d stepped %d ticks to hash %#x", tip.Tick, replayed, sec.Hash())
		}
	})
}

// flakySource re-delivers some entries (as a subscription that retried a
// read might) and delivers the rest in the order given.
type flakySource struct {
	entries []msg.Entry
	dup     []bool
	next    int
	again   bool
}

func (s *flakySource) Next(ctx context.Context) (msg.Entry, error) {
	if s.next >= len(s.entries) {
		return msg.Entry{}, replay.ErrEndOfLog
	}
	e := s.entries[s.next]
	if s.dup[s.next] && !s.again {
		s.again = true
		return e, nil
	}
	s.again = false
	s.next++
	return e, nil
}

// Property of determinism: the same log always yields the same hashes,
// whatever the source's delivery (entries re-delivered) and whether the
// sim is run by a fresh runner or restarted at any tick from its own
// in-memory state.
func TestPropertySameLogSameHashes(t *testing.T) {
	rec := record(t, 2, propShips, propTicks)
	rapid.Check(t, func(t *rapid.T) {
		shard := rapid.IntRange(0, rec.cfg.Sectors()-1).Draw(t, "shard")
		dup := rapid.SliceOfN(rapid.Bool(), len(rec.entries), len(rec.entries)).Draw(t, "dup")
		stop := rapid.Uint64Range(1, rec.ticks).Draw(t, "stop")
		sec, err := broadside.NewSector(rec.cfg, shard)
		if err != nil {
			t.Fatal(err)
		}
		var hashes []uint64
		obs := func(info replay.TickInfo) { hashes = append(hashes, info.Hash) }
		src := &flakySource{entries: rec.entries, dup: dup}
		r, err := replay.NewRunner(replay.RunnerConfig{World: 1, Shard: uint32(shard), Sim: sec, Source: src, Observer: obs})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.RunUntil(context.Background(), stop); err != nil {
			t.Fatal(err)
		}
		// Continue with a new runner on the same sim from the checkpoint.
		cp := r.Checkpoint()
		r2, err := replay.NewRunner(replay.RunnerConfig{World: 1, Shard: uint32(shard), Sim: sec,
			Source: replay.NewSliceSource(rec.entries, cp.Pos+1), Start: cp, Observer: obs})
		if err != nil {
			t.Fatal(err)
		}
		if err := r2.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		if len(hashes) != int(rec.ticks) {
			t.Fatalf("%d ticks, want %d", len(hashes), rec.ticks)
		}
		for k, h := range hashes {
			if h != rec.hashes[shard][k] {
				t.Fatalf("tick %d: hash %#x, recorded %#x", k+1, h, rec.hashes[shard][k])
			}
		}
	})
}
