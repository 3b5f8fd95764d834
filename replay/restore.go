package replay

import (
	"context"
	"errors"
	"fmt"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/netcode/wire"
	"github.com/anoptic/broadside/replay/snapshot"
	"github.com/anoptic/broadside/replay/table"
)

// Restored is a shard's sim brought back from its newest usable snapshot
// chain, or a fresh sim when there is none.
type Restored struct {
	// Sim is ready to step from Start.
	Sim TableSim
	// Start is the snapshot's checkpoint (zero for a fresh sim).
	Start Checkpoint
	// Tip is the snapshot restored (nil for a fresh sim).
	Tip *snapshot.Meta
	// Load describes the load (zero for a fresh sim).
	Load snapshot.LoadStats
	// Fallback is set when snapshots existed but none was usable (the sim
	// is then fresh); it says why.
	Fallback error
}

// RestoreShard restores shard from the newest chain in store that decodes,
// restores and reproduces its recorded hash in a fresh sim from newSim
// (snapshot.Latest tries older chains in turn). Without a usable snapshot
// (or with a nil store) it returns a fresh sim at the start of the world.
func RestoreShard(ctx context.Context, store snapshot.Store, codec *snapshot.Codec, shard uint32, newSim func() (TableSim, error)) (Restored, error) {
	if store == nil {
		sim, err := newSim()
		if err != nil {
			return Restored{}, fmt.Errorf("replay: shard %d: new sim: %w", shard, err)
		}
		return Restored{Sim: sim}, nil
	}
	var out Restored
	stats, err := snapshot.Latest(ctx, store, codec, shard, func(tip snapshot.Meta, full *table.SetCapture, deltas []*table.SetCapture) error {
		sim, err := newSim()
		if err != nil {
			return fmt.Errorf("new sim: %w", err)
		}
		if err := sim.Tables().Restore(full, deltas...); err != nil {
			return err
		}
		if err := sim.Restored(); err != nil {
			return err
		}
		if h := sim.Hash(); h != tip.Hash {
			return fmt.Errorf("%w: restored hash %#x, snapshot recorded %#x", table.ErrCorrupt, h, tip.Hash)
		}
		out.Sim = sim
		return nil
	})
	switch {
	case err == nil:
		tip := stats.Tip
		out.Tip, out.Load, out.Start = &tip, stats, CheckpointOf(tip)
		return out, nil
	case errors.Is(err, snapshot.ErrNoSnapshot):
		sim, nerr := newSim()
		if nerr != nil {
			return Restored{}, fmt.Errorf("replay: shard %d: new sim: %w", shard, nerr)
		}
		r := Restored{Sim: sim}
		if stats.Skipped > 0 {
			r.Fallback = err
		}
		return r, nil
	default:
		return Restored{}, fmt.Errorf("replay: restore shard %d: %w", shard, err)
	}
}

// Bugs are deliberately wrong recovery behaviours (SupervisorConfig.Bugs),
// switched on only to prove that the replay simulator (internal/replaydst)
// catches them, as seq.Bugs does for the log's simulator. The zero value is
// correct behaviour.
type Bugs struct {
	// SkipCommandsAfterSnapshot makes a shard restored from a snapshot
	// drop the records between the snapshot's position and the next tick
	// marker: the inputs of the first tick it replays.
	SkipCommandsAfterSnapshot bool
	// SnapshotBeforeOutputs makes a runner store a snapshot without
	// waiting until the outputs of the ticks it covers are in the log, so
	// that a crash in between loses them (a synchronous runner stores the
	// snapshot first).
	SnapshotBeforeOutputs bool
}

// skipToMarker is the Source of Bugs.SkipCommandsAfterSnapshot: it drops
// every entry before the first tick marker.
type skipToMarker struct {
	src    Source
	marked bool
}

func (s *skipToMarker) Next(ctx context.Context) (msg.Entry, error) {
	for {
		e, err := s.src.Next(ctx)
		if err != nil || s.marked {
			return e, err
		}
		var env wire.Envelope
		if decodeRecord(e.Record.Data, &env) == nil && env.Kind == wire.EnvelopeTick {
			s.marked = true
			return e, nil
		}
	}
}
