package bsr

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/lineage"
	"github.com/anoptic/broadside/netcode/wire"
	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/table"
)

// counterSim is a tiny deterministic TableSim for the package's tests: a
// table of counters (16-byte records: entity id u64, value u64). A command
// payload [op, k, v] creates a counter (op 1) or adds v to the k-th live
// counter (op 2); every tick, every counter whose value is odd grows by
// the tick number, so pages are dirtied at a steady rate. Shard s ignores
// commands whose k%shards != s, so shards differ.
type counterSim struct {
	shard, shards uint32
	t             *table.Table
	set           *table.Set
	hash          uint64
}

func newCounterSim(shard, shards uint32) (replay.TableSim, error) {
	t, err := table.New(7, 16, table.Options{RecordsPerPage: 8})
	if err != nil {
		return nil, err
	}
	set, err := table.NewSet(t)
	if err != nil {
		return nil, err
	}
	return &counterSim{shard: shard, shards: shards, t: t, set: set, hash: set.Hash()}, nil
}

func (c *counterSim) Step(tick uint64, cmds []replay.Command, rec lineage.Recorder) []replay.Output {
	for _, cmd := range cmds {
		p := cmd.Payload
		if len(p) != 3 || uint32(p[1])%c.shards != c.shard {
			continue
		}
		switch p[0] {
		case 1:
			i, err := c.t.Alloc()
			if err != nil {
				continue
			}
			id := uint64(c.shard)<<48 | tick<<16 | uint64(i)
			r := c.t.Mut(i)
			r.SetU64(0, id)
			r.SetU64(8, uint64(p[2]))
			rec.Command(lineage.EntityID(id), cmd.Pos)
		case 2:
			k := int(p[1]) % max(1, c.t.Len())
			for i := c.t.NextLive(0); i >= 0; i = c.t.NextLive(i + 1) {
				if k == 0 {
					r := c.t.Mut(i)
					r.SetU64(8, r.U64(8)+uint64(p[2]))
					rec.Command(lineage.EntityID(r.U64(0)), cmd.Pos)
					break
				}
				k--
			}
		case 3: // free the k-th counter
			k := int(p[1]) % max(1, c.t.Len())
			for i := c.t.NextLive(0); i >= 0; i = c.t.NextLive(i + 1) {
				if k == 0 {
					c.t.Free(i)
					break
				}
				k--
			}
		}
	}
	for i := c.t.NextLive(0); i >= 0; i = c.t.NextLive(i + 1) {
		if c.t.Row(i).U64(8)%2 == 1 {
			r := c.t.Mut(i)
			r.SetU64(8, r.U64(8)+tick)
		}
	}
	c.hash = c.set.Hash()
	return nil
}

func (c *counterSim) Hash() uint64       { return c.hash }
func (c *counterSim) Tables() *table.Set { return c.set }
func (c *counterSim) Restored() error    { c.hash = c.set.Hash(); return nil }
func (c *counterSim) DescribeRecord(tid uint32, slot, off int) (string, string) {
	entity := fmt.Sprintf("counter %#x", c.t.Row(slot).U64(0))
	switch {
	case off < 0:
		return entity, ""
	case off < 8:
		return entity, "id"
	default:
		return entity, "value"
	}
}

// testLog is a generated log for counterSims and the state hashes each
// shard must have after every tick.
type testLog struct {
	entries []msg.Entry
	shards  uint32
	last    uint64
	hashes  map[uint64][]uint64 // tick → per-shard hash
	gaps    map[uint64]bool
}

func tickRec(n uint64) []byte {
	return wire.EncodeEnvelope(nil, wire.Envelope{Kind: wire.EnvelopeTick, Tick: n})
}

func cmdRec(player uint32, seq uint64, payload []byte) []byte {
	return wire.EncodeEnvelope(nil, wire.Envelope{Kind: wire.EnvelopePlayerCommand, Player: player, ClientSeq: seq, Payload: payload})
}

