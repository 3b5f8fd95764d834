package bsr_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/lineage"
	"github.com/anoptic/broadside/netcode/wire"
	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/bsr"
)

// A small world whose ships and balls cross sector borders often: 1 km ×
// 1 km in 2 × 2 sectors, ships spawning near the centre.
func smallWorld(seed uint64) broadside.Config {
	return broadside.Config{Seed: seed, Width: 1000, Height: 1000, SectorsX: 2, SectorsY: 2}
}

// match is a generated log of a bot battle and every sector's hash after
// every tick, computed by stepping the sectors the way the engine's
// runners will (each tick's input: the records between its marker and the
// previous one, migrations included; gap ticks stepped empty).
type match struct {
	cfg     broadside.Config
	entries []msg.Entry
	ticks   uint64
	hashes  [][]uint64 // [tick][sector]
	ships   []broadside.ShipView
}

func playMatch(t testing.TB, cfg broadside.Config, players uint32, ticks uint64, seed uint64) *match {
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
	rng := rand.New(rand.NewPCG(seed, 3))
	var pos, seq, outSeq uint64
	var pending []replay.Command
	appendEntry := func(data []byte) uint64 {
		pos++
		m.entries = append(m.entries, msg.Entry{Pos: pos, Record: msg.Record{ID: msg.RecordID{Client: 1<<62 | 5, Seq: pos}, Data: data}})
		return pos
	}
	command := func(p uint32, c broadside.PlayerCommand) {
		payload, err := broadside.EncodeCommand(c)
		if err != nil {
			t.Fatal(err)
		}
		seq++
		at := appendEntry(wire.EncodeEnvelope(nil, wire.Envelope{Kind: wire.EnvelopePlayerCommand, Player: p, ClientSeq: seq, Payload: payload}))
		pending = append(pending, replay.Command{Pos: at, Player: p, ClientSeq: seq, Payload: payload})
	}
	step := func(n uint64, in []replay.Command) {
		hs := make([]uint64, len(sectors))
		var outs [][]byte
		for i, s := range sectors {
			for _, o := range s.Step(n, in, lineage.Nop) {
				outs = append(outs, o.Payload)
			}
			hs[i] = s.Hash()
		}
		m.hashes[n] = hs
		for _, o := range outs {
			outSeq++
			at := appendEntry(wire.EncodeEnvelope(nil, wire.Envelope{Kind: wire.EnvelopeMigration, Tick: n, Shard: replay.BroadcastShard, ClientSeq: outSeq, Payload: o}))
			pending = append(pending, replay.Command{Pos: at, ClientSeq: outSeq, Payload: o})
		}
	}
	for n := uint64(1); n <= ticks; n++ {
		for p := uint32(1); p <= players; p++ {
			if c, ok := scriptedCommand(rng, n, p); ok {
				command(p, c)
			}
		}
		if n%97 == 0 && n < ticks {
			step(n, nil) // no marker: a gap tick, its input waits for n+1
			continue
		}
		appendEntry(wire.EncodeEnvelope(nil, wire.Envelope{Kind: wire.EnvelopeTick, Tick: n}))
		in := pending
		pending = nil
		step(n, in)
	}
	for _, s := range sectors {
		s.Ships(func(v broadside.ShipView) { m.ships = append(m.ships, v) })
	}
	return m
}

func (m *match) newSim(shard uint32) (replay.TableSim, error) {
	return broadside.NewSector(m.cfg, int(shard))
}

func kindOf(c replay.Command) uint8 {
	if c.Player == 0 {
		return 0
	}
	pc, err := broadside.DecodeCommand(c.Payload)
	if err != nil {
		return 255
	}
	return uint8(pc.Kind)
}

func header(t testing.TB, cfg broadside.Config) bsr.Header {
	gc, err := cfg.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return bsr.Header{Game: broadside.GameName, SchemaVersion: broadside.SchemaVersion, TickRate: broadside.TickRate,
		Seed: cfg.Seed, World: 1, Shards: uint32(cfg.Sectors()), GameConfig: gc}
}

