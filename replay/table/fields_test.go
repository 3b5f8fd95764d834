package table

import (
	"encoding/binary"
	"errors"
	"testing"

	"pgregory.net/rapid"
)

// fieldSet is a set of two tables for field-sum tests: a LowestFree table
// of 24-byte records with fields at 0 (8 bytes), 8 (2), 10 (1), 12 (12)
// and a NextFit table of 16-byte records in 8-byte words.
func fieldSet(t tb) (*Set, *Table, *Table) {
	t.Helper()
	a := mustNew(t, 3, 24, Options{RecordsPerPage: 4, MaxRecords: 200})
	b := mustNew(t, 4, 16, Options{RecordsPerPage: 8, MaxRecords: 200, Policy: NextFit})
	s, err := NewSet(a, b)
	if err != nil {
		t.Fatal(err)
	}
	return s, a, b
}

var testLayout = Layout{3: {0, 8, 10, 12}}

// TestFieldSumsIncremental: after random writes, allocations, frees,
// captures and restores, the incrementally kept sums equal the sums
// computed from scratch.
func TestFieldSumsIncremental(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		s, a, b := fieldSet(rt)
		if err := s.TrackFields(testLayout); err != nil {
			rt.Fatal(err)
		}
		var full *SetCapture
		var deltas []*SetCapture
		for step := range rapid.IntRange(1, 60).Draw(rt, "steps") {
			tb := []*Table{a, b}[rapid.IntRange(0, 1).Draw(rt, "table")]
			switch rapid.IntRange(0, 4).Draw(rt, "op") {
			case 0, 1:
				if _, err := tb.Alloc(); err != nil {
					rt.Fatal(err)
				}
			case 2:
				if i := tb.NextLive(rapid.IntRange(0, 64).Draw(rt, "from")); i >= 0 {
					r := tb.Mut(i)
					r[rapid.IntRange(0, len(r)-1).Draw(rt, "byte")] = byte(rapid.IntRange(0, 255).Draw(rt, "v"))
				}
			case 3:
				if i := tb.NextLive(rapid.IntRange(0, 64).Draw(rt, "from")); i >= 0 {
					tb.Mut(i)[0]++
					tb.Free(i)
				}
			case 4:
				if full == nil || step%5 == 0 {
					full, deltas = s.CaptureFull(), nil
				} else {
					deltas = append(deltas, s.Capture())
				}
				if rapid.Bool().Draw(rt, "restore") {
					if err := s.Restore(full, deltas...); err != nil {
						rt.Fatal(err)
					}
				}
			}
			want, err := s.ComputeFieldSums(testLayout)
			if err != nil {
				rt.Fatal(err)
			}
			if got := s.FieldSums(); got != want {
				rt.Fatalf("step %d: kept %v, computed %v", step, got, want)
			}
		}
	})
}

// filled returns a tracked set with n records in each table, every field
// set to a value derived from its slot.
func filled(t tb, n int) (*Set, *Table, *Table) {
	t.Helper()
	s, a, b := fieldSet(t)
	for i := range n {
		ia, _ := a.Alloc()
		r := a.Mut(ia)
		binary.LittleEndian.PutUint64(r[0:], uint64(1000+i))
		binary.LittleEndian.PutUint16(r[8:], uint16(100+i))
		r[10] = byte(i)
		ib, _ := b.Alloc()
		binary.LittleEndian.PutUint64(b.Mut(ib)[8:], uint64(7*i+1))
	}
	return s, a, b
}

