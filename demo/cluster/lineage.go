package cluster

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/anoptic/broadside/lineage"
	"github.com/anoptic/broadside/replay/world/natsworld"
)

// lineageTicks returns every (sector, tick) a lineage store holds: its
// inputs and events as text. Where two ranges of a sector overlap, the
// later one wins, as in a query's index.
func lineageTicks(ctx context.Context, s lineage.Store) (map[[2]uint64]string, error) {
	infos, err := s.Ranges(ctx)
	if err != nil {
		return nil, err
	}
	out := map[[2]uint64]string{}
	var r lineage.Range
	for _, in := range infos {
		b, err := s.GetRange(ctx, in.Shard, in.FirstTick)
		if err != nil {
			return nil, err
		}
		if err := lineage.DecodeRange(b, &r); err != nil {
			return nil, fmt.Errorf("lineage range %d/%d: %w", in.Shard, in.FirstTick, err)
		}
		for i := range r.Ticks() {
			out[[2]uint64{uint64(r.Shard), r.FirstTick + uint64(i)}] = fmt.Sprint(r.TickInputs(i), r.TickEvents(i))
		}
	}
	return out, nil
}

// checkLineage compares the lineage the workers recorded in the world's
// shared store (across every takeover of the match) with want, the
// uninterrupted re-simulation's: every sector-tick the shared store holds
// must have the same inputs and events, and it must hold every tick of a
// sector up to the last one it holds of it.
func (p *play) checkLineage(ctx context.Context, conn *nats.Conn, want lineage.Store, rep *Report) error {
	js, err := jetstream.New(conn)
	if err != nil {
		return err
	}
	shared, err := natsworld.OpenLineageStore(ctx, js, natsworld.LineageStoreConfig{World: World, Replicas: 3})
	if err != nil {
		return err
	}
	defer shared.Close()
	got, err := lineageTicks(ctx, shared)
	if err != nil {
		return fmt.Errorf("shared lineage: %w", err)
	}
	exp, err := lineageTicks(ctx, want)
	if err != nil {
		return err
	}
	last := map[uint64]uint64{}
	for k, g := range got {
		last[k[0]] = max(last[k[0]], k[1])
		w, ok := exp[k]
		if !ok {
			continue // past the log read
		}
		rep.LineageTicks++
		if g != w {
			rep.LineageDiffer++
			if rep.FirstLineageDiff == "" {
				rep.FirstLineageDiff = fmt.Sprintf("sector %d tick %d: shared %s, re-simulation %s", k[0], k[1], g, w)
			}
		}
	}
	var missing [][2]uint64
	for k := range exp {
		if _, ok := got[k]; !ok && k[1] <= last[k[0]] {
			missing = append(missing, k)
		}
	}
	rep.LineageMissing = len(missing)
	rep.LineageMissingAt = tickRanges(missing)
	return nil
}

// tickRanges names sector-ticks as runs: "sector 2 ticks 500..511, ...".
func tickRanges(keys [][2]uint64) string {
	slices.SortFunc(keys, func(a, b [2]uint64) int { return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1])) })
	var out []string
	for i := 0; i < len(keys); {
		j := i
		for j+1 < len(keys) && keys[j+1][0] == keys[i][0] && keys[j+1][1] == keys[j][1]+1 {
			j++
		}
		out = append(out, fmt.Sprintf("sector %d ticks %d..%d", keys[i][0], keys[i][1], keys[j][1]))
		i = j + 1
	}
	return strings.Join(out, ", ")
}