func record(t testing.TB, m *match, src replay.Source, cfg bsr.RecordConfig, newSim func(uint32) (replay.TableSim, error)) (string, bsr.RecordStats) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "match.bsr")
	w, err := bsr.Create(path, header(t, m.cfg), bsr.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if src == nil {
		src = replay.NewSliceSource(m.entries, 1)
	}
	if newSim == nil {
		newSim = m.newSim
	}
	cfg.Source, cfg.Writer, cfg.NewSim, cfg.CommandKind = src, w, newSim, kindOf
	cfg.KindNames = map[uint8]string{0: "migration", 1: "join", 2: "throttle", 3: "rudder", 4: "fire"}
	st, err := bsr.Record(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path, st
}

func open(t testing.TB, path string) *bsr.Reader {
	t.Helper()
	r, err := bsr.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func TestBroadsideRecordSeekVerify(t *testing.T) {
	m := playMatch(t, smallWorld(1), 24, 600, 1)
	path, st := record(t, m, nil, bsr.RecordConfig{}, nil)
	if st.LastTick != 600 || st.FullSnapshots == 0 {
		t.Fatalf("%+v", st)
	}
	r := open(t, path)
	var cfg broadside.Config
	if err := cfg.UnmarshalBinary(r.Header().GameConfig); err != nil || cfg != m.cfg {
		t.Fatalf("game config %+v %v", cfg, err)
	}
	for tick := uint64(1); tick <= 600; tick++ {
		rec, err := r.Tick(tick)
		if err != nil {
			t.Fatal(err)
		}
		for s, h := range rec.Hashes {
			if h != m.hashes[tick][s] {
				t.Fatalf("tick %d sector %d: recorded %#x, the game stepped alone %#x", tick, s, h, m.hashes[tick][s])
			}
		}
	}
	sk, err := bsr.NewSeeker(r, m.newSim)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(2, 2))
	for range 60 {
		tick := uint64(rng.IntN(601))
		sk.Reset()
		if err := sk.Seek(tick); err != nil {
			t.Fatalf("seek %d: %v", tick, err)
		}
		for s, sim := range sk.Sims() {
			if tick > 0 && sim.Hash() != m.hashes[tick][s] {
				t.Fatalf("seek %d sector %d: %#x, want %#x", tick, s, sim.Hash(), m.hashes[tick][s])
			}
		}
	}
	// The sims are sectors: the viewer reads ships from them.
	if err := sk.Seek(600); err != nil {
		t.Fatal(err)
	}
	var ships []broadside.ShipView
	for _, sim := range sk.Sims() {
		sim.(*broadside.Sector).Ships(func(v broadside.ShipView) { ships = append(ships, v) })
	}
	if len(ships) != len(m.ships) || ships[0] != m.ships[0] {
		t.Fatalf("%d ships after seek, %d in the match", len(ships), len(m.ships))
	}
	res, err := bsr.Verify(context.Background(), r, m.newSim, nil)
	if err != nil || !res.OK || res.Ticks != 600 {
		t.Fatalf("verify: %v %+v", err, res)
	}
	ix, err := r.Lineage()
	if err != nil {
		t.Fatal(err)
	}
	why, err := ix.Why(lineage.AnyShard, ships[0].ID, 600, 2)
	if err != nil || why.Applications == 0 {
		t.Fatalf("why %v: %v %+v", ships[0].ID, err, why)
	}
	if ix.KindName(4) != "fire" {
		t.Fatalf("kind names: %q", ix.KindName(4))
	}
}

// tamperedSector is a sector with a bug: at one tick it takes a point of
// hull off one ship. A recording made with it does not verify with the
// real game, and verify must name that ship's hull.
type tamperedSector struct {
	*broadside.Sector
	at uint64
}

func (s *tamperedSector) Step(tick uint64, cmds []replay.Command, rec lineage.Recorder) []replay.Output {
	outs := s.Sector.Step(tick, cmds, rec)
	if tick == s.at {
		ships := s.Tables().Tables()[2] // meta, players, ships, motion, balls
		for i := ships.NextLive(0); i >= 0; i = ships.NextLive(i + 1) {
			if hull := ships.Row(i).I16(16); hull > 1 {
				ships.Mut(i).SetI16(16, hull-1)
				break
			}
		}
	}
	return outs
}

func (s *tamperedSector) Hash() uint64 { return s.Tables().Hash() }

func TestBroadsideVerifyNamesDivergence(t *testing.T) {
	m := playMatch(t, smallWorld(2), 24, 400, 2)
	tampered := func(shard uint32) (replay.TableSim, error) {
		s, err := broadside.NewSector(m.cfg, int(shard))
		if shard == 1 {
			return &tamperedSector{Sector: s, at: 250}, err
		}
		return s, err
	}
	path, _ := record(t, m, nil, bsr.RecordConfig{Snapshots: bsr.SnapshotPolicy{FullEvery: 120, DeltaEvery: 15}}, tampered)
	r := open(t, path)
	res, err := bsr.Verify(context.Background(), r, m.newSim, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.OK || !res.Exact || res.FirstTick != 250 || res.Shard != 1 || res.DiffTick != 250 || res.Table != 3 || res.Offset != 16 || res.Field != "hull" {
		t.Fatalf("%+v", res)
	}
	t.Log(res.Detail)
}

// TestBroadsideLiveRecording records a match while it is being played:
// the recorder follows the log's tail and stops when its context ends.
func TestBroadsideLiveRecording(t *testing.T) {
	m := playMatch(t, smallWorld(3), 16, 500, 3)
	log := replay.NewMemLog()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	played := make(chan uint64, 1)
	go func() {
		var ticks uint64
		for _, e := range m.entries {
			if err := log.AppendWithID(ctx, e.Record.ID, e.Record.Data); err != nil {
				return
			}
			if env, err := wire.DecodeEnvelope(e.Record.Data); err == nil && env.Kind == wire.EnvelopeTick {
				ticks = env.Tick
				if ticks == 300 {
					break
				}
				time.Sleep(200 * time.Microsecond)
			}
		}
		played <- ticks
	}()
	path := filepath.Join(t.TempDir(), "live.bsr")
	w, err := bsr.Create(path, header(t, m.cfg), bsr.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan bsr.RecordStats)
	var progress atomic.Uint64
	go func() {
		st, err := bsr.Record(ctx, bsr.RecordConfig{Source: log.Subscribe(1), Writer: w, NewSim: m.newSim,
			Progress: func(tick uint64) { progress.Store(tick) }})
		if err != nil {
			t.Error(err)
		}
		done <- st
	}()
	last := <-played
	// Let the recorder catch up with the tail, then stop it as a server
	// stops at the end of a match.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if progress.Load() >= last {
			break
		}
	}
	cancel()
	st := <-done
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if st.Stopped != "context" || st.LastTick != last {
		t.Fatalf("%+v (played %d)", st, last)
	}
	r := open(t, path)
	if lastTick(t, w) != last || r.LastTick() != last || r.Truncated() != "" {
		t.Fatalf("last %d truncated %q", r.LastTick(), r.Truncated())
	}
	if res, err := bsr.Verify(context.Background(), r, m.newSim, nil); err != nil || !res.OK {
		t.Fatalf("%v %+v", err, res)
	}
	if h, err := r.Hash(2, last); err != nil || h != m.hashes[last][2] {
		t.Fatalf("hash %#x %v", h, err)
	}
}

