package viewer

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/netcode/wire"
	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/bsr"
)

// Deduplication client ids of the log Log builds (any ids unique per
// record do: the log is never appended to again).
const (
	matchPlayerClient = uint64(0x7a) << 56
	matchOutputClient = uint64(0x7b) << 56
)

// Log returns the match as the command log of a server running it: for
// each tick, the migrations the sectors returned the tick before and the
// players' commands, in the order the match stepped them, then the tick's
// TICK marker; every record in its envelope, at consecutive positions from
// 1.
func (m *MatchSource) Log() []msg.Entry {
	var out []msg.Entry
	pos, outSeq := uint64(0), uint64(0)
	add := func(id msg.RecordID, e wire.Envelope) {
		pos++
		out = append(out, msg.Entry{Pos: pos, Record: msg.Record{ID: id, Data: wire.EncodeEnvelope(nil, e)}})
	}
	// Positions: the match numbered its inputs as this log does (each
	// tick's inputs, then its marker), and migrations carry positions.
	for k, in := range m.inputs {
		tick := uint64(k + 1)
		for _, c := range in {
			if c.Pos != pos+1 {
				panic(fmt.Sprintf("viewer: match input at position %d, log at %d", c.Pos, pos+1))
			}
			if c.Player == 0 {
				outSeq++
				add(msg.RecordID{Client: matchOutputClient, Seq: outSeq},
					wire.Envelope{Kind: wire.EnvelopeMigration, Tick: tick - 1, Shard: replay.BroadcastShard, ClientSeq: outSeq, Payload: c.Payload})
				continue
			}
			add(msg.RecordID{Client: matchPlayerClient | uint64(c.Player), Seq: c.ClientSeq},
				wire.Envelope{Kind: wire.EnvelopePlayerCommand, Tick: tick, Player: c.Player, ClientSeq: c.ClientSeq, Payload: c.Payload})
		}
		add(msg.RecordID{Client: replay.TickerClientID(0), Seq: tick}, wire.Envelope{Kind: wire.EnvelopeTick, Tick: tick})
	}
	return out
}

// WriteRecording records the match as a .bsr recording at path with
// bsr.Record (re-simulating it from its log, as recording a server does),
// with the given snapshot policy (zero: the adaptive default).
func (m *MatchSource) WriteRecording(ctx context.Context, path string, snaps bsr.SnapshotPolicy) (bsr.RecordStats, error) {
	return m.writeRecording(ctx, path, snaps, func(shard uint32) (replay.TableSim, error) {
		return broadside.NewSector(m.cfg, int(shard))
	})
}

// writeRecording is WriteRecording with the sims to record with (tests
// record with broken ones).
func (m *MatchSource) writeRecording(ctx context.Context, path string, snaps bsr.SnapshotPolicy, newSim func(uint32) (replay.TableSim, error)) (bsr.RecordStats, error) {
	game, err := m.cfg.MarshalBinary()
	if err != nil {
		return bsr.RecordStats{}, err
	}
	w, err := bsr.Create(path, bsr.Header{Game: broadside.GameName, SchemaVersion: broadside.SchemaVersion,
		TickRate: broadside.TickRate, Seed: m.cfg.Seed, Shards: uint32(m.cfg.Sectors()), GameConfig: game}, bsr.WriterOptions{})
	if err != nil {
		return bsr.RecordStats{}, err
	}
	st, err := bsr.Record(ctx, bsr.RecordConfig{
		Source:      replay.NewSliceSource(m.Log(), 1),
		Writer:      w,
		NewSim:      newSim,
		CommandKind: func(c replay.Command) uint8 { return KindOf(&c) },
		KindNames:   KindNames,
		Snapshots:   snaps,
		Logger:      slog.New(slog.DiscardHandler),
	})
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	return st, err
}
