package bsr

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anoptic/broadside/lineage"
	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/table"
)

// Describer is implemented by sims that can name what their tables hold.
// Verify uses it to report a divergence as an entity and a field instead
// of a table, a slot and a byte offset.
type Describer interface {
	// DescribeRecord names the entity held in slot of table tableID and
	// the field at byte offset of its record (offset -1: the record as a
	// whole, and field is then ""). Either may be "" if unknown.
	DescribeRecord(tableID uint32, slot, offset int) (entity, field string)
}

// VerifyResult is the outcome of Verify.
type VerifyResult struct {
	// OK is true when every recorded tick's hash was reproduced.
	OK bool
	// Ticks is the number of ticks re-simulated and compared (per shard).
	Ticks uint64
	// Chunks is the number of chunks read and checked.
	Chunks int
	// Truncated is the reader's note on what was cut ("" if nothing).
	Truncated string
	// When not OK: FirstTick is the first tick whose hash differs, in
	// Shard; Want is the recorded hash, Got the re-simulated one.
	FirstTick uint64
	Shard     uint32
	Want, Got uint64
	// DiffTick is the tick of the recorded snapshot the re-simulated
	// state was compared with, table by table (the first one at or after
	// FirstTick; 0 if there is none). Table, Slot and Offset locate the
	// first difference there (Slot -1: the table's allocation state;
	// Offset -1: a record live on one side only), named by Entity and
	// Field (through the sim's Describer if it has one).
	DiffTick     uint64
	Table        uint32
	Slot, Offset int
	Entity       string
	Field        string
	// WantBytes and GotBytes are up to 8 bytes of the record from Offset,
	// recorded and re-simulated.
	WantBytes, GotBytes []byte
	// Exact is true when the difference was located at FirstTick itself
	// (DiffTick == FirstTick) from the recording's field sums, rather
	// than at the next snapshot; Differences then lists every difference
	// located there (the first is the one in Table, Slot and Offset).
	Exact       bool
	Differences []FieldDifference
	// LocatedBy says how an exact difference was found: "the recorded
	// field sums", or "two more re-simulations" (a nondeterministic step,
	// in a recording without field sums).
	LocatedBy string
	// Detail explains the outcome in a sentence or two.
	Detail string
	Took   time.Duration
}

// ErrNothingToVerify is returned by Verify for a recording with no
// complete tick to re-simulate.
var ErrNothingToVerify = errors.New("bsr: verify: nothing to verify")

// Verify re-simulates the recording from its base with one replay.Runner
// per shard (shards in parallel) and compares every tick's state hash with
// the recorded one; it also reads and checks every chunk. On a divergence
// it keeps re-simulating the diverged shard up to its next recorded
// snapshot and compares the two states table by table, record by record,
// to name the first entity and field that differ. progress, if set, is
// called from Verify's goroutine with the lowest tick every shard has
// reached, a few times a second. A divergence is reported in the result
// (OK false); an error means the recording could not be verified (damaged
// chunks, a sim that fails).
func Verify(ctx context.Context, r *Reader, newSim func(shard uint32) (replay.TableSim, error), progress func(tick uint64)) (VerifyResult, error) {
	start := time.Now()
	res := VerifyResult{OK: true, Truncated: r.truncated}
	if newSim == nil {
		return res, errors.New("bsr: verify: newSim is required")
	}
	shards := int(r.h.Shards)
	layout, err := r.FieldLayout()
	if err != nil {
		return res, err
	}
	at := make([]atomic.Uint64, shards)
	outs := make([]shardVerify, shards)
	errs := make([]error, shards+1)
	var wg sync.WaitGroup
	sem := make(chan struct{}, max(1, min(runtime.GOMAXPROCS(0), shards)))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for s := range shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				errs[s] = ctx.Err()
				return
			}
			defer func() { <-sem }()
			outs[s], errs[s] = verifyShard(ctx, r, newSim, layout, uint32(s), &at[s])
			if errs[s] != nil {
				cancel()
			}
		}()
	}
	wg.Add(1)
	var chunks int
	go func() {
		defer wg.Done()
		chunks, errs[shards] = checkChunks(ctx, r)
		if errs[shards] != nil {
			cancel()
		}
	}()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	report := func() {
		if progress == nil {
			return
		}
		low := ^uint64(0)
		for s := range at {
			low = min(low, at[s].Load())
		}
		progress(low)
	}
