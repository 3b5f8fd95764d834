package table

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// tb is what the helpers need from *testing.T and *rapid.T.
type tb interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

func mustNew(t tb, id uint32, size int, opts Options) *Table {
	t.Helper()
	tb, err := New(id, size, opts)
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

// sameState fails unless a and b hold the same records in the same slots
// with the same hash.
func sameState(t tb, a, b *Table) {
	t.Helper()
	if a.Slots() != b.Slots() || a.Len() != b.Len() {
		t.Fatalf("slots/len: %d/%d vs %d/%d", a.Slots(), a.Len(), b.Slots(), b.Len())
	}
	for i := 0; i < a.Slots(); i++ {
		if a.Live(i) != b.Live(i) {
			t.Fatalf("slot %d: live %v vs %v", i, a.Live(i), b.Live(i))
		}
		if !bytes.Equal(a.Row(i), b.Row(i)) {
			t.Fatalf("slot %d: % x vs % x", i, a.Row(i), b.Row(i))
		}
	}
	if a.Hash() != b.Hash() {
		t.Fatalf("hash %#x vs %#x", a.Hash(), b.Hash())
	}
}

// tableOps drives a table with random operations and mirrors it in a model.
type tableOps struct {
	tb     *Table
	model  map[int][]byte
	cursor int // NextFit cursor model
}

func newTableOps(t *rapid.T) *tableOps {
	size := rapid.IntRange(1, 40).Draw(t, "recordSize")
	per := rapid.SampledFrom([]int{1, 2, 4, 8, 64}).Draw(t, "perPage")
	policy := rapid.SampledFrom([]Policy{LowestFree, NextFit}).Draw(t, "policy")
	tb, err := New(7, size, Options{RecordsPerPage: per, MaxRecords: 300, Policy: policy})
	if err != nil {
		t.Fatal(err)
	}
	return &tableOps{tb: tb, model: map[int][]byte{}}
}

// step performs one random operation.
func (o *tableOps) step(t *rapid.T) {
	switch rapid.IntRange(0, 9).Draw(t, "op") {
	case 0, 1, 2: // alloc
		want := o.expectedAlloc(o.tb.Slots())
		i, err := o.tb.Alloc()
		if errors.Is(err, ErrFull) {
			if len(o.model) != 300 {
				t.Fatalf("ErrFull with %d records", len(o.model))
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, dup := o.model[i]; dup {
			t.Fatalf("alloc returned live slot %d", i)
		}
		if i != want {
			t.Fatalf("policy %d: alloc returned %d, want %d", o.tb.Policy(), i, want)
		}
		if o.tb.Policy() == NextFit {
			o.cursor = i + 1
		}
		o.model[i] = make([]byte, o.tb.RecordSize())
	case 3: // free
		if i, ok := o.pick(t); ok {
			o.tb.Free(i)
			delete(o.model, i)
		}
	default: // write some bytes
		if i, ok := o.pick(t); ok {
			rs := o.tb.RecordSize()
			off := rapid.IntRange(0, rs-1).Draw(t, "off")
			data := rapid.SliceOfN(rapid.Byte(), 1, rs-off).Draw(t, "data")
			copy(o.tb.Mut(i)[off:], data)
			copy(o.model[i][off:], data)
		}
	}
}

// expectedAlloc is the slot the policy must pick among slots [0, slots)
// before an Alloc, or slots if the table must grow.
func (o *tableOps) expectedAlloc(slots int) int {
	firstFree := func(from, to int) int {
		for j := from; j < to; j++ {
			if _, live := o.model[j]; !live {
				return j
			}
		}
		return -1
	}
	if o.tb.Policy() == NextFit {
		if j := firstFree(o.cursor, slots); j >= 0 {
			return j
		}
		if o.cursor > 0 && 2*len(o.model) > slots && slots+o.tb.RecordsPerPage() <= 2*300 {
			return slots // more than half full: grow rather than wrap
		}
	}
	if j := firstFree(0, slots); j >= 0 {
		return j
	}
	return slots
}

func (o *tableOps) pick(t *rapid.T) (int, bool) {
	if o.tb.Len() == 0 {
		return 0, false
	}
	k := rapid.IntRange(0, o.tb.Len()-1).Draw(t, "pick")
	for i := o.tb.NextLive(0); i >= 0; i = o.tb.NextLive(i + 1) {
		if k == 0 {
			return i, true
		}
		k--
	}
	t.Fatal("NextLive visited fewer than Len slots")
	return 0, false
}

func (o *tableOps) check(t *rapid.T) {
	if o.tb.Len() != len(o.model) {
		t.Fatalf("Len %d, model %d", o.tb.Len(), len(o.model))
	}
	for i := 0; i < o.tb.Slots(); i++ {
		want, live := o.model[i]
		if o.tb.Live(i) != live {
			t.Fatalf("slot %d live %v, model %v", i, o.tb.Live(i), live)
		}
		if !live {
			continue // a free slot's bytes are unspecified
		}
		if !bytes.Equal(o.tb.Row(i), want) {
			t.Fatalf("slot %d: % x, model % x", i, o.tb.Row(i), want)
		}
	}
	if h, r := o.tb.Hash(), o.tb.RecomputeHash(); h != r {
		t.Fatalf("incremental hash %#x, recomputed %#x", h, r)
	}
}

func TestPropIncrementalHash(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		o := newTableOps(t)
		n := rapid.IntRange(1, 300).Draw(t, "ops")
		for k := 0; k < n; k++ {
			o.step(t)
			if rapid.IntRange(0, 9).Draw(t, "checkNow") == 0 {
				o.check(t)
			}
		}
		o.check(t)
	})
}

func roundTrip(t tb, c *Capture) *Capture {
	t.Helper()
	b, err := c.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != c.EncodedLen() {
		t.Fatalf("encoded %d bytes, EncodedLen %d", len(b), c.EncodedLen())
	}
	var d Capture
	if err := d.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	return &d
}

func TestPropRestoreFull(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		o := newTableOps(t)
		n := rapid.IntRange(0, 200).Draw(t, "ops")
		for k := 0; k < n; k++ {
			o.step(t)
		}
		full := o.tb.CaptureFull()
		if full.Hash != o.tb.RecomputeHash() {
			t.Fatalf("capture hash %#x, table %#x", full.Hash, o.tb.RecomputeHash())
		}
		r := mustNew(t, o.tb.ID(), o.tb.RecordSize(), Options{RecordsPerPage: o.tb.RecordsPerPage(), MaxRecords: 300, Policy: o.tb.Policy()})
		if err := r.Restore(roundTrip(t, full)); err != nil {
			t.Fatal(err)
		}
		sameState(t, o.tb, r)
		if r.DirtyPages() != 0 || r.Epoch() != full.Epoch {
			t.Fatalf("restored: %d dirty pages, epoch %d", r.DirtyPages(), r.Epoch())
		}
		// Both continue identically.
		if o.tb.Len() < 300 {
			a, _ := o.tb.Alloc()
			b, _ := r.Alloc()
			if a != b {
				t.Fatalf("next alloc %d vs %d", a, b)
			}
		}
	})
}

