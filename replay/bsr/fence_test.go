package bsr_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/lineage"
	"github.com/anoptic/broadside/netcode/wire"
	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/bsr"
	"github.com/anoptic/broadside/replay/snapshot"
)

// playFencedMatch is playMatch on a fenced world (cluster mode): every
// sector's lease is claimed at epoch 1 before tick 1, failover[n] = s
// claims sector s's lease anew (epoch + 1) before tick n's commands, and
// each sector's migrations carry its epoch and source under the epoch's
// client id (replay.FencedOutputClientID). Right after each failover the
// fenced-out owner's copy of the new owner's first output is appended too,
// with the old epoch: a stale output, which every runner ignores (and the
// hashes leave out).
func playFencedMatch(t testing.TB, cfg broadside.Config, players uint32, ticks uint64, seed uint64, failover map[uint64]uint32) *match {
	t.Helper()
	m := &match{cfg: cfg, ticks: ticks, hashes: make([][]uint64, ticks+1)}
	var sectors []*broadside.Sector
	for i := range cfg.Sectors() {
		s, err := broadside.NewSector(cfg, i)
		if err != nil {
			t.Fatal(err)
		}
		sectors = append(sectors, s)
	}
	n := len(sectors)
	epoch, outSeq, base := make([]uint64, n), make([]uint64, n), make([]uint64, n)
	staleNext := make([]bool, n)
	rng := rand.New(rand.NewPCG(seed, 3))
	var pos, seq uint64
	var pending []replay.Command
	appendEntry := func(id msg.RecordID, data []byte) uint64 {
		pos++
		if id.Client == 0 {
			id = msg.RecordID{Client: 1<<62 | 5, Seq: pos}
		}
		m.entries = append(m.entries, msg.Entry{Pos: pos, Record: msg.Record{ID: id, Data: data}})
		return pos
	}
	command := func(p uint32, c broadside.PlayerCommand) {
		payload, err := broadside.EncodeCommand(c)
		if err != nil {
			t.Fatal(err)
		}
		seq++
		at := appendEntry(msg.RecordID{}, wire.EncodeEnvelope(nil, wire.Envelope{Kind: wire.EnvelopePlayerCommand, Player: p, ClientSeq: seq, Payload: payload}))
		pending = append(pending, replay.Command{Pos: at, Player: p, ClientSeq: seq, Payload: payload})
	}
	claim := func(s int) {
		epoch[s]++
		base[s] = outSeq[s]
		appendEntry(msg.RecordID{}, replay.LeaseClaimRecord(uint32(s), epoch[s]))
	}
	for s := range n {
		claim(s)
	}
	step := func(tick uint64, in []replay.Command) {
		hs := make([]uint64, n)
		outs := make([][][]byte, n)
		for i, s := range sectors {
			for _, o := range s.Step(tick, in, lineage.Nop) {
				outs[i] = append(outs[i], o.Payload)
			}
			hs[i] = s.Hash()
		}
		m.hashes[tick] = hs
		for i := range outs {
			for _, o := range outs[i] {
				outSeq[i]++
				env := wire.Envelope{Kind: wire.EnvelopeMigration, Tick: tick, Shard: replay.BroadcastShard, ClientSeq: outSeq[i],
					Epoch: epoch[i], Source: uint32(i), Payload: o}
				at := appendEntry(msg.RecordID{Client: replay.FencedOutputClientID(1, uint32(i), epoch[i]), Seq: outSeq[i] - base[i]}, wire.EncodeEnvelope(nil, env))
				pending = append(pending, replay.Command{Pos: at, ClientSeq: outSeq[i], Payload: o})
				if staleNext[i] {
					staleNext[i] = false
					env.Epoch = epoch[i] - 1
					appendEntry(msg.RecordID{Client: replay.FencedOutputClientID(1, uint32(i), env.Epoch), Seq: outSeq[i] - base[i]}, wire.EncodeEnvelope(nil, env))
				}
			}
		}
	}
	for tick := uint64(1); tick <= ticks; tick++ {
		if s, ok := failover[tick]; ok {
			claim(int(s))
			staleNext[s] = true
		}
		for p := uint32(1); p <= players; p++ {
			if c, ok := scriptedCommand(rng, tick, p); ok {
				command(p, c)
			}
		}
		appendEntry(msg.RecordID{}, wire.EncodeEnvelope(nil, wire.Envelope{Kind: wire.EnvelopeTick, Tick: tick}))
		in := pending
		pending = nil
		step(tick, in)
	}
	return m
}

// recordedMigrations returns the migrations of ticks after from in r's
// log, with the lease epoch of their source shard in force where each
// stands.
func recordedMigrations(t *testing.T, r *bsr.Reader, from uint64) (migs []wire.Envelope, ids []msg.RecordID, current []uint64) {
	t.Helper()
	src := r.Entries()
	fences, err := r.BaseFences()
	if err != nil {
		t.Fatal(err)
	}
	epochs := map[uint32]uint64{}
	for _, f := range fences {
		epochs[f.Shard] = f.Epoch
	}
	for {
		e, err := src.Next(context.Background())
		if errors.Is(err, replay.ErrEndOfLog) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		env, err := wire.DecodeEnvelope(e.Record.Data)
		if err != nil {
			continue
		}
		if replay.IsLeaseClaim(&env) && env.Epoch > epochs[env.Shard] {
			epochs[env.Shard] = env.Epoch
		}
		if env.Kind == wire.EnvelopeMigration && env.Tick > from {
			migs, ids = append(migs, env), append(ids, e.Record.ID)
			current = append(current, epochs[replay.OutputSource(&env, e.Record.ID.Client)])
		}
	}
}

