package replay_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/netcode/wire"
	"github.com/anoptic/broadside/replay"
)

func tickRec(n uint64) []byte {
	return wire.EncodeEnvelope(nil, wire.Envelope{Kind: wire.EnvelopeTick, Tick: n})
}

func cmdRec(player uint32, seq uint64, payload []byte) []byte {
	return wire.EncodeEnvelope(nil, wire.Envelope{Kind: wire.EnvelopePlayerCommand, Player: player, ClientSeq: seq, Payload: payload})
}

// testWorld is a small Broadside world whose ships and balls cross sector
// borders often: 1 km × 1 km in 2 × 2 sectors (ships spawn within 200 m of
// the centre, where the four sectors meet).
func testWorld(seed uint64) broadside.Config {
	return broadside.Config{Seed: seed, Width: 1000, Height: 1000, SectorsX: 2, SectorsY: 2, Islands: 0}
}

func sectorFactory(cfg broadside.Config, i int) func() (replay.TableSim, error) {
	return func() (replay.TableSim, error) { return broadside.NewSector(cfg, i) }
}

// scriptBots plays players 1..n without looking at the world: they join at
// tick 1, then give random orders and fire broadsides on a schedule.
type scriptBots struct {
	rng     *rand.Rand
	players uint32
	seq     uint64
}

func newScriptBots(n uint32, seed uint64) *scriptBots {
	return &scriptBots{rng: rand.New(rand.NewPCG(seed, 99)), players: n}
}

// records returns the envelopes the bots send before TICK(tick).
func (b *scriptBots) records(tick uint64) [][]byte {
	var out [][]byte
	add := func(p uint32, c broadside.PlayerCommand) {
		payload, err := broadside.EncodeCommand(c)
		if err != nil {
			panic(err)
		}
		b.seq++
		out = append(out, cmdRec(p, b.seq, payload))
	}
	for p := uint32(1); p <= b.players; p++ {
		switch {
		case tick == 1:
			add(p, broadside.Join())
		case tick == 2:
			add(p, broadside.Throttle(int8(50+b.rng.IntN(50))))
		case (tick+uint64(p))%40 == 0:
			add(p, broadside.Fire(broadside.Port))
		case (tick+uint64(p))%40 == 20:
			add(p, broadside.Fire(broadside.Starboard))
		case b.rng.IntN(12) == 0:
			add(p, broadside.Rudder(int8(b.rng.IntN(201)-100)))
		case b.rng.IntN(40) == 0:
			add(p, broadside.Throttle(int8(b.rng.IntN(201)-100)))
		}
	}
	// A little garbage from the outside world: the runner must skip it.
	if b.rng.IntN(25) == 0 {
		out = append(out, []byte("not an envelope"))
	}
	return out
}

// recording is a played match: the log and every shard's hash per tick.
type recording struct {
	cfg     broadside.Config
	entries []msg.Entry
	ticks   uint64
	hashes  [][]uint64 // [shard][tick-1]
	tickPos []uint64   // [tick-1] position of TICK(tick)
}

var (
	recordingsMu sync.Mutex
	recordings   = map[string]*recording{}
)

// record plays a match of ships bots for ticks ticks on a replay.MemLog with one
// replay.Runner per sector, stepping them in lockstep, and returns the log and
// the hashes. Recordings are cached per arguments.
func record(t testing.TB, seed uint64, ships uint32, ticks uint64) *recording {
	return recordWorld(t, testWorld(seed), ships, ticks)
}

// recordWorld is record for any world.
func recordWorld(t testing.TB, cfg broadside.Config, ships uint32, ticks uint64) *recording {
	t.Helper()
	seed := cfg.Seed
	key := fmt.Sprint(cfg, ships, ticks)
	recordingsMu.Lock()
	defer recordingsMu.Unlock()
	if r := recordings[key]; r != nil {
		return r
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := replay.NewMemLog()
	rec := &recording{cfg: cfg, ticks: ticks, hashes: make([][]uint64, cfg.Sectors())}
	runners := make([]*replay.Runner, cfg.Sectors())
	for i := range runners {
		sim, err := broadside.NewSector(cfg, i)
		if err != nil {
			t.Fatal(err)
		}
		shard := i
		r, err := replay.NewRunner(replay.RunnerConfig{World: 1, Shard: uint32(i), Sim: sim, Source: log.Subscribe(1), Appender: log,
			Observer: func(info replay.TickInfo) { rec.hashes[shard] = append(rec.hashes[shard], info.Hash) }})
		if err != nil {
			t.Fatal(err)
		}
		runners[i] = r
	}
	bots := newScriptBots(ships, seed)
	for n := uint64(1); n <= ticks; n++ {
		for _, b := range bots.records(n) {
			if err := log.Append(ctx, b); err != nil {
				t.Fatal(err)
			}
		}
		if err := log.AppendWithID(ctx, msg.RecordID{Client: replay.TickerClientID(1), Seq: n}, tickRec(n)); err != nil {
			t.Fatal(err)
		}
		rec.tickPos = append(rec.tickPos, log.Tail())
		for _, r := range runners {
			if err := r.RunUntil(ctx, n); err != nil {
				t.Fatalf("record: shard %d tick %d: %v", r.Shard(), n, err)
			}
		}
	}
	rec.entries = log.Entries(1)
	recordings[key] = rec
	return rec
}

// replayShard runs a fresh sector over the recording's entries (no
// snapshots, no appender) and returns its hash per tick.
func replayShard(t testing.TB, rec *recording, shard int, entries []msg.Entry) []uint64 {
	t.Helper()
	sim, err := broadside.NewSector(rec.cfg, shard)
	if err != nil {
		t.Fatal(err)
	}
	var hashes []uint64
	r, err := replay.NewRunner(replay.RunnerConfig{World: 1, Shard: uint32(shard), Sim: sim, Source: replay.NewSliceSource(entries, 1),
		Observer: func(info replay.TickInfo) { hashes = append(hashes, info.Hash) }})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	return hashes
}