func TestPropRestoreChain(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		o := newTableOps(t)
		var chain []*Capture // last full capture and the deltas after it
		rounds := rapid.IntRange(1, 8).Draw(t, "rounds")
		for r := 0; r < rounds; r++ {
			n := rapid.IntRange(0, 60).Draw(t, "ops")
			for k := 0; k < n; k++ {
				o.step(t)
			}
			if len(chain) == 0 || rapid.IntRange(0, 4).Draw(t, "fullNow") == 0 {
				chain = []*Capture{roundTrip(t, o.tb.CaptureFull())}
			} else {
				d := o.tb.Capture()
				if d.Full || len(d.Pages) > o.tb.Pages() {
					t.Fatalf("delta: full %v, %d pages of %d", d.Full, len(d.Pages), o.tb.Pages())
				}
				chain = append(chain, roundTrip(t, d))
			}
		}
		r := mustNew(t, o.tb.ID(), o.tb.RecordSize(), Options{RecordsPerPage: o.tb.RecordsPerPage(), MaxRecords: 300, Policy: o.tb.Policy()})
		if err := r.Restore(chain[0], chain[1:]...); err != nil {
			t.Fatal(err)
		}
		sameState(t, o.tb, r)
		// The chain continues from the restored table: a delta taken on
		// both after the same writes restores the same state.
		if o.tb.Len() > 0 {
			i, _ := o.pick(t)
			o.tb.Mut(i)[0]++
			r.Mut(i)[0]++
		}
		if o.tb.Len() < 300 {
			a, _ := o.tb.Alloc()
			b, _ := r.Alloc()
			if a != b {
				t.Fatalf("next alloc after restore: %d vs %d", a, b)
			}
		}
		d1, d2 := o.tb.Capture(), r.Capture()
		if d1.Epoch != d2.Epoch || len(d1.Pages) != len(d2.Pages) || d1.Hash != d2.Hash {
			t.Fatalf("continued deltas differ: epoch %d/%d pages %d/%d", d1.Epoch, d2.Epoch, len(d1.Pages), len(d2.Pages))
		}
		r3 := mustNew(t, o.tb.ID(), o.tb.RecordSize(), Options{RecordsPerPage: o.tb.RecordsPerPage(), MaxRecords: 300, Policy: o.tb.Policy()})
		if err := r3.Restore(chain[0], append(chain[1:], d2)...); err != nil {
			t.Fatal(err)
		}
		sameState(t, o.tb, r3)
	})
}

