package snapshot

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/anoptic/broadside/replay/table"
)

// ErrNoSnapshot is returned by Latest when the shard has no restorable
// chain.
var ErrNoSnapshot = errors.New("snapshot: no restorable snapshot")

// RestoreFunc restores a chain: full then deltas, in order, ending with the
// snapshot tip. It returns an error if the chain is not usable (the loader
// then tries an older one).
type RestoreFunc func(tip Meta, full *table.SetCapture, deltas []*table.SetCapture) error

// LoadStats describes a successful load.
type LoadStats struct {
	// Tip is the restored snapshot; Chain the number of snapshots applied
	// (base included) and RawBytes their uncompressed size.
	Tip      Meta
	Chain    int
	RawBytes uint64
	// BaseRawBytes is the raw size of the chain's base.
	BaseRawBytes uint64
	// Read is the time spent reading and decoding, Restore the time in
	// the RestoreFunc.
	Read, Restore time.Duration
	// Skipped counts newer snapshots that were not restorable.
	Skipped int
}

// Chains returns, newest first, the chains that metas (one shard's, in any
// order) hold completely: each is a list from its full base to its tip, with
// consecutive epochs.
func Chains(metas []Meta) [][]Meta {
	byTick := make(map[uint64]Meta, len(metas))
	for _, m := range metas {
		byTick[m.Tick] = m
	}
	sorted := make([]Meta, 0, len(byTick))
	for _, m := range byTick {
		sorted = append(sorted, m)
	}
	slices.SortFunc(sorted, func(a, b Meta) int { return cmpU64(b.Tick, a.Tick) }) // newest first
	var out [][]Meta
	for _, tip := range sorted {
		if c := chainOf(tip, byTick); c != nil {
			out = append(out, c)
		}
	}
	return out
}

// chainOf returns the chain from tip back to its base, base first, or nil if
// a link is missing or inconsistent.
func chainOf(tip Meta, byTick map[uint64]Meta) []Meta {
	if int(tip.ChainLen) > MaxChainLen || tip.ChainLen == 0 {
		return nil
	}
	chain := make([]Meta, tip.ChainLen)
	cur := tip
	for k := int(tip.ChainLen) - 1; ; k-- {
		chain[k] = cur
		if cur.Full {
			if k != 0 {
				return nil
			}
			return chain
		}
		if k == 0 {
			return nil
		}
		prev, ok := byTick[cur.Prev]
		if !ok || prev.Epoch+1 != cur.Epoch || prev.Base != cur.Base || prev.ChainLen+1 != cur.ChainLen || prev.Shard != cur.Shard {
			return nil
		}
		cur = prev
	}
}

// Latest restores shard from its newest complete chain that decodes, passes
// its checksums and that restore accepts, trying older chains in turn. It
// returns ErrNoSnapshot (wrapping the last failure, if any) when none is
// usable.
func Latest(ctx context.Context, store Store, codec *Codec, shard uint32, restore RestoreFunc) (LoadStats, error) {
	if codec == nil {
		var err error
		if codec, err = DefaultCodec(); err != nil {
			return LoadStats{}, err
		}
	}
	start := time.Now()
	metas, err := store.List(ctx, shard)
	if err != nil {
		return LoadStats{}, fmt.Errorf("snapshot: shard %d: %w", shard, err)
	}
	type decoded struct {
		sc  *table.SetCapture
		err error
	}
	cache := map[uint64]decoded{}
	load := func(m Meta) (*table.SetCapture, error) {
		if d, ok := cache[m.Tick]; ok {
			return d.sc, d.err
		}
		b, err := store.Get(ctx, shard, m.Tick)
		var sc *table.SetCapture
		if err == nil {
			var got Meta
			got, sc, err = codec.Decode(b)
			if err == nil && !got.Equal(m) {
				err = fmt.Errorf("%w: shard %d tick %d: snapshot does not match its metadata", ErrCorrupt, shard, m.Tick)
			}
		}
		if err != nil {
			err = fmt.Errorf("snapshot: shard %d tick %d: %w", shard, m.Tick, err)
			sc = nil
		}
		if ctx.Err() == nil {
			cache[m.Tick] = decoded{sc, err}
		}
		return sc, err
	}
	var last error
	skipped := 0
	for _, chain := range Chains(metas) {
		if err := ctx.Err(); err != nil {
			return LoadStats{}, err
		}
		caps := make([]*table.SetCapture, len(chain))
		var raw uint64
		var bad error
		for k, m := range chain {
			if caps[k], bad = load(m); bad != nil {
				break
			}
			raw += m.RawBytes
		}
		if bad != nil {
			last, skipped = bad, skipped+1
			continue
		}
		read := time.Since(start)
		rs := time.Now()
		tip := chain[len(chain)-1]
		if err := restore(tip, caps[0], caps[1:]); err != nil {
			last, skipped = fmt.Errorf("snapshot: shard %d tick %d: restore: %w", shard, tip.Tick, err), skipped+1
			continue
		}
		return LoadStats{Tip: tip, Chain: len(chain), RawBytes: raw, BaseRawBytes: chain[0].RawBytes,
			Read: read, Restore: time.Since(rs), Skipped: skipped}, nil
	}
	if last != nil {
		return LoadStats{Skipped: skipped}, fmt.Errorf("%w for shard %d: %w", ErrNoSnapshot, shard, last)
	}
	return LoadStats{}, fmt.Errorf("%w for shard %d", ErrNoSnapshot, shard)
}

// NewestBase returns the metadata of the base of shard's newest complete
// chain (by metadata; the snapshots are not read), or false if there is
// none. Log positions up to the base's Pos are not needed to recover the
// shard from that chain.
func NewestBase(ctx context.Context, store Store, shard uint32) (Meta, bool, error) {
	metas, err := store.List(ctx, shard)
	if err != nil {
		return Meta{}, false, fmt.Errorf("snapshot: shard %d: %w", shard, err)
	}
	chains := Chains(metas)
	if len(chains) == 0 {
		return Meta{}, false, nil
	}
	return chains[0][0], true, nil
}
