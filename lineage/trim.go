package lineage

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// Store metadata names.
const (
	metaKinds   = "kinds"
	metaHorizon = "horizon"
)

// Retention says which history Trim deletes: ranges that end before
// BeforeTick, and ranges whose inputs all precede log position BeforePos
// (what the command log trimmed). Zero fields delete nothing.
type Retention struct {
	BeforeTick uint64
	BeforePos  uint64
}

// Trim deletes whole stored ranges that Retention lets go, shard by shard
// (one range deletion per shard), and records the horizon so that queries
// report that history before it may be missing. A range that straddles
// the cut is kept.
func Trim(ctx context.Context, s Store, ret Retention) error {
	infos, err := s.Ranges(ctx)
	if err != nil {
		return fmt.Errorf("lineage: trim: %w", err)
	}
	horizon := uint64(0)
	for lo := 0; lo < len(infos); {
		hi := lo
		for hi < len(infos) && infos[hi].Shard == infos[lo].Shard {
			hi++
		}
		shard := infos[lo:hi]
		keep := len(shard) // index of the first range kept
		for i, info := range shard {
			if info.LastTick >= ret.BeforeTick {
				keep = i
				break
			}
		}
		if ret.BeforePos > 0 {
			byPos := len(shard)
			for i, info := range shard {
				if info.Inputs > 0 && info.LastPos >= ret.BeforePos {
					byPos = i
					break
				}
			}
			if byPos == len(shard) {
				// No range has inputs at or after the cut: the ranges
				// after the last one with inputs (quiet ticks) may be
				// after it too; keep them.
				for i := len(shard) - 1; i >= 0; i-- {
					if shard[i].Inputs > 0 {
						break
					}
					byPos = i
				}
			}
			keep = max(keep, byPos)
		}
		if keep > 0 {
			cut := shard[keep-1].LastTick + 1
			if keep < len(shard) {
				cut = shard[keep].FirstTick
			}
			if err := s.DeleteBefore(ctx, shard[0].Shard, cut); err != nil {
				return fmt.Errorf("lineage: trim shard %d before tick %d: %w", shard[0].Shard, cut, err)
			}
			horizon = max(horizon, cut)
		}
		lo = hi
	}
	if horizon > 0 {
		return noteHorizon(ctx, s, horizon)
	}
	return nil
}

// noteHorizon raises the stored horizon to tick.
func noteHorizon(ctx context.Context, s Store, tick uint64) error {
	old, err := Horizon(ctx, s)
	if err != nil {
		return err
	}
	if tick <= old {
		return nil
	}
	if err := s.PutMeta(ctx, metaHorizon, binary.AppendUvarint(nil, tick)); err != nil {
		return fmt.Errorf("lineage: note horizon %d: %w", tick, err)
	}
	return nil
}

// Horizon returns the tick before which history was trimmed from s (0 if
// none was).
func Horizon(ctx context.Context, s Store) (uint64, error) {
	b, err := s.GetMeta(ctx, metaHorizon)
	if errors.Is(err, ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	v, n := binary.Uvarint(b)
	if n != len(b) {
		return 0, fmt.Errorf("%w: horizon %x", ErrCorrupt, b)
	}
	return v, nil
}

// PutKindNames stores names for CommandInfo kinds, for queries to print.
func PutKindNames(ctx context.Context, s Store, names map[uint8]string) error {
	kinds := make([]int, 0, len(names))
	for k := range names {
		kinds = append(kinds, int(k))
	}
	slices.Sort(kinds)
	var b []byte
	for _, k := range kinds {
		b = append(b, byte(k))
		b = binary.AppendUvarint(b, uint64(len(names[uint8(k)])))
		b = append(b, names[uint8(k)]...)
	}
	if err := s.PutMeta(ctx, metaKinds, b); err != nil {
		return fmt.Errorf("lineage: put kind names: %w", err)
	}
	return nil
}

// KindNames returns the stored kind names (empty if none were stored).
func KindNames(ctx context.Context, s Store) (map[uint8]string, error) {
	b, err := s.GetMeta(ctx, metaKinds)
	if errors.Is(err, ErrNotFound) {
		return map[uint8]string{}, nil
	}
	if err != nil {
		return nil, err
	}
	names := map[uint8]string{}
	for len(b) > 0 {
		k := b[0]
		n, m := binary.Uvarint(b[1:])
		if m <= 0 || n > uint64(len(b)-1-m) {
			return nil, fmt.Errorf("%w: kind names", ErrCorrupt)
		}
		names[k] = string(b[1+m : 1+m+int(n)])
		b = b[1+m+int(n):]
	}
	return names, nil
}