// TestForkFencedRecording forks a recording of a fenced world (lease
// claims, failovers of sectors 1 and 2, stale outputs of the fenced-out
// owners): the fork starts from a snapshot after the first failover (whose
// claim it must carry over) and before the second (which its log holds).
// With nothing removed it reproduces the original exactly; its
// migrations are fenced with the epoch in force (unfenced ones would be
// ignored as stale, and the ships and balls they carry lost); the stale
// outputs stay stale; the fork verifies, and seeks from its base; a fork
// without a player verifies too.
func TestForkFencedRecording(t *testing.T) {
	m := playFencedMatch(t, smallWorld(3), 24, 420, 5, map[uint64]uint32{120: 1, 260: 2})
	path, _ := record(t, m, nil, bsr.RecordConfig{Snapshots: bsr.SnapshotPolicy{FullEvery: 50}}, nil)
	orig := open(t, path)
	for tick := uint64(1); tick <= m.ticks; tick++ {
		for s := range orig.Header().Shards {
			if h, err := orig.Hash(s, tick); err != nil || h != m.hashes[tick][s] {
				t.Fatalf("original: tick %d sector %d: recorded %#x, stepped alone %#x (%v)", tick, s, h, m.hashes[tick][s], err)
			}
		}
	}
	verifyOK(t, m, orig)

	f, fi := fork(t, m, orig, bsr.ForkConfig{At: 300})
	if fi.From <= 120 || fi.From >= 260 {
		t.Fatalf("the fork starts at tick %d, want between the failovers (120, 260)", fi.From)
	}
	if d := firstHashDiff(t, orig, f, fi.From+1, m.ticks); d != 0 {
		t.Fatalf("the fork with nothing removed differs from the original at tick %d", d)
	}
	verifyOK(t, m, f)
	fences, err := f.BaseFences()
	if err != nil {
		t.Fatal(err)
	}
	want := []snapshot.Fence{{Shard: 0, Epoch: 1}, {Shard: 1, Epoch: 2}, {Shard: 2, Epoch: 1}, {Shard: 3, Epoch: 1}}
	if !slices.Equal(fences, want) {
		t.Fatalf("fork's base fences %+v, want %+v", fences, want)
	}
	migs, ids, current := recordedMigrations(t, f, fi.From)
	stale, fenced := 0, 0
	for k, env := range migs {
		switch {
		case env.Epoch == 0:
			t.Fatalf("fork migration %d (tick %d) is unfenced", k, env.Tick)
		case env.Epoch != current[k]:
			stale++ // the original's stale copy, kept
		default:
			fenced++
			if want := replay.FencedOutputClientID(1, env.Source, env.Epoch); ids[k].Client != want {
				t.Fatalf("fork migration %d: client %#x, want the epoch's %#x", k, ids[k].Client, want)
			}
		}
	}
	if fenced == 0 || stale != 1 {
		t.Fatalf("fork: %d fenced migrations, %d stale (want the failover at 260's one)", fenced, stale)
	}
	sk, err := bsr.NewSeeker(f, m.newSim)
	if err != nil {
		t.Fatal(err)
	}
	if err := sk.Seek(f.LastTick()); err != nil {
		t.Fatal(err)
	}

	g, _ := fork(t, m, orig, bsr.ForkConfig{At: 300, WithoutPlayers: []uint32{3}})
	verifyOK(t, m, g)
	if firstHashDiff(t, orig, g, 300, m.ticks) == 0 {
		t.Fatal("the fork without player 3 never differs from the original")
	}
}

// TestSeekInsideFencedRecording seeks cold to ticks after each failover of
// a fenced match, so that the seek starts from a snapshot inside the
// recording (after claims its base does not hold), and expects every
// sector's hash to be the one the match stepped: a seek that ignored the
// claims since the base would take the fenced-out owner's outputs for
// current, or drop its successor's.
func TestSeekInsideFencedRecording(t *testing.T) {
	m := playFencedMatch(t, smallWorld(3), 24, 420, 5, map[uint64]uint32{120: 1, 260: 2})
	path, _ := record(t, m, nil, bsr.RecordConfig{Snapshots: bsr.SnapshotPolicy{FullEvery: 50}}, nil)
	r := open(t, path)
	seeks, fromInside := 0, 0
	for tick := uint64(125); tick <= m.ticks; tick += 9 {
		sk, err := bsr.NewSeeker(r, m.newSim)
		if err != nil {
			t.Fatal(err)
		}
		if err := sk.Seek(tick); err != nil {
			t.Fatalf("seek to tick %d: %v", tick, err)
		}
		st := sk.LastSeek()
		for s, sim := range sk.Sims() {
			if h := sim.Hash(); h != m.hashes[tick][s] {
				t.Fatalf("seek to tick %d: sector %d hash %#x, the match stepped %#x (%+v)", tick, s, h, m.hashes[tick][s], st)
			}
		}
		seeks++
		if st.Restored > 0 {
			fromInside++
		}
	}
	if fromInside == 0 {
		t.Fatalf("none of %d seeks started from a snapshot inside the recording", seeks)
	}
	t.Logf("%d cold seeks after the failovers, %d from a snapshot inside the recording", seeks, fromInside)
}