func TestAllocLowestFirstAndGrowth(t *testing.T) {
	tb := mustNew(t, 1, 8, Options{RecordsPerPage: 4, MaxRecords: 10})
	for want := 0; want < 10; want++ {
		got, err := tb.Alloc()
		if err != nil || got != want {
			t.Fatalf("alloc %d: got %d, %v", want, got, err)
		}
	}
	if _, err := tb.Alloc(); !errors.Is(err, ErrFull) {
		t.Fatalf("alloc beyond max: %v", err)
	}
	if tb.Pages() != 3 || tb.Slots() != 12 {
		t.Fatalf("pages %d slots %d", tb.Pages(), tb.Slots())
	}
	tb.Mut(7).SetU64(0, 99)
	tb.Capture()
	tb.Free(7)
	tb.Free(2)
	if tb.DirtyPages() != 0 {
		t.Fatal("Free dirtied a page")
	}
	for _, want := range []int{2, 7} {
		if got, _ := tb.Alloc(); got != want {
			t.Fatalf("realloc: got %d, want %d", got, want)
		}
	}
	if tb.Row(7).U64(0) != 0 {
		t.Fatal("reallocated record not zero")
	}
}

// TestGrowKeepsRecords grows a table page by page past several moves of
// its backing (records are one slice): every record keeps its bytes, a new
// page is zeroed, and captures (which copy the pages) see the records as
// written after the moves, so a restored table equals the original.
func TestGrowKeepsRecords(t *testing.T) {
	tb := mustNew(t, 3, 12, Options{RecordsPerPage: 4})
	restored := mustNew(t, 3, 12, Options{RecordsPerPage: 4})
	full := tb.CaptureFull()
	var deltas []*Capture
	for n := 0; n < 300; n++ {
		i, err := tb.Alloc()
		if err != nil || i != n {
			t.Fatalf("alloc %d: %d, %v", n, i, err)
		}
		if tb.Row(i).U64(0) != 0 || tb.Row(i).U32(8) != 0 {
			t.Fatalf("slot %d not zero after alloc", i)
		}
		tb.Mut(i).SetU64(0, uint64(i)*0x9e3779b97f4a7c15)
		tb.Mut(i).SetU32(8, uint32(i))
		if i > 0 {
			// An older slot written again after the backing moved.
			tb.Mut(i/2).SetU32(8, uint32(i/2)+uint32(n)<<16)
		}
		for j := 0; j <= i; j++ {
			if tb.Row(j).U64(0) != uint64(j)*0x9e3779b97f4a7c15 {
				t.Fatalf("after %d allocs: slot %d holds %#x", n+1, j, tb.Row(j).U64(0))
			}
		}
		if n%7 == 0 {
			deltas = append(deltas, tb.Capture())
		}
	}
	if tb.Hash() != tb.RecomputeHash() {
		t.Fatalf("hash %#x, recomputed %#x", tb.Hash(), tb.RecomputeHash())
	}
	deltas = append(deltas, tb.Capture())
	if err := restored.Restore(full, deltas...); err != nil {
		t.Fatal(err)
	}
	sameState(t, tb, restored)
	// The restored table grows from its restored backing too.
	for range 40 {
		i, err := restored.Alloc()
		if err != nil {
			t.Fatal(err)
		}
		restored.Mut(i).SetU32(8, uint32(i))
		j, _ := tb.Alloc()
		tb.Mut(j).SetU32(8, uint32(j))
	}
	sameState(t, tb, restored)
}