wait:
	for {
		select {
		case <-done:
			break wait
		case <-tick.C:
			report()
		}
	}
	report()
	res.Chunks = chunks
	res.Took = time.Since(start)
	for _, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			return res, err
		}
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	for _, err := range errs {
		if err != nil {
			return res, err
		}
	}
	first := -1
	for s := range outs {
		res.Ticks = max(res.Ticks, outs[s].ticks)
		if outs[s].diverged && (first < 0 || outs[s].res.FirstTick < outs[first].res.FirstTick) {
			first = s
		}
	}
	if first < 0 && res.Ticks == 0 {
		// Nothing was checked: a recording cut before its first complete
		// chunk (or a hostile one whose only chunk was dropped as a cut
		// tail) must not pass as verified.
		res.OK = false
		why := "it holds no complete tick"
		if r.truncated != "" {
			why += " (" + r.truncated + ")"
		}
		return res, fmt.Errorf("%w: %s", ErrNothingToVerify, why)
	}
	if first < 0 {
		res.Detail = fmt.Sprintf("%d ticks (%d..%d) of %d shards re-simulated: every state hash matches the recording", res.Ticks, r.FirstTick(), r.last, shards)
		return res, nil
	}
	d := outs[first].res
	d.Ticks, d.Chunks, d.Truncated, d.Took = res.Ticks, res.Chunks, res.Truncated, res.Took
	return d, nil
}

type shardVerify struct {
	ticks    uint64
	diverged bool
	res      VerifyResult
}

// verifyShard re-simulates one shard from the base to the end, segment by
// segment between its snapshots, and stops at the first snapshot at or
// after a divergence to compare the states.
func verifyShard(ctx context.Context, r *Reader, newSim func(uint32) (replay.TableSim, error), layout table.Layout, shard uint32, at *atomic.Uint64) (shardVerify, error) {
	var out shardVerify
	sim, err := newSim(shard)
	if err != nil {
		return out, fmt.Errorf("bsr: verify: new sim of shard %d: %w", shard, err)
	}
	if r.base > 0 {
		k, ok := r.snapshotAt(shard, r.base)
		if !ok {
			return out, fmt.Errorf("%w: shard %d has no snapshot at the base tick %d", ErrCorrupt, shard, r.base)
		}
		chain, _, err := r.loadChain(shard, k)
		if err != nil {
			return out, err
		}
		if err := restoreChain(sim, chain, &r.snaps[shard][k]); err != nil {
			return out, err
		}
	}
	at.Store(r.base)
	if r.last == r.base {
		return out, nil
	}
	var want []uint64
	var segStart uint64
	var div *VerifyResult
	var locErr error
	src := r.newEntrySource(r.basePos, r.basePos)
	start, err := r.baseCheckpoint()
	if err != nil {
		return out, err
	}
	run, err := replay.NewRunner(replay.RunnerConfig{
		World: r.h.World, Shard: shard, Sim: sim, Source: src,
		Start: start, HistoryTicks: 8,
		Logger: slog.New(slog.DiscardHandler),
		Observer: func(info replay.TickInfo) {
			i := info.Tick - segStart - 1
			if div != nil || i >= uint64(len(want)) {
				return
			}
			if w := want[i]; w != info.Hash {
				div = &VerifyResult{FirstTick: info.Tick, Shard: shard, Want: w, Got: info.Hash}
				// The sim is at the diverging tick now: locate the
				// difference there if the recording has field sums.
				_, locErr = locateExact(r, sim, layout, div)
			}
		},
	})
	if err != nil {
		return out, fmt.Errorf("bsr: verify shard %d: %w", shard, err)
	}
	// Segment ends: the shard's snapshots after the base, then the end.
	var ends []uint64
	for _, c := range r.snaps[shard] {
		if c.First > r.base && c.First < r.last {
			ends = append(ends, c.First)
		}
	}
	ends = append(ends, r.last)
	segStart = r.base
	for _, end := range ends {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		rec, err := r.tickRecord(end)
		if err != nil {
			return out, err
		}
		if want, err = r.Hashes(shard, segStart+1, end); err != nil {
			return out, err
		}
		src.to = rec.Pos
		if err := run.Run(ctx); err != nil {
			return out, fmt.Errorf("bsr: verify shard %d after tick %d: %w", shard, segStart, err)
		}
		if got := run.Tick(); got != end {
			return out, fmt.Errorf("%w: shard %d: replaying to the marker of tick %d (position %d) reached tick %d", ErrCorrupt, shard, end, rec.Pos, got)
		}
		out.ticks = end - r.base
		at.Store(end)
		segStart = end
		if locErr != nil {
			return out, locErr
		}
		if div != nil {
			out.diverged = true
			div.OK = false
			if !div.Exact {
				if err := rerunTwice(ctx, r, newSim, div); err != nil {
					return out, err
				}
			}
			if !div.Exact {
				if err := describeDivergence(r, newSim, sim, end, div); err != nil {
					return out, err
				}
			}
			out.res = *div
			return out, nil
		}
	}
	return out, nil
}

