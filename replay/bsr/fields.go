package bsr

import (
	"encoding/binary"
	"fmt"
	"slices"
	"sort"

	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/table"
)

// FieldLayouter is implemented by sims that declare their records' fields
// (their start offsets, per table id). A recording made with them keeps
// field sums per field (table.Set.TrackFields), so verify names the field
// that diverged; without it fields are 8-byte words.
type FieldLayouter interface {
	FieldLayout() table.Layout
}

// fieldLayoutMeta is the metadata name of the layout the field sums of a
// recording were taken with.
const fieldLayoutMeta = "bsr.field-layout"

// maxLayoutTables bounds a decoded layout.
const maxLayoutTables = 1024

// appendLayout encodes a layout: tables by id, each its offsets.
func appendLayout(b []byte, l table.Layout) []byte {
	ids := make([]uint32, 0, len(l))
	for id := range l {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	b = binary.AppendUvarint(b, uint64(len(ids)))
	for _, id := range ids {
		b = binary.AppendUvarint(b, uint64(id))
		b = binary.AppendUvarint(b, uint64(len(l[id])))
		for _, off := range l[id] {
			b = binary.AppendUvarint(b, uint64(off))
		}
	}
	return b
}

func decodeLayout(b []byte) (table.Layout, error) {
	bad := fmt.Errorf("%w: field layout malformed", ErrCorrupt)
	next := func() (uint64, bool) {
		v, k := binary.Uvarint(b)
		if k <= 0 {
			return 0, false
		}
		b = b[k:]
		return v, true
	}
	n, ok := next()
	if !ok || n > maxLayoutTables {
		return nil, bad
	}
	l := table.Layout{}
	for range n {
		id, ok1 := next()
		m, ok2 := next()
		if !ok1 || !ok2 || id > 1<<32-1 || m > table.MaxUnits || uint64(len(b)) < m {
			return nil, bad
		}
		offs := make([]int, m)
		for i := range offs {
			v, ok := next()
			if !ok || v > table.MaxRecordSize {
				return nil, bad
			}
			offs[i] = int(v)
		}
		l[uint32(id)] = offs
	}
	if len(b) != 0 {
		return nil, bad
	}
	return l, nil
}

// appendFields encodes ticks × shards field sums, tick-major.
func appendFields(b []byte, sums []table.FieldSums) []byte {
	for i := range sums {
		b = sums[i].AppendBinary(b)
	}
	return b
}

// decodeFields decodes the payload of fields chunk c.
func decodeFields(raw []byte, c *chunkRef, shards int) ([]table.FieldSums, error) {
	n := int(c.Last-c.First+1) * shards
	if shards <= 0 || len(raw) != n*table.FieldSumsSize {
		return nil, fmt.Errorf("%w: %s: %d bytes for %d ticks of %d shards", ErrCorrupt, c.describe(), len(raw), c.Last-c.First+1, shards)
	}
	out := make([]table.FieldSums, n)
	for i := range out {
		var err error
		if out[i], err = table.DecodeFieldSums(raw[i*table.FieldSumsSize : (i+1)*table.FieldSumsSize]); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, c.describe(), err)
		}
	}
	return out, nil
}

// HasFieldSums reports whether the recording holds field sums (every tick
// of it whose fields chunk was written).
func (r *Reader) HasFieldSums() bool { return len(r.fields) > 0 }

// FieldSums returns shard's recorded field sums after tick (ok false if
// the recording has none for it).
func (r *Reader) FieldSums(shard uint32, tick uint64) (table.FieldSums, bool, error) {
	if shard >= r.h.Shards {
		return table.FieldSums{}, false, fmt.Errorf("bsr: shard %d of %d", shard, r.h.Shards)
	}
	i := sort.Search(len(r.fields), func(i int) bool { return r.fields[i].Last >= tick })
	if i == len(r.fields) || r.fields[i].First > tick {
		return table.FieldSums{}, false, nil
	}
	c := &r.fields[i]
	v, err := r.cachedDecode(c, func(raw []byte) (any, int, error) {
		fs, err := decodeFields(raw, c, int(r.h.Shards))
		return fs, len(fs) * table.FieldSumsSize, err
	})
	if err != nil {
		return table.FieldSums{}, false, err
	}
	return v.([]table.FieldSums)[int(tick-c.First)*int(r.h.Shards)+int(shard)], true, nil
}