func TestNextFit(t *testing.T) {
	tb := mustNew(t, 3, 8, Options{RecordsPerPage: 4, Policy: NextFit})
	for want := 0; want < 8; want++ {
		if got, _ := tb.Alloc(); got != want {
			t.Fatalf("alloc %d: got %d", want, got)
		}
	}
	for _, i := range []int{0, 1, 2, 3, 5} {
		tb.Free(i)
	}
	h := tb.Hash()
	// The cursor is at 8 and 3 of 8 slots are live: wrap around to the
	// first free slot.
	for _, want := range []int{0, 1} {
		if got, _ := tb.Alloc(); got != want {
			t.Fatalf("wrapped alloc: got %d, want %d", got, want)
		}
	}
	if tb.Hash() == h || tb.Hash() != tb.RecomputeHash() {
		t.Fatal("cursor not hashed consistently")
	}
	// Now 5 of 8 are live: at the end of the table NextFit grows instead
	// of wrapping, keeping slack for cohorts to die in.
	tb.Alloc() // 2
	tb.Alloc() // 3
	tb.Alloc() // 5
	if got, _ := tb.Alloc(); got != 8 || tb.Slots() != 12 {
		t.Fatalf("alloc past the end: got %d with %d slots", got, tb.Slots())
	}
	tb.Free(0)
	if got, _ := tb.Alloc(); got != 9 {
		t.Fatalf("alloc after the cursor: got %d, want 9", got)
	}
	// Two tables with the same records but different cursors differ.
	a := mustNew(t, 3, 8, Options{Policy: NextFit})
	b := mustNew(t, 3, 8, Options{Policy: NextFit})
	a.Alloc()
	a.Alloc()
	a.Free(1)
	b.Alloc()
	if a.Hash() == b.Hash() {
		t.Fatal("cursor does not affect the hash")
	}
}

func TestNextLive(t *testing.T) {
	tb := mustNew(t, 1, 1, Options{RecordsPerPage: 64})
	for i := 0; i < 200; i++ {
		tb.Alloc()
	}
	for i := 0; i < 200; i++ {
		if i%3 != 0 {
			tb.Free(i)
		}
	}
	var got []int
	for i := tb.NextLive(0); i >= 0; i = tb.NextLive(i + 1) {
		got = append(got, i)
	}
	if len(got) != 67 || got[0] != 0 || got[66] != 198 {
		t.Fatalf("NextLive visited %v", got)
	}
	if tb.NextLive(-5) != 0 || tb.NextLive(199) != -1 || tb.NextLive(1000) != -1 {
		t.Fatal("NextLive bounds")
	}
}