// makeTestLog generates ticks ticks for shards counterSims: a few commands
// per tick, a skipped marker now and then (gap ticks) and a stale marker.
func makeTestLog(t testing.TB, shards uint32, ticks uint64, seed uint64) *testLog {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	l := &testLog{shards: shards, last: ticks, hashes: map[uint64][]uint64{}, gaps: map[uint64]bool{}}
	sims := make([]replay.TableSim, shards)
	for s := range sims {
		sims[s], _ = newCounterSim(uint32(s), shards)
	}
	var pos, seq uint64
	var pending []replay.Command
	add := func(data []byte, c *replay.Command) {
		pos++
		l.entries = append(l.entries, msg.Entry{Pos: pos, Record: msg.Record{ID: msg.RecordID{Client: 1 << 62, Seq: pos}, Data: data}})
		if c != nil {
			c.Pos = pos
			pending = append(pending, *c)
		}
	}
	for n := uint64(1); n <= ticks; n++ {
		for range rng.IntN(4) {
			op := byte(1 + rng.IntN(2))
			if n < 5 {
				op = 1
			} else if rng.IntN(10) == 0 {
				op = 3 // frees are rarer, so a tampered counter usually lives on
			}
			p := []byte{op, byte(rng.IntN(16)), byte(rng.IntN(5))}
			seq++
			add(cmdRec(1, seq, p), &replay.Command{Player: 1, ClientSeq: seq, Payload: p})
		}
		hs := make([]uint64, shards)
		if n%37 == 0 && n < ticks {
			// No marker for n: tick n is stepped empty by TICK(n+1).
			l.gaps[n] = true
			for s, sim := range sims {
				sim.Step(n, nil, lineage.Nop)
				hs[s] = sim.Hash()
			}
			l.hashes[n] = hs
			continue
		}
		add(tickRec(n), nil)
		if n%53 == 0 {
			add(tickRec(n-3), nil) // stale: ignored
		}
		for s, sim := range sims {
			sim.Step(n, pending, lineage.Nop)
			hs[s] = sim.Hash()
		}
		pending = pending[:0]
		l.hashes[n] = hs
	}
	return l
}

func (l *testLog) source() replay.Source { return replay.NewSliceSource(l.entries, 1) }

func (l *testLog) newSim(shard uint32) (replay.TableSim, error) {
	return newCounterSim(shard, l.shards)
}

func testHeader(shards uint32) Header {
	return Header{Game: "counter", SchemaVersion: 3, TickRate: 30, Seed: 42, World: 9, Shards: shards,
		GameConfig: []byte("cfg"), Created: 1}
}

// recordTestLog records l into a new file and returns its path.
func recordTestLog(t testing.TB, l *testLog, cfg RecordConfig) (string, RecordStats) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rec.bsr")
	w, err := Create(path, testHeader(l.shards), WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Source, cfg.Writer, cfg.NewSim = l.source(), w, l.newSim
	if cfg.KindNames == nil {
		cfg.KindNames = map[uint8]string{0: "engine", 1: "counter"}
	}
	if cfg.CommandKind == nil {
		cfg.CommandKind = func(c replay.Command) uint8 { return 1 }
	}
	st, err := Record(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path, st
}

func mustOpen(t testing.TB, path string) *Reader {
	t.Helper()
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func writeFile(t testing.TB, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f.bsr")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// rewrite copies the recording at src to a new file, passing every chunk's
// payload through edit (which may change it), and returns the new path.
func rewrite(t testing.TB, src string, edit func(c chunkRef, raw []byte) []byte) string {
	t.Helper()
	r := mustOpen(t, src)
	dst := filepath.Join(t.TempDir(), "edited.bsr")
	w, err := Create(dst, r.Header(), WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range r.refs {
		raw, err := r.readRaw(&c)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.writeChunk(c, edit(c, raw)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return dst
}

// payloadOf returns a player command record's payload (nil for others).
func payloadOf(t testing.TB, data []byte) []byte {
	env, err := wire.DecodeEnvelope(data)
	if err != nil || env.Kind != wire.EnvelopePlayerCommand {
		return nil
	}
	return env.Payload
}