// TestLocateFields changes up to three fields (or the liveness of up to
// two slots) of a copy of a state and locates them exactly from the
// original's sums.
func TestLocateFields(t *testing.T) {
	type change struct {
		table  int // 0: a, 1: b
		slot   int
		off    int
		value  uint64
		size   int
		free   bool
		alloc  bool
		offset int // expected FieldDiff offset
	}
	cases := []struct {
		name    string
		changes []change
	}{
		{"one field", []change{{table: 0, slot: 5, off: 8, value: 99, size: 2, offset: 8}}},
		{"one word", []change{{table: 1, slot: 17, off: 8, value: 1 << 28, size: 8, offset: 8}}},
		{"long field", []change{{table: 0, slot: 2, off: 20, value: 5, size: 1, offset: 20}}},
		{"two fields of one record", []change{{table: 0, slot: 9, off: 0, value: 1, size: 8, offset: 0}, {table: 0, slot: 9, off: 10, value: 3, size: 1, offset: 10}}},
		{"three records", []change{{table: 0, slot: 1, off: 8, value: 1, size: 2, offset: 8}, {table: 1, slot: 30, off: 0, value: 2, size: 8, offset: 0}, {table: 0, slot: 40, off: 10, value: 200, size: 1, offset: 10}}},
		{"freed slot", []change{{table: 1, slot: 12, free: true, offset: -1}}},
		{"extra slot", []change{{table: 0, alloc: true, offset: -1}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			orig, _, _ := filled(t, 50)
			if err := orig.TrackFields(testLayout); err != nil {
				t.Fatal(err)
			}
			want := orig.FieldSums()
			s, a, b := filled(t, 50)
			var wantDiffs []FieldDiff
			for _, ch := range c.changes {
				tb := []*Table{a, b}[ch.table]
				switch {
				case ch.free:
					tb.Free(ch.slot)
					wantDiffs = append(wantDiffs, FieldDiff{Table: tb.ID(), Slot: ch.slot, Offset: -1})
				case ch.alloc:
					i, _ := tb.Alloc()
					tb.Mut(i)[0] = 1
					wantDiffs = append(wantDiffs, FieldDiff{Table: tb.ID(), Slot: i, Offset: -1, GotLive: true})
				default:
					r := tb.Mut(ch.slot)
					var old [8]byte
					copy(old[:], r[ch.off:ch.off+ch.size])
					var v [8]byte
					binary.LittleEndian.PutUint64(v[:], ch.value)
					copy(r[ch.off:], v[:ch.size])
					wantDiffs = append(wantDiffs, FieldDiff{Table: tb.ID(), Slot: ch.slot, Offset: ch.offset, GotLive: true, Want: old[:ch.size]})
				}
			}
			diffs, err := LocateFields(s, testLayout, want)
			if err != nil {
				t.Fatal(err)
			}
			if len(diffs) != len(wantDiffs) {
				t.Fatalf("located %+v, want %+v", diffs, wantDiffs)
			}
			for i, d := range sortDiffs(wantDiffs) {
				g := diffs[i]
				if g.Table != d.Table || g.Slot != d.Slot || g.Offset != d.Offset || g.GotLive != d.GotLive {
					t.Fatalf("diff %d: located %+v, want %+v", i, g, d)
				}
				if d.Want != nil && string(g.Want[:len(d.Want)]) != string(d.Want) {
					t.Fatalf("diff %d: recorded value % x, want % x", i, g.Want, d.Want)
				}
			}
			if d, err := LocateFields(orig, testLayout, want); err != nil || len(d) != 0 {
				t.Fatalf("the same state: %v %v", d, err)
			}
		})
	}
}

// TestLocateFieldsTooMany: four differing fields are more than the sums
// can place; LocateFields says so instead of naming wrong ones.
func TestLocateFieldsTooMany(t *testing.T) {
	orig, _, _ := filled(t, 50)
	want, _ := orig.ComputeFieldSums(testLayout)
	s, a, _ := filled(t, 50)
	for _, slot := range []int{3, 8, 13, 21} {
		a.Mut(slot)[10] ^= 0x40
	}
	if d, err := LocateFields(s, testLayout, want); !errors.Is(err, ErrNotLocated) {
		t.Fatalf("located %+v (%v)", d, err)
	}
}

func TestFieldSumsCodec(t *testing.T) {
	s, _, _ := filled(t, 10)
	fs, _ := s.ComputeFieldSums(nil)
	got, err := DecodeFieldSums(fs.AppendBinary(nil))
	if err != nil || got != fs {
		t.Fatalf("%v %v", got, err)
	}
	if _, err := DecodeFieldSums(make([]byte, FieldSumsSize-1)); err == nil {
		t.Fatal("short sums decoded")
	}
	bad := fs.AppendBinary(nil)
	binary.LittleEndian.PutUint32(bad, fieldPrime)
	if _, err := DecodeFieldSums(bad); err == nil {
		t.Fatal("out-of-range sum decoded")
	}
}
