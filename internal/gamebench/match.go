package gamebench

import (
	"context"
	"time"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/lineage"
	"github.com/anoptic/broadside/netcode/wire"
	"github.com/anoptic/broadside/replay"
)

// BotMatch is a replay.Source of a generated bot battle: the log a server
// running game would hold (player commands, TICK markers and the sectors'
// migrations between them, in the order the engine's runners consume
// them). It plays the world itself, one sector after the other, with the
// bench-sim bot fleet steering and firing from what it sees.
type BotMatch struct {
	world   uint32
	sectors []*broadside.Sector
	fleet   *botFleet
	ticks   uint64 // the match's length
	tick    uint64 // last tick generated
	pos     uint64
	outSeq  []uint64 // per sector
	buf     []msg.Entry
	bi      int
	pending []replay.Command
	// gen is the time spent generating (playing the world and the bots).
	gen time.Duration
}

// NewBotMatch returns a match of ships bot ships in game, ticks long,
// logged as world's.
func NewBotMatch(game broadside.Config, world uint32, ships int, ticks, seed uint64) (*BotMatch, error) {
	m := &BotMatch{world: world, fleet: newBotFleet(uint32(ships), seed), ticks: ticks}
	for i := range game.Sectors() {
		s, err := broadside.NewSector(game, i)
		if err != nil {
			return nil, err
		}
		m.sectors = append(m.sectors, s)
	}
	m.outSeq = make([]uint64, len(m.sectors))
	return m, nil
}

// Ticks is the match's length.
func (m *BotMatch) Ticks() uint64 { return m.ticks }

// Sectors are the sectors of the generating world, as of the last tick
// generated.
func (m *BotMatch) Sectors() []*broadside.Sector { return m.sectors }

// Next implements replay.Source; ErrEndOfLog after the last tick.
func (m *BotMatch) Next(ctx context.Context) (msg.Entry, error) {
	for m.bi >= len(m.buf) {
		if m.tick >= m.ticks {
			return msg.Entry{}, replay.ErrEndOfLog
		}
		if err := ctx.Err(); err != nil {
			return msg.Entry{}, err
		}
		start := time.Now()
		if err := m.generate(); err != nil {
			return msg.Entry{}, err
		}
		m.gen += time.Since(start)
	}
	e := m.buf[m.bi]
	m.bi++
	return e, nil
}

func (m *BotMatch) add(id msg.RecordID, data []byte) uint64 {
	m.pos++
	m.buf = append(m.buf, msg.Entry{Pos: m.pos, Record: msg.Record{ID: id, Data: data}})
	return m.pos
}

// generate appends the next tick: the bots' commands, its marker, then
// (after stepping the world) the migrations the next tick will read.
func (m *BotMatch) generate() error {
	clear(m.buf)
	m.buf, m.bi = m.buf[:0], 0
	n := m.tick + 1
	for _, rec := range m.fleet.records(n, m.sectors) {
		env, err := wire.DecodeEnvelope(rec)
		if err != nil {
			return err
		}
		at := m.add(msg.RecordID{Client: 1<<62 | uint64(env.Player), Seq: env.ClientSeq}, rec)
		m.pending = append(m.pending, replay.Command{Pos: at, Player: env.Player, ClientSeq: env.ClientSeq, Payload: env.Payload})
	}
	m.add(msg.RecordID{Client: replay.TickerClientID(m.world), Seq: n}, wire.EncodeEnvelope(nil, wire.Envelope{Kind: wire.EnvelopeTick, Tick: n}))
	in := m.pending
	m.pending = nil
	for i, s := range m.sectors {
		for _, o := range s.Step(n, in, lineage.Nop) {
			m.outSeq[i]++
			seq := m.outSeq[i]
			data := wire.EncodeEnvelope(nil, wire.Envelope{Kind: wire.EnvelopeMigration, Tick: n, Shard: replay.BroadcastShard, ClientSeq: seq, Payload: o.Payload})
			at := m.add(msg.RecordID{Client: replay.OutputClientID(m.world, uint32(i)), Seq: seq}, data)
			m.pending = append(m.pending, replay.Command{Pos: at, ClientSeq: seq, Payload: o.Payload})
		}
	}
	m.tick = n
	return nil
}