// lastTick reads the progress of a recording being written.
func lastTick(t testing.TB, w *bsr.Writer) uint64 {
	r, err := bsr.Open(w.Path())
	if err != nil {
		return 0
	}
	defer r.Close()
	return r.LastTick()
}

func TestBroadsideFromTick(t *testing.T) {
	m := playMatch(t, smallWorld(4), 20, 500, 4)
	path, st := record(t, m, nil, bsr.RecordConfig{FromTick: 301, ToTick: 450}, nil)
	r := open(t, path)
	if r.BaseTick() != 300 || r.LastTick() != 450 || st.FastForward != 300 {
		t.Fatalf("base %d last %d %+v", r.BaseTick(), r.LastTick(), st)
	}
	sk, err := bsr.NewSeeker(r, m.newSim)
	if err != nil {
		t.Fatal(err)
	}
	for tick := uint64(450); tick >= 300; tick -= 7 {
		sk.Reset()
		if err := sk.Seek(tick); err != nil {
			t.Fatal(err)
		}
		for s, sim := range sk.Sims() {
			if sim.Hash() != m.hashes[tick][s] {
				t.Fatalf("seek %d sector %d", tick, s)
			}
		}
	}
	if err := sk.Seek(299); !errors.Is(err, bsr.ErrOutOfRange) {
		t.Fatal(err)
	}
	if res, err := bsr.Verify(context.Background(), r, m.newSim, nil); err != nil || !res.OK || res.Ticks != 150 {
		t.Fatalf("%v %+v", err, res)
	}
}

// scriptedCommand is what player p of a synthetic match does at tick:
// join at tick 1, fire a broadside every 40 ticks, and now and then turn
// the rudder or set the throttle (ok false: nothing this tick).
func scriptedCommand(rng *rand.Rand, tick uint64, p uint32) (broadside.PlayerCommand, bool) {
	switch phase := (tick + uint64(p)) % 80; {
	case tick == 1:
		return broadside.Join(), true
	case phase == 0:
		return broadside.Fire(broadside.Port), true
	case phase == 40:
		return broadside.Fire(broadside.Starboard), true
	case rng.IntN(10) == 0:
		return broadside.Rudder(int8(rng.IntN(201) - 100)), true
	case rng.IntN(30) == 0:
		return broadside.Throttle(int8(30 + rng.IntN(71))), true
	}
	return broadside.PlayerCommand{}, false
}