// FieldLayout returns the layout the recording's field sums were taken
// with (nil: 8-byte words).
func (r *Reader) FieldLayout() (table.Layout, error) {
	v, ok, err := r.metaValue(fieldLayoutMeta)
	if err != nil || !ok {
		return nil, err
	}
	return decodeLayout(v)
}

// trackFields turns on field sums in the recorder's sims and writes their
// layout. A sim whose tables cannot be tracked makes a recording without
// field sums (verify then compares snapshots).
func (r *recorder) trackFields() error {
	if r.cfg.NoFieldSums {
		return nil
	}
	var layout table.Layout
	if fl, ok := r.sims[0].(FieldLayouter); ok {
		layout = fl.FieldLayout()
	}
	for s, sim := range r.sims {
		if err := sim.Tables().TrackFields(layout); err != nil {
			r.log.Warn("bsr: record: no field sums", "shard", s, "err", err)
			return nil
		}
	}
	if err := r.w.WriteMeta(fieldLayoutMeta, appendLayout(nil, layout)); err != nil {
		return err
	}
	r.tracking = true
	return nil
}

// locateExact names the first difference at tick itself from the recorded
// field sums, with sim (the re-simulation) at that tick; ok false if the
// recording has no field sums there or they cannot locate it.
func locateExact(r *Reader, sim replay.TableSim, layout table.Layout, d *VerifyResult) (bool, error) {
	want, ok, err := r.FieldSums(d.Shard, d.FirstTick)
	if err != nil || !ok {
		return false, err
	}
	diffs, err := table.LocateFields(sim.Tables(), layout, want)
	if err != nil || len(diffs) == 0 {
		// Not locatable (more differences than the sums can place), or
		// the field sums agree while the hashes do not.
		return false, nil
	}
	ds, _ := sim.(Describer)
	name := func(fd table.FieldDiff) (entity, field string) {
		if ds != nil && fd.GotLive {
			entity, field = ds.DescribeRecord(fd.Table, fd.Slot, fd.Offset)
		}
		if entity == "" {
			entity = fmt.Sprintf("table %d slot %d", fd.Table, fd.Slot)
		}
		if field == "" && fd.Offset >= 0 {
			field = fmt.Sprintf("byte %d", fd.Offset)
		}
		return entity, field
	}
	first := diffs[0]
	d.Exact, d.DiffTick, d.LocatedBy = true, d.FirstTick, "the recorded field sums"
	d.Table, d.Slot, d.Offset = first.Table, first.Slot, first.Offset
	d.Entity, d.Field = name(first)
	d.WantBytes, d.GotBytes = first.Want, first.Got
	for _, fd := range diffs {
		e, f := name(fd)
		loc := FieldDifference{Table: fd.Table, Slot: fd.Slot, Offset: fd.Offset, Entity: e, Field: f, Want: fd.Want, Got: fd.Got}
		switch {
		case fd.Offset >= 0:
			loc.Detail = fmt.Sprintf("%s (table %d slot %d) differs in %s: recorded % x, re-simulated % x", e, fd.Table, fd.Slot, f, fd.Want, fd.Got)
		case fd.GotLive:
			loc.Detail = fmt.Sprintf("%s (table %d slot %d) exists only in the re-simulation", e, fd.Table, fd.Slot)
		default:
			loc.Detail = fmt.Sprintf("table %d slot %d exists only in the recording", fd.Table, fd.Slot)
		}
		d.Differences = append(d.Differences, loc)
	}
	d.Detail = fmt.Sprintf("shard %d diverged at tick %d: recorded hash %#x, re-simulated %#x; at that tick (located by the recorded field sums) %s",
		d.Shard, d.FirstTick, d.Want, d.Got, d.Differences[0].Detail)
	if n := len(d.Differences); n > 1 {
		d.Detail += fmt.Sprintf(", and %d more difference(s)", n-1)
	}
	return true, nil
}

// FieldDifference is one difference located at the first diverging tick.
type FieldDifference struct {
	Table        uint32
	Slot, Offset int // Offset -1: the slot is live on one side only
	Entity       string
	Field        string
	Want, Got    []byte
	Detail       string
}
