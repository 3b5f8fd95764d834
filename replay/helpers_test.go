package replay

import (
	"encoding/binary"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/lineage"
	"github.com/anoptic/broadside/netcode/wire"
	"github.com/anoptic/broadside/replay/table"
)

// counterSim is a tiny TableSim for tests of the engine's mechanics. Its
// state is one meta record (tick, inputs applied, checksum of inputs) and a
// table of values. Command payloads:
//
//	'w' slot u8 value u64   write value to slot (allocating slots below it)
//	'o' bytes...            output the bytes
//	'p'                     panic (if panicking is armed)
type counterSim struct {
	meta, vals *table.Table
	set        *table.Set
	panicArmed *bool
	block      chan struct{} // if non-nil, Step waits on it when blockAt is reached
	blockAt    uint64
}

func newCounterSim() *counterSim {
	meta, _ := table.New(1, 24, table.Options{MaxRecords: 1})
	vals, _ := table.New(2, 8, table.Options{RecordsPerPage: 8})
	set, _ := table.NewSet(meta, vals)
	if _, err := meta.Alloc(); err != nil {
		panic(err)
	}
	return &counterSim{meta: meta, vals: vals, set: set}
}

func (s *counterSim) Step(tick uint64, cmds []Command, _ lineage.Recorder) []Output {
	if s.block != nil && tick == s.blockAt {
		<-s.block
	}
	m := s.meta.Mut(0)
	m.SetU64(0, tick)
	var outs []Output
	for _, c := range cmds {
		m.SetU64(8, m.U64(8)+1)
		m.SetU64(16, table.Mix64(m.U64(16)^c.Pos^uint64(c.Player)<<32^table.HashBytes(0, c.Payload)))
		if len(c.Payload) == 0 {
			continue
		}
		switch c.Payload[0] {
		case 'w':
			if len(c.Payload) != 10 {
				continue
			}
			slot := int(c.Payload[1])
			for s.vals.Slots() <= slot || !s.vals.Live(slot) {
				if _, err := s.vals.Alloc(); err != nil {
					break
				}
			}
			if s.vals.Live(slot) {
				s.vals.Mut(slot).SetU64(0, binary.LittleEndian.Uint64(c.Payload[2:]))
			}
		case 'o':
			outs = append(outs, Output{Payload: append([]byte(nil), c.Payload[1:]...)})
		case 'p':
			if s.panicArmed != nil && *s.panicArmed {
				*s.panicArmed = false
				panic("counterSim: armed panic")
			}
		}
	}
	return outs
}

func (s *counterSim) Hash() uint64         { return s.set.Hash() }
func (s *counterSim) Tables() *table.Set   { return s.set }
func (s *counterSim) Restored() error      { return nil }
func (s *counterSim) tick() uint64         { return s.meta.Row(0).U64(0) }
func (s *counterSim) applied() uint64      { return s.meta.Row(0).U64(8) }
func (s *counterSim) value(slot int) int64 { return s.vals.Row(slot).I64(0) }

// Envelope builders.
func tickRec(n uint64) []byte {
	return wire.EncodeEnvelope(nil, wire.Envelope{Kind: wire.EnvelopeTick, Tick: n})
}

func cmdRec(player uint32, seq uint64, payload []byte) []byte {
	return wire.EncodeEnvelope(nil, wire.Envelope{Kind: wire.EnvelopePlayerCommand, Player: player, ClientSeq: seq, Payload: payload})
}

func writeCmd(slot uint8, v uint64) []byte {
	return binary.LittleEndian.AppendUint64([]byte{'w', slot}, v)
}

// entriesOf numbers records from position 1 with the given ids (a zero id
// gets a unique one).
func entriesOf(recs ...[]byte) []msg.Entry {
	out := make([]msg.Entry, len(recs))
	for i, r := range recs {
		out[i] = msg.Entry{Pos: uint64(i + 1), Record: msg.Record{ID: msg.RecordID{Client: 7, Seq: uint64(i + 1)}, Data: r}}
	}
	return out
}
