package table

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// Field sums locate the first divergence of two runs exactly: the entity
// (table and slot) and the field, not only the tick.
//
// A state hash says that two states differ, not where. Recording every
// record's hash every tick would say where, at kilobytes per tick. Field
// sums are a locating code instead: every field of every live record is a
// unit at a position X (table, slot, field) with a value v (the field's
// little-endian integer), and a shard keeps the power sums
//
//	S_k = Σ v·X^k  (k = 0..FieldSyndromes-1)   and   L_k = Σ_live slots Y^k  (k = 0..LiveSyndromes-1)
//
// modulo the prime 2^31-1. Like the state hash they are maintained
// incrementally: a record is re-summed once when the tables commit its
// writes (its previous contribution is cached per slot). The difference of
// two runs' sums are the syndromes of a Reed-Solomon-like code whose
// errors are the fields that differ: up to FieldSyndromes/2 differing
// fields (and LiveSyndromes/2 slots live on one side only) are located
// exactly, with the difference of their values (LocateFields). Forty bytes
// per shard and tick, against a whole state.
//
// Tracking is off by default (it costs nothing then); recorders turn it on
// with Set.TrackFields, and a verifier computes the sums of its
// re-simulated state from scratch with Set.ComputeFieldSums at the one
// tick that diverged.

// FieldSyndromes and LiveSyndromes are the number of power sums kept of
// field values and of live slots.
const (
	FieldSyndromes = 6
	LiveSyndromes  = 4
	// MaxUnits bounds the units (fields, or 8-byte pieces of longer
	// fields) of a record.
	MaxUnits = 32
	// Positions hold slots below 2^21: beyond, they alias (the sums
	// still detect a difference, LocateFields may not locate it).
	fieldPrime = 1<<31 - 1
)

// FieldSums are a state's field sums (see above), all below 2^31-1.
type FieldSums struct {
	Field [FieldSyndromes]uint32
	Live  [LiveSyndromes]uint32
}

// FieldSumsSize is the encoded size of FieldSums.
const FieldSumsSize = 4 * (FieldSyndromes + LiveSyndromes)

// AppendBinary appends the sums' encoding (little-endian uint32s).
func (s *FieldSums) AppendBinary(b []byte) []byte {
	for _, v := range s.Field {
		b = binary.LittleEndian.AppendUint32(b, v)
	}
	for _, v := range s.Live {
		b = binary.LittleEndian.AppendUint32(b, v)
	}
	return b
}

