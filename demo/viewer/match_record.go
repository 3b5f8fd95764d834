//go:build !js

package viewer

import (
	"context"
	"log/slog"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/bsr"
	"github.com/anoptic/broadside/replay/world"
)

// Log returns the match's command log, as a server running it would hold
// it: for each tick, the migrations the sectors returned the tick before
// and the players' commands, then the tick's TICK marker.
func (m *MatchSource) Log() []msg.Entry { return m.log }

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
	game, err := broadside.NewGame(m.cfg, 0)
	if err != nil {
		return bsr.RecordStats{}, err
	}
	game.NewSim = newSim
	st, _, err := world.Record(ctx, path, game, world.DefaultID, replay.NewSliceSource(m.Log(), 1),
		bsr.RecordConfig{Snapshots: snaps, Logger: slog.New(slog.DiscardHandler)})
	return st, err
}