func TestNextLiveExcept(t *testing.T) {
	tb := mustNew(t, 1, 1, Options{RecordsPerPage: 64})
	for i := 0; i < 200; i++ {
		tb.Alloc()
	}
	for i := 0; i < 200; i++ {
		if i%3 != 0 {
			tb.Free(i)
		}
	}
	// Skip the live slots that are multiples of 6, and every slot of the
	// second word; the skip mask is shorter than the table.
	skip := make([]uint64, 3)
	for i := 0; i < 192; i += 6 {
		skip[i>>6] |= 1 << (uint(i) & 63)
	}
	skip[1] = ^uint64(0)
	var got, want []int
	for i := tb.NextLiveExcept(0, skip); i >= 0; i = tb.NextLiveExcept(i+1, skip) {
		got = append(got, i)
	}
	for i := tb.NextLive(0); i >= 0; i = tb.NextLive(i + 1) {
		if (i >= 192 || i%6 != 0) && (i < 64 || i >= 128) {
			want = append(want, i)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("NextLiveExcept visited %v, want %v", got, want)
	}
	if tb.NextLiveExcept(-5, nil) != 0 || tb.NextLiveExcept(199, nil) != -1 || tb.NextLiveExcept(1000, skip) != -1 {
		t.Fatal("NextLiveExcept bounds")
	}
}

func TestMutPanicsOnFreeSlot(t *testing.T) {
	tb := mustNew(t, 1, 4, Options{})
	tb.Alloc()
	tb.Free(0)
	defer func() {
		if recover() == nil {
			t.Fatal("Mut of a free slot did not panic")
		}
	}()
	tb.Mut(0)
}

func TestHashDependsOnSlotTableAndBytes(t *testing.T) {
	a := mustNew(t, 1, 8, Options{})
	b := mustNew(t, 2, 8, Options{})
	for _, tb := range []*Table{a, b} {
		tb.Alloc()
		tb.Alloc()
		tb.Mut(0).SetU64(0, 5)
	}
	if a.Hash() == b.Hash() {
		t.Fatal("tables with different ids hash alike")
	}
	h := a.Hash()
	a.Mut(0).SetU64(0, 0)
	a.Mut(1).SetU64(0, 5) // the same bytes, moved to another slot
	if a.Hash() == h {
		t.Fatal("moving a record between slots keeps the hash")
	}
	a.Mut(1).SetU64(0, 0)
	a.Mut(0).SetU64(0, 5)
	if a.Hash() != h {
		t.Fatal("restoring the bytes does not restore the hash")
	}
}

func TestHashBytesStable(t *testing.T) {
	// Golden values: the hash must never change across versions and
	// machines, or recorded state hashes stop verifying.
	cases := []struct {
		seed uint64
		in   string
		want uint64
	}{
		{0, "", 0x42bc986dc5eec4d3},
		{0, "a", 0x6cf84e5a2465e867},
		{1, "broadside", 0x4071e3c5f4898009},
		{42, "0123456789abcdef0123456789abcdef!", 0xa5ebff870181e248},
	}
	for _, c := range cases {
		if got := HashBytes(c.seed, []byte(c.in)); got != c.want {
			t.Errorf("HashBytes(%d, %q) = %#016x, want %#016x", c.seed, c.in, got, c.want)
		}
	}
}

func TestHashBytesAvalanche(t *testing.T) {
	// Every single-bit flip of a 72-byte record changes about half of the
	// hash bits.
	rec := make([]byte, 72)
	for i := range rec {
		rec[i] = byte(i * 7)
	}
	base := HashBytes(3, rec)
	total := 0
	for bit := 0; bit < len(rec)*8; bit++ {
		rec[bit/8] ^= 1 << (bit % 8)
		d := base ^ HashBytes(3, rec)
		rec[bit/8] ^= 1 << (bit % 8)
		n := 0
		for ; d != 0; d &= d - 1 {
			n++
		}
		if n < 10 {
			t.Fatalf("flipping bit %d changes only %d hash bits", bit, n)
		}
		total += n
	}
	if avg := float64(total) / float64(len(rec)*8); avg < 30 || avg > 34 {
		t.Fatalf("average %v changed bits, want ≈32", avg)
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	for _, c := range []struct {
		size int
		opts Options
	}{
		{0, Options{}},
		{MaxRecordSize + 1, Options{}},
		{8, Options{RecordsPerPage: 3}},
		{8, Options{RecordsPerPage: -4}},
		{MaxRecordSize, Options{RecordsPerPage: 128}},
		{8, Options{MaxRecords: -1}},
		{8, Options{MaxRecords: MaxSlots + 1}},
	} {
		if _, err := New(1, c.size, c.opts); err == nil {
			t.Errorf("New(size %d, %+v) succeeded", c.size, c.opts)
		}
	}
}

func TestSetRestoreAndHash(t *testing.T) {
	mk := func() (*Set, *Table, *Table) {
		a := mustNew(t, 1, 16, Options{RecordsPerPage: 4})
		b := mustNew(t, 2, 24, Options{RecordsPerPage: 8})
		s, err := NewSet(a, b)
		if err != nil {
			t.Fatal(err)
		}
		return s, a, b
	}
	s, a, b := mk()
	for i := 0; i < 20; i++ {
		a.Alloc()
		b.Alloc()
		a.Mut(i).SetU32(0, uint32(i))
	}
	full := s.CaptureFull()
	for i := 0; i < 20; i += 5 {
		b.Mut(i).SetU64(8, uint64(i)*3)
	}
	a.Free(3)
	d1 := s.Capture()
	if len(d1.Tables[0].Pages) != 0 || len(d1.Tables[1].Pages) != 2 {
		t.Fatalf("delta pages %d, %d", len(d1.Tables[0].Pages), len(d1.Tables[1].Pages))
	}
	if s.Hash() != s.RecomputeHash() || d1.Hash != s.Hash() {
		t.Fatal("set hash")
	}
	enc := func(c *SetCapture) *SetCapture {
		bs, err := c.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var d SetCapture
		if err := d.UnmarshalBinary(bs); err != nil {
			t.Fatal(err)
		}
		if d.Hash != c.Hash || d.Full != c.Full {
			t.Fatalf("decoded set capture: hash %#x full %v", d.Hash, d.Full)
		}
		return &d
	}
	r, ra, rb := mk()
	if err := r.Restore(enc(full), enc(d1)); err != nil {
		t.Fatal(err)
	}
	sameState(t, a, ra)
	sameState(t, b, rb)

	// A chain that skips a delta is refused and leaves the set unchanged.
	rb.Mut(0).SetU8(0, 1)
	before := r.Hash()
	d2 := s.Capture()
	a.Mut(0).SetU8(1, 1)
	d3 := s.Capture()
	if err := r.Restore(full, d1, d3); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("restore with a gap: %v", err)
	}
	if r.Hash() != before {
		t.Fatal("failed restore changed the set")
	}
	if err := r.Restore(full, d1, d2, d3); err != nil {
		t.Fatal(err)
	}
	sameState(t, a, ra)
	if _, err := NewSet(a, mustNew(t, 1, 4, Options{})); err == nil {
		t.Fatal("NewSet accepted duplicate ids")
	}
}

func TestRestoreRejects(t *testing.T) {
	src := mustNew(t, 5, 8, Options{RecordsPerPage: 4})
	for i := 0; i < 9; i++ {
		src.Alloc()
		src.Mut(i).SetU64(0, uint64(i+1))
	}
	full := src.CaptureFull()
	src.Mut(1).SetU64(0, 77)
	delta := src.Capture()

	clone := func(c *Capture) *Capture {
		d := *c
		d.Live = append([]uint64(nil), c.Live...)
		d.Pages = nil
		for _, p := range c.Pages {
			d.Pages = append(d.Pages, Page{Index: p.Index, Data: append([]byte(nil), p.Data...)})
		}
		return &d
	}
	cases := map[string]func() (*Table, *Capture, []*Capture){
		"delta as base": func() (*Table, *Capture, []*Capture) {
			return mustNew(t, 5, 8, Options{RecordsPerPage: 4}), delta, nil
		},
		"wrong table id": func() (*Table, *Capture, []*Capture) {
			return mustNew(t, 6, 8, Options{RecordsPerPage: 4}), full, nil
		},
		"wrong record size": func() (*Table, *Capture, []*Capture) {
			return mustNew(t, 5, 16, Options{RecordsPerPage: 4}), full, nil
		},
		"too many records": func() (*Table, *Capture, []*Capture) {
			return mustNew(t, 5, 8, Options{RecordsPerPage: 4, MaxRecords: 3}), full, nil
		},
		"flipped byte": func() (*Table, *Capture, []*Capture) {
			c := clone(full)
			c.Pages[0].Data[3] ^= 1
			return mustNew(t, 5, 8, Options{RecordsPerPage: 4}), c, nil
		},
		"other policy": func() (*Table, *Capture, []*Capture) {
			return mustNew(t, 5, 8, Options{RecordsPerPage: 4, Policy: NextFit}), full, nil
		},
		"cursor for lowest-free": func() (*Table, *Capture, []*Capture) {
			c := clone(full)
			c.Cursor = 3
			return mustNew(t, 5, 8, Options{RecordsPerPage: 4}), c, nil
		},
		"epoch gap": func() (*Table, *Capture, []*Capture) {
			d := clone(delta)
			d.Epoch++
			return mustNew(t, 5, 8, Options{RecordsPerPage: 4}), full, []*Capture{d}
		},
		"missing page": func() (*Table, *Capture, []*Capture) {
			c := clone(full)
			c.Pages = c.Pages[:2]
			return mustNew(t, 5, 8, Options{RecordsPerPage: 4}), c, nil
		},
		"nil": func() (*Table, *Capture, []*Capture) {
			return mustNew(t, 5, 8, Options{RecordsPerPage: 4}), nil, nil
		},
	}
	for name, mk := range cases {
		tb, base, deltas := mk()
		if err := tb.Restore(base, deltas...); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: Restore = %v, want ErrCorrupt", name, err)
		}
		if tb.Slots() != 0 {
			t.Errorf("%s: failed Restore changed the table", name)
		}
	}
}