// describeDivergence compares the re-simulated sim, at tick end, with the
// recorded snapshot of that tick (if there is one) and fills in where they
// differ.
func describeDivergence(r *Reader, newSim func(uint32) (replay.TableSim, error), got replay.TableSim, end uint64, d *VerifyResult) error {
	d.Slot, d.Offset = -1, -1
	head := fmt.Sprintf("shard %d diverged at tick %d: recorded hash %#x, re-simulated %#x", d.Shard, d.FirstTick, d.Want, d.Got)
	k, ok := r.snapshotAt(d.Shard, end)
	if !ok {
		d.Detail = head + fmt.Sprintf("; the recording has no snapshot of shard %d at or after tick %d to compare the state with", d.Shard, d.FirstTick)
		return nil
	}
	want, err := newSim(d.Shard)
	if err != nil {
		return fmt.Errorf("bsr: verify: new sim of shard %d: %w", d.Shard, err)
	}
	chain, _, err := r.loadChain(d.Shard, k)
	if err != nil {
		return err
	}
	if err := restoreChain(want, chain, &r.snaps[d.Shard][k]); err != nil {
		return err
	}
	d.DiffTick = end
	diff, found := diffTables(want.Tables(), got.Tables())
	if !found {
		d.Detail = head + fmt.Sprintf("; yet at tick %d the re-simulated state equals the recorded snapshot: the recorded hash is wrong, or the states converged again", end)
		return nil
	}
	d.Table, d.Slot, d.Offset = diff.table, diff.slot, diff.offset
	d.WantBytes, d.GotBytes = diff.want, diff.got
	// Name the record on the side where it is live.
	namer := got
	if diff.slot >= 0 && !diff.gotLive {
		namer = want
	}
	if ds, ok := namer.(Describer); ok && diff.slot >= 0 {
		d.Entity, d.Field = ds.DescribeRecord(diff.table, diff.slot, diff.offset)
	}
	where := fmt.Sprintf("table %d slot %d", diff.table, diff.slot)
	if d.Entity == "" {
		d.Entity = where
	} else {
		where = d.Entity + " (" + where + ")"
	}
	switch {
	case diff.slot < 0:
		d.Entity, d.Field = fmt.Sprintf("table %d", diff.table), "allocation state"
		d.Detail = head + fmt.Sprintf("; at tick %d table %d's allocation state differs from the recorded snapshot", end, diff.table)
	case diff.offset < 0:
		side := "exists only in the recording"
		if diff.gotLive {
			side = "exists only in the re-simulation"
		}
		d.Detail = head + fmt.Sprintf("; at tick %d %s %s", end, where, side)
	default:
		if d.Field == "" {
			d.Field = fmt.Sprintf("byte %d", diff.offset)
		}
		d.Detail = head + fmt.Sprintf("; at tick %d %s differs in %s: recorded % x, re-simulated % x", end, where, d.Field, diff.want, diff.got)
	}
	return nil
}

type tableDiff struct {
	table        uint32
	slot, offset int
	gotLive      bool
	want, got    []byte
}

// diffTables returns the first difference between two sets of the same
// tables: a slot live on one side only, a record's first differing byte,
// or (slot -1) a difference of allocation state alone.
func diffTables(want, got *table.Set) (tableDiff, bool) {
	wts, gts := want.Tables(), got.Tables()
	for i := range min(len(wts), len(gts)) {
		wt, gt := wts[i], gts[i]
		d := tableDiff{table: wt.ID(), slot: -1, offset: -1}
		if wt.ID() != gt.ID() || wt.RecordSize() != gt.RecordSize() {
			return d, true
		}
		for slot := range max(wt.Slots(), gt.Slots()) {
			wl, gl := wt.Live(slot), gt.Live(slot)
			if !wl && !gl {
				continue
			}
			d.slot, d.gotLive = slot, gl
			if wl != gl {
				return d, true
			}
			wr, gr := wt.Row(slot), gt.Row(slot)
			if bytes.Equal(wr, gr) {
				continue
			}
			off := 0
			for wr[off] == gr[off] {
				off++
			}
			end := min(off+8, len(wr))
			d.offset, d.want, d.got = off, bytes.Clone(wr[off:end]), bytes.Clone(gr[off:end])
			return d, true
		}
		if wt.Hash() != gt.Hash() {
			d.slot, d.gotLive = -1, false
			return d, true
		}
	}
	return tableDiff{}, false
}

