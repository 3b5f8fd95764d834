package replay

import (
	"context"
	"fmt"

	"github.com/anoptic/broadside/replay/snapshot"
)

// Trimmer is what SafeTrim needs of the log (*cmdlog.Client, *MemLog).
type Trimmer interface {
	Trim(ctx context.Context, upTo uint64) (uint64, error)
}

// TrimPoint returns the highest log position that may be trimmed (every
// position up to it may go): one below the lowest position still needed,
// which is the minimum over shards of the position after their newest
// complete snapshot chain's base (recovery may fall back from the chain's
// tip to its base, and replays from there) and over retained, the first
// positions of recordings that must be kept. A shard without a complete
// chain needs the whole log, so the result is then 0.
func TrimPoint(ctx context.Context, store snapshot.Store, shards []uint32, retained []uint64) (uint64, error) {
	if len(shards) == 0 {
		return 0, fmt.Errorf("replay: trim point: no shards")
	}
	if store == nil {
		return 0, nil
	}
	upTo := ^uint64(0)
	for _, shard := range shards {
		base, ok, err := snapshot.NewestBase(ctx, store, shard)
		if err != nil {
			return 0, fmt.Errorf("replay: trim point: %w", err)
		}
		if !ok {
			return 0, nil
		}
		upTo = min(upTo, base.Pos)
	}
	for _, first := range retained {
		upTo = min(upTo, first-min(first, 1))
	}
	return upTo, nil
}

// SafeTrim trims log up to TrimPoint if that is at least minStep above
// trimmed (the position already trimmed up to), so that trims stay large
// and infrequent. It returns the position the log is now trimmed up to.
func SafeTrim(ctx context.Context, log Trimmer, store snapshot.Store, shards []uint32, retained []uint64, trimmed, minStep uint64) (uint64, error) {
	upTo, err := TrimPoint(ctx, store, shards, retained)
	if err != nil {
		return trimmed, err
	}
	if upTo < trimmed+max(minStep, 1) {
		return trimmed, nil
	}
	done, err := log.Trim(ctx, upTo)
	if err != nil {
		return trimmed, fmt.Errorf("replay: trim to %d: %w", upTo, err)
	}
	return max(done, trimmed), nil
}