func TestDecodeRejectsCorruption(t *testing.T) {
	tb := mustNew(t, 3, 12, Options{RecordsPerPage: 2})
	for i := 0; i < 5; i++ {
		tb.Alloc()
		tb.Mut(i).SetU32(4, uint32(i))
	}
	enc, err := tb.CaptureFull().MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var c Capture
	for n := 0; n < len(enc); n++ {
		if err := c.UnmarshalBinary(enc[:n]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncated to %d: %v", n, err)
		}
	}
	for i := range enc {
		bad := append([]byte(nil), enc...)
		bad[i] ^= 0x10
		if err := c.UnmarshalBinary(bad); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("flipped byte %d: %v", i, err)
		}
	}
	// Structurally invalid content with a correct checksum is refused too.
	reseal := func(b []byte) []byte {
		b = b[:len(b)-4]
		return append(b, le32(crcOf(b))...)
	}
	swapped := append([]byte(nil), enc...)
	// Page indexes 0 and 1 swapped: out of order.
	first := captureHeaderLen + 8*1 + 4
	pageLen := 4 + 2*12
	swapped[first], swapped[first+pageLen] = 1, 0
	if err := c.UnmarshalBinary(reseal(swapped)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("pages out of order: %v", err)
	}
	huge := append([]byte(nil), enc...)
	copy(huge[20:], le32(MaxSlots)) // slots far beyond the input
	if err := c.UnmarshalBinary(reseal(huge)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("huge slot count: %v", err)
	}
	if err := c.UnmarshalBinary(enc); err != nil {
		t.Fatal(err)
	}
}