// checkChunks reads and decodes every chunk of r.
func checkChunks(ctx context.Context, r *Reader) (int, error) {
	n := 0
	for i := range r.refs {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		c := &r.refs[i]
		raw, err := r.readRaw(c)
		if err != nil {
			return n, err
		}
		switch c.Kind {
		case KindTicks:
			_, err = decodeTicks(raw, c, int(r.h.Shards))
		case KindCommands:
			_, err = decodeEntries(raw, c)
		case KindSnapshot:
			var sc table.SetCapture
			if uerr := sc.UnmarshalBinary(raw); uerr != nil {
				err = fmt.Errorf("%w: %s: %v", ErrCorrupt, c.describe(), uerr)
			}
		case KindLineage:
			var lr lineage.Range
			if derr := lineage.DecodeRange(raw, &lr); derr != nil {
				err = fmt.Errorf("%w: %s: %v", ErrCorrupt, c.describe(), derr)
			}
		case KindMeta:
			_, _, err = decodeMeta(raw, c)
		case KindTree:
			_, err = decodeTreeBase(raw, c)
		case KindCheckpoint:
			_, err = openCheckpoint(raw, c, nil)
		case KindFields:
			_, err = decodeFields(raw, c, int(r.h.Shards))
		}
		if err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// rerunTwice is verify's search when the recording cannot locate a
// divergence itself (no field sums): it re-simulates the diverged shard
// twice more from the newest snapshot before the diverging tick to that
// tick. If the two runs end in different states the re-simulation is
// nondeterministic, and comparing them names the entity and field at the
// tick itself; otherwise nothing is filled in (the next snapshot is
// compared instead).
func rerunTwice(ctx context.Context, r *Reader, newSim func(uint32) (replay.TableSim, error), d *VerifyResult) error {
	rec, err := r.tickRecord(d.FirstTick)
	if err != nil {
		return err
	}
	start, err := r.baseCheckpoint()
	if err != nil {
		return err
	}
	k := -1
	for i, c := range r.snaps[d.Shard] {
		if c.First < d.FirstTick && c.First >= r.base {
			k = i
		}
	}
	var sims [2]replay.TableSim
	for i := range sims {
		if sims[i], err = newSim(d.Shard); err != nil {
			return fmt.Errorf("bsr: verify: new sim of shard %d: %w", d.Shard, err)
		}
		if k >= 0 {
			tip := &r.snaps[d.Shard][k]
			chain, _, err := r.loadChain(d.Shard, k)
			if err != nil {
				return err
			}
			if err := restoreChain(sims[i], chain, tip); err != nil {
				return err
			}
			start = replay.Checkpoint{Tick: tip.First, Pos: tip.Aux1}
			if start.Fences, err = r.fencesAt(ctx, start.Pos); err != nil {
				return err
			}
		} else if r.base > 0 {
			return nil // the base snapshot is the only state: nothing before it to start from
		}
		run, err := replay.NewRunner(replay.RunnerConfig{World: r.h.World, Shard: d.Shard, Sim: sims[i],
			Source: r.newEntrySource(start.Pos, rec.Pos), Start: start, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			return err
		}
		if err := run.Run(ctx); err != nil {
			return fmt.Errorf("bsr: verify shard %d: re-simulating to tick %d: %w", d.Shard, d.FirstTick, err)
		}
	}
	diff, found := diffTables(sims[0].Tables(), sims[1].Tables())
	if !found || diff.slot < 0 {
		return nil
	}
	d.Exact, d.DiffTick, d.LocatedBy = true, d.FirstTick, "two more re-simulations: the step is nondeterministic"
	d.Table, d.Slot, d.Offset = diff.table, diff.slot, diff.offset
	d.WantBytes, d.GotBytes = diff.want, diff.got
	if ds, ok := sims[0].(Describer); ok {
		d.Entity, d.Field = ds.DescribeRecord(diff.table, diff.slot, diff.offset)
	}
	if d.Entity == "" {
		d.Entity = fmt.Sprintf("table %d slot %d", diff.table, diff.slot)
	}
	if d.Field == "" && diff.offset >= 0 {
		d.Field = fmt.Sprintf("byte %d", diff.offset)
	}
	d.Detail = fmt.Sprintf("shard %d diverged at tick %d: recorded hash %#x, re-simulated %#x; re-simulating it twice more from tick %d gives two different states at tick %d: the step is nondeterministic; %s differs in %s (% x in one run, % x in the other)",
		d.Shard, d.FirstTick, d.Want, d.Got, start.Tick, d.FirstTick, d.Entity, d.Field, diff.want, diff.got)
	return nil
}