// DecodeFieldSums decodes FieldSumsSize bytes written by AppendBinary.
func DecodeFieldSums(b []byte) (FieldSums, error) {
	var s FieldSums
	if len(b) != FieldSumsSize {
		return s, fmt.Errorf("%w: field sums of %d bytes, want %d", ErrCorrupt, len(b), FieldSumsSize)
	}
	for i := range s.Field {
		s.Field[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	for i := range s.Live {
		s.Live[i] = binary.LittleEndian.Uint32(b[4*(FieldSyndromes+i):])
	}
	for _, v := range append(s.Field[:], s.Live[:]...) {
		if v >= fieldPrime {
			return s, fmt.Errorf("%w: field sum %d out of range", ErrCorrupt, v)
		}
	}
	return s, nil
}

// unit is one summed piece of a record: bytes [off, off+size), size ≤ 8.
type unit struct{ off, size int }

type fieldTrack struct {
	units []unit
	slot  []uint32 // FieldSyndromes per slot: the slot's committed contribution
	field [FieldSyndromes]uint64
	live  [LiveSyndromes]uint64
}

func mulP(a, b uint64) uint64 {
	x := a * b // a, b < 2^31
	x = (x & fieldPrime) + (x >> 31)
	x = (x & fieldPrime) + (x >> 31)
	if x >= fieldPrime {
		x -= fieldPrime
	}
	return x
}

func addP(a, b uint64) uint64 {
	x := a + b
	if x >= fieldPrime {
		x -= fieldPrime
	}
	return x
}

func subP(a, b uint64) uint64 { return addP(a, fieldPrime-b) }

func powP(a, e uint64) uint64 {
	r := uint64(1)
	for a %= fieldPrime; e > 0; e >>= 1 {
		if e&1 != 0 {
			r = mulP(r, a)
		}
		a = mulP(a, a)
	}
	return r
}

func invP(a uint64) uint64 { return powP(a, fieldPrime-2) }

// units splits a record layout (field start offsets) into units.
func layoutUnits(recSize int, fields []int) ([]unit, error) {
	if len(fields) == 0 {
		for off := 0; off < recSize; off += 8 {
			fields = append(fields, off)
		}
	}
	if fields[0] != 0 || !slices.IsSorted(fields) {
		return nil, errors.New("field offsets must start at 0 and ascend")
	}
	var us []unit
	for i, off := range fields {
		end := recSize
		if i+1 < len(fields) {
			end = fields[i+1]
		}
		if end <= off || end > recSize {
			return nil, fmt.Errorf("field at offset %d ends at %d, record size %d", off, end, recSize)
		}
		for ; off < end; off += 8 {
			us = append(us, unit{off, min(8, end-off)})
		}
	}
	if len(us) > MaxUnits {
		return nil, fmt.Errorf("%d units exceed %d", len(us), MaxUnits)
	}
	return us, nil
}

// TrackFields turns on the table's field sums with the given record layout:
// the start offsets of its fields, ascending from 0 (nil: 8-byte words).
// Fields longer than 8 bytes are summed as 8-byte pieces. The sums are
// computed from the current state, then kept up to date; a restore keeps
// tracking.
func (t *Table) TrackFields(fields []int) error {
	us, err := layoutUnits(t.recSize, fields)
	if err != nil {
		return fmt.Errorf("table %d: track fields: %w", t.id, err)
	}
	t.Hash() // commit what is pending without tracking
	t.ft = &fieldTrack{units: us}
	t.recomputeFields()
	return nil
}

// Tracked reports whether the table keeps field sums.
func (t *Table) Tracked() bool { return t.ft != nil }

func (t *Table) recomputeFields() {
	ft := t.ft
	ft.slot = make([]uint32, t.slots*FieldSyndromes)
	ft.field, ft.live = [FieldSyndromes]uint64{}, [LiveSyndromes]uint64{}
	for i := t.NextLive(0); i >= 0; i = t.NextLive(i + 1) {
		t.addLive(i, false)
		t.sumRecord(i)
	}
}

// livePos and unitPos are the code positions of a slot and of a unit:
// non-zero, distinct and below the prime (table ids modulo 16, slots below
// 2^21, units below 32).
func livePos(id uint32, slot int) uint64 {
	return 1 + (uint64(id&15)<<21 | uint64(slot))
}

func unitPos(id uint32, slot, u int) uint64 {
	return 1 + ((uint64(id&15)<<21|uint64(slot))<<5 | uint64(u))
}

// addLive adds (or removes) slot i's term of the liveness sums.
func (t *Table) addLive(i int, remove bool) {
	x, p := livePos(t.id, i), uint64(1)
	for k := range t.ft.live {
		if remove {
			t.ft.live[k] = subP(t.ft.live[k], p)
		} else {
			t.ft.live[k] = addP(t.ft.live[k], p)
		}
		p = mulP(p, x)
	}
}

// unitValue is a unit's value in the code.
func unitValue(b []byte) uint64 {
	var v uint64
	for i := len(b) - 1; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v % fieldPrime
}

// recordSums returns a record's contribution to the field sums.
func recordSums(id uint32, slot int, us []unit, rec []byte) (c [FieldSyndromes]uint64) {
	for u, un := range us {
		v := unitValue(rec[un.off : un.off+un.size])
		if v == 0 {
			continue
		}
		x := unitPos(id, slot, u)
		for k := range c {
			c[k] = addP(c[k], v)
			v = mulP(v, x)
		}
	}
	return c
}

// sumRecord replaces slot i's cached contribution with its current one.
func (t *Table) sumRecord(i int) {
	ft := t.ft
	c := recordSums(t.id, i, ft.units, t.record(i))
	old := ft.slot[i*FieldSyndromes : (i+1)*FieldSyndromes]
	for k := range c {
		ft.field[k] = addP(subP(ft.field[k], uint64(old[k])), c[k])
		old[k] = uint32(c[k])
	}
}

// unsumRecord removes slot i's cached contribution (the slot was freed).
func (t *Table) unsumRecord(i int) {
	ft := t.ft
	old := ft.slot[i*FieldSyndromes : (i+1)*FieldSyndromes]
	for k := range old {
		ft.field[k] = subP(ft.field[k], uint64(old[k]))
		old[k] = 0
	}
}

// fieldSums returns the table's current sums (committing pending writes).
func (t *Table) fieldSums() (f [FieldSyndromes]uint64, l [LiveSyndromes]uint64) {
	t.Hash()
	return t.ft.field, t.ft.live
}

// computeFieldSums computes the table's sums from scratch with layout us.
func (t *Table) computeFieldSums(us []unit) (f [FieldSyndromes]uint64, l [LiveSyndromes]uint64) {
	for i := t.NextLive(0); i >= 0; i = t.NextLive(i + 1) {
		c := recordSums(t.id, i, us, t.record(i))
		for k := range f {
			f[k] = addP(f[k], c[k])
		}
		x, p := livePos(t.id, i), uint64(1)
		for k := range l {
			l[k] = addP(l[k], p)
			p = mulP(p, x)
		}
	}
	return f, l
}

// Layout is a record layout per table id: the start offsets of its fields
// (see Table.TrackFields). A table it lacks is summed in 8-byte words.
type Layout map[uint32][]int

// TrackFields turns on field sums in every table of the set with layout.
// The tables' ids must differ modulo 16.
func (s *Set) TrackFields(layout Layout) error {
	seen := map[uint32]bool{}
	for _, t := range s.tables {
		if seen[t.id&15] {
			return fmt.Errorf("table set: track fields: table ids collide modulo 16 (%d)", t.id)
		}
		seen[t.id&15] = true
		if err := t.TrackFields(layout[t.id]); err != nil {
			return err
		}
	}
	return nil
}

// FieldSums returns the set's field sums, kept incrementally since
// TrackFields (which must have been called).
func (s *Set) FieldSums() FieldSums {
	var f [FieldSyndromes]uint64
	var l [LiveSyndromes]uint64
	for _, t := range s.tables {
		if t.ft == nil {
			panic(fmt.Sprintf("table %d: FieldSums without TrackFields", t.id))
		}
		tf, tl := t.fieldSums()
		for k := range f {
			f[k] = addP(f[k], tf[k])
		}
		for k := range l {
			l[k] = addP(l[k], tl[k])
		}
	}
	return packSums(f, l)
}

func packSums(f [FieldSyndromes]uint64, l [LiveSyndromes]uint64) (s FieldSums) {
	for k := range f {
		s.Field[k] = uint32(f[k])
	}
	for k := range l {
		s.Live[k] = uint32(l[k])
	}
	return s
}

// ComputeFieldSums computes the set's field sums from scratch with layout,
// touching every live record (a verifier does it at the tick that
// diverged; it need not track).
func (s *Set) ComputeFieldSums(layout Layout) (FieldSums, error) {
	var f [FieldSyndromes]uint64
	var l [LiveSyndromes]uint64
	for _, t := range s.tables {
		us, err := layoutUnits(t.recSize, layout[t.id])
		if err != nil {
			return FieldSums{}, fmt.Errorf("table %d: %w", t.id, err)
		}
		tf, tl := t.computeFieldSums(us)
		for k := range f {
			f[k] = addP(f[k], tf[k])
		}
		for k := range l {
			l[k] = addP(l[k], tl[k])
		}
	}
	return packSums(f, l), nil
}

// FieldDiff is one located difference between a recorded state (want) and
// a state at hand (got, the set passed to LocateFields).
type FieldDiff struct {
	Table uint32
	Slot  int
	// Offset and Size are the unit's bytes in the record; Offset is -1
	// when the slot is live on one side only (GotLive says which).
	Offset, Size int
	GotLive      bool
	// Got is the unit's bytes in the state at hand; Want the recorded
	// bytes, reconstructed from the difference of the sums (exact when
	// the values differ by less than 2^30).
	Want, Got []byte
}

// ErrNotLocated is returned by LocateFields when the sums differ in more
// places than they can locate (or were made with another layout).
var ErrNotLocated = errors.New("table: the difference is not locatable from the field sums")

// LocateFields returns where got, a set's current state, differs from a
// state whose field sums were want, taken with layout: the slots live on
// one side only and the fields whose values differ, in table order, then
// slot, then offset. It needs no tracking (it reads every live record). An
// empty result means the sums agree.
func LocateFields(got *Set, layout Layout, want FieldSums) ([]FieldDiff, error) {
	have, err := got.ComputeFieldSums(layout)
	if err != nil {
		return nil, err
	}
	var ls [LiveSyndromes]uint64
	for k := range ls {
		ls[k] = subP(uint64(want.Live[k]), uint64(have.Live[k]))
	}
	var fs [FieldSyndromes]uint64
	for k := range fs {
		fs[k] = subP(uint64(want.Field[k]), uint64(have.Field[k]))
	}
	type tab struct {
		t  *Table
		us []unit
	}
	byID := map[uint64]tab{}
	for _, t := range got.tables {
		us, _ := layoutUnits(t.recSize, layout[t.id])
		byID[uint64(t.id&15)] = tab{t, us}
	}
	var diffs []FieldDiff
	// Slots live on one side: candidates are every slot below the larger
	// of the two sides' extents; the re-simulated side's slots bound it
	// well enough (a recorded-only slot beyond them is searched up to
	// twice the table's slots).
	if !zero(ls[:]) {
		locs, vals, ok := locate(ls[:], func(yield func(uint64) bool) {
			for _, tb := range byID {
				for i := range max(2*tb.t.slots, 64) {
					if !yield(livePos(tb.t.id, i)) {
						return
					}
				}
			}
		})
		if !ok {
			return nil, fmt.Errorf("%w: slots live on one side only", ErrNotLocated)
		}
		for j, y := range locs {
			y--
			tb := byID[y>>21]
			slot := int(y & (1<<21 - 1))
			gotLive := vals[j] == fieldPrime-1 // want - got = -1
			if vals[j] != 1 && !gotLive || gotLive != tb.t.Live(slot) {
				return nil, fmt.Errorf("%w: slots live on one side only", ErrNotLocated)
			}
			d := FieldDiff{Table: tb.t.id, Slot: slot, Offset: -1, GotLive: gotLive}
			diffs = append(diffs, d)
			if gotLive {
				// Take its fields out of the field syndromes: the rest
				// may still be located.
				c := recordSums(tb.t.id, slot, tb.us, tb.t.record(slot))
				for k := range fs {
					fs[k] = addP(fs[k], c[k])
				}
			}
		}
	}
	if !zero(fs[:]) {
		locs, vals, ok := locate(fs[:], func(yield func(uint64) bool) {
			for _, tb := range byID {
				for i := tb.t.NextLive(0); i >= 0; i = tb.t.NextLive(i + 1) {
					for u := range tb.us {
						if !yield(unitPos(tb.t.id, i, u)) {
							return
						}
					}
				}
			}
		})
		if !ok {
			if len(diffs) > 0 {
				return sortDiffs(diffs), nil // a slot live on one side: its fields are unknown
			}
			return nil, fmt.Errorf("%w: fields", ErrNotLocated)
		}
		for j, x := range locs {
			x--
			tb := byID[x>>26]
			slot, u := int(x>>5&(1<<21-1)), int(x&31)
			un := tb.us[u]
			got := tb.t.record(slot)[un.off : un.off+un.size]
			var g uint64
			for i := un.size - 1; i >= 0; i-- {
				g = g<<8 | uint64(got[i])
			}
			delta := int64(vals[j])
			if delta > fieldPrime/2 {
				delta -= fieldPrime
			}
			w := make([]byte, 8)
			binary.LittleEndian.PutUint64(w, uint64(int64(g)+delta))
			diffs = append(diffs, FieldDiff{Table: tb.t.id, Slot: slot, Offset: un.off, Size: un.size,
				GotLive: true, Got: append([]byte(nil), got...), Want: w[:un.size]})
		}
	}
	return sortDiffs(diffs), nil
}

func sortDiffs(ds []FieldDiff) []FieldDiff {
	slices.SortFunc(ds, func(a, b FieldDiff) int {
		switch {
		case a.Table != b.Table:
			return int(a.Table) - int(b.Table)
		case a.Slot != b.Slot:
			return a.Slot - b.Slot
		}
		return a.Offset - b.Offset
	})
	return ds
}

func zero(s []uint64) bool {
	for _, v := range s {
		if v != 0 {
			return false
		}
	}
	return true
}

// locate decodes syndromes S_k = Σ_j e_j X_j^k (k < len(s)) with up to
// len(s)/2 errors whose positions X_j are among candidates: it returns the
// positions and the error values e_j, or ok false if no such set explains
// the syndromes (more errors, or positions not among the candidates).
func locate(s []uint64, candidates func(yield func(uint64) bool)) (locs, vals []uint64, ok bool) {
	t := len(s) / 2
	for nu := t; nu >= 1; nu-- {
		// Peterson: the locator z^ν + c_{ν-1} z^{ν-1} + ... + c_0 has the
		// X_j as roots; Σ_m c_m S_{k+m} = -S_{k+ν} for k < ν.
		m := make([][]uint64, nu)
		for k := range nu {
			m[k] = make([]uint64, nu+1)
			for j := range nu {
				m[k][j] = s[k+j]
			}
			m[k][nu] = fieldPrime - s[k+nu]
			if m[k][nu] == fieldPrime {
				m[k][nu] = 0
			}
		}
		c, solved := solveP(m)
		if !solved {
			continue // singular: fewer than ν errors
		}
		var roots []uint64
		for x := range candidates {
			v, p := uint64(0), uint64(1)
			for _, ck := range c {
				v = addP(v, mulP(ck, p))
				p = mulP(p, x)
			}
			if addP(v, p) == 0 {
				roots = append(roots, x)
				if len(roots) > nu {
					break
				}
			}
		}
		if len(roots) != nu {
			return nil, nil, false
		}
		// Error values from the first ν syndromes (Vandermonde), then
		// every syndrome must agree.
		v := make([][]uint64, nu)
		for k := range nu {
			v[k] = make([]uint64, nu+1)
			for j, x := range roots {
				v[k][j] = powP(x, uint64(k))
			}
			v[k][nu] = s[k]
		}
		e, solved := solveP(v)
		if !solved {
			return nil, nil, false
		}
		for k := range s {
			sum := uint64(0)
			for j, x := range roots {
				sum = addP(sum, mulP(e[j], powP(x, uint64(k))))
			}
			if sum != s[k] {
				return nil, nil, false
			}
		}
		for _, ej := range e {
			if ej == 0 {
				return nil, nil, false
			}
		}
		return roots, e, true
	}
	return nil, nil, false
}

// solveP solves the n×(n+1) augmented system m mod the prime by Gaussian
// elimination; ok false if it is singular.
func solveP(m [][]uint64) ([]uint64, bool) {
	n := len(m)
	for col := range n {
		piv := -1
		for r := col; r < n; r++ {
			if m[r][col] != 0 {
				piv = r
				break
			}
		}
		if piv < 0 {
			return nil, false
		}
		m[col], m[piv] = m[piv], m[col]
		inv := invP(m[col][col])
		for j := col; j <= n; j++ {
			m[col][j] = mulP(m[col][j], inv)
		}
		for r := range n {
			if r == col || m[r][col] == 0 {
				continue
			}
			f := m[r][col]
			for j := col; j <= n; j++ {
				m[r][j] = subP(m[r][j], mulP(f, m[col][j]))
			}
		}
	}
	x := make([]uint64, n)
	for i := range n {
		x[i] = m[i][n]
	}
	return x, true
}