// TestCommitAcrossSummaryWords writes scattered records of a table larger
// than one word of the pending summary (4,096 slots), frees some of them
// after their write and reallocates a few in the same round: the
// incremental hash must match the recomputed one after every round, and
// a round's writes must dirty exactly their pages.
func TestCommitAcrossSummaryWords(t *testing.T) {
	const slots = 3*4096 + 100
	tb := mustNew(t, 9, 24, Options{RecordsPerPage: 16})
	for range slots {
		if _, err := tb.Alloc(); err != nil {
			t.Fatal(err)
		}
	}
	tb.Capture() // clear the dirty pages
	rng := uint64(1)
	next := func(n int) int {
		rng = Mix64(rng + 0x9e3779b97f4a7c15)
		return int(rng % uint64(n))
	}
	for round := range 40 {
		pages := map[int]bool{}
		var freed []int
		for range 1 + next(200) {
			i := next(slots)
			if !tb.Live(i) {
				continue
			}
			r := tb.Mut(i)
			r.SetU64(next(17), uint64(round)<<32|uint64(i))
			pages[i/16] = true
			if next(8) == 0 {
				tb.Free(i)
				freed = append(freed, i)
			}
		}
		for range len(freed) / 2 {
			j, err := tb.Alloc()
			if err != nil {
				t.Fatal(err)
			}
			pages[j/16] = true
		}
		if got := tb.DirtyPages(); got != len(pages) {
			t.Fatalf("round %d: %d dirty pages, want %d", round, got, len(pages))
		}
		if h, r := tb.Hash(), tb.RecomputeHash(); h != r {
			t.Fatalf("round %d: incremental hash %#x, recomputed %#x", round, h, r)
		}
		tb.Capture()
		for tb.Len() < slots { // keep the table full for the next round
			if _, err := tb.Alloc(); err != nil {
				t.Fatal(err)
			}
		}
		if tb.Slots() != slots+12 || tb.Hash() != tb.RecomputeHash() {
			t.Fatalf("round %d: refilled to %d slots, hash %#x, recomputed %#x", round, tb.Slots(), tb.Hash(), tb.RecomputeHash())
		}
		tb.Capture()
	}
}
