package lineage

import (
	"context"
	"errors"
	"testing"

	"go.uber.org/goleak"
)

// bothModes runs f with inline and with background sealing, and checks
// that a background Log's goroutine is gone after Close.
func bothModes(t *testing.T, f func(t *testing.T, background bool) *Log) {
	for _, bg := range []bool{false, true} {
		name := "inline"
		if bg {
			name = "background"
		}
		t.Run(name, func(t *testing.T) {
			l := f(t, bg)
			if err := l.Close(context.Background()); err != nil {
				t.Fatalf("close: %v", err)
			}
			if bg {
				goleak.VerifyNone(t)
			}
		})
	}
}

// tickEvents is a deterministic, varied tick of events for shard at tick.
func recordTick(t testing.TB, l *Log, shard ShardID, tick uint64, pos *uint64) {
	t.Helper()
	ctx := context.Background()
	if err := l.BeginTick(ctx, shard, tick); err != nil {
		t.Fatal(err)
	}
	n := int(tick%5) + 1
	for i := 0; i < n; i++ {
		*pos++
		l.Input(CommandInfo{Pos: *pos, Player: uint32(i + 1), Kind: uint8(i % 3)})
		l.Command(EntityID(1<<56|uint64(i+1)), *pos)
	}
	for i := 0; i < int(tick%7); i++ {
		l.Derived(EntityID(2<<56|tick<<8|uint64(i)), EntityID(1<<56|uint64(i%3+1)))
	}
	if err := l.EndTick(ctx); err != nil {
		t.Fatal(err)
	}
}

// storedRanges decodes every range in s.
func storedRanges(t testing.TB, s Store) []*Range {
	t.Helper()
	ctx := context.Background()
	infos, err := s.Ranges(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []*Range
	for _, in := range infos {
		b, err := s.GetRange(ctx, in.Shard, in.FirstTick)
		if err != nil {
			t.Fatal(err)
		}
		r := new(Range)
		if err := DecodeRange(b, r); err != nil {
			t.Fatal(err)
		}
		if got := infoOf(r, len(b)); got != in {
			t.Fatalf("stored info %+v, range says %+v", in, got)
		}
		out = append(out, r)
	}
	return out
}

// expected builds what recordTick records for shard over ticks [from, to].
func expected(shard ShardID, from, to uint64, pos *uint64) *Range {
	r := &Range{Shard: shard, FirstTick: from}
	for tick := from; tick <= to; tick++ {
		for i := 0; i < int(tick%5)+1; i++ {
			*pos++
			r.Inputs = append(r.Inputs, CommandInfo{Pos: *pos, Tick: tick, Player: uint32(i + 1), Kind: uint8(i % 3)})
			r.Events = append(r.Events, CommandEvent(EntityID(1<<56|uint64(i+1)), *pos))
		}
		for i := 0; i < int(tick%7); i++ {
			r.Events = append(r.Events, DerivedEvent(EntityID(2<<56|tick<<8|uint64(i)), EntityID(1<<56|uint64(i%3+1))))
		}
		r.InputEnds = append(r.InputEnds, len(r.Inputs))
		r.EventEnds = append(r.EventEnds, len(r.Events))
	}
	return r
}

func TestLogRecordsAlignedRanges(t *testing.T) { bothModes(t, testLogRecordsAlignedRanges) }

func testLogRecordsAlignedRanges(t *testing.T, bg bool) *Log {
	l := NewLog(LogOptions{RangeTicks: 64, Background: bg})
	var pa, pb uint64
	for tick := uint64(1); tick <= 150; tick++ {
		recordTick(t, l, 0, tick, &pa)
		recordTick(t, l, 7, tick, &pb)
	}
	if err := l.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := storedRanges(t, l.Store())
	var qa, qb uint64
	want := []*Range{
		expected(0, 1, 63, &qa), expected(0, 64, 127, &qa), expected(0, 128, 150, &qa),
		expected(7, 1, 63, &qb), expected(7, 64, 127, &qb), expected(7, 128, 150, &qb),
	}
	if len(got) != len(want) {
		t.Fatalf("%d ranges stored, want %d", len(got), len(want))
	}
	for i := range want {
		if !sameRange(got[i], want[i]) {
			t.Fatalf("range %d: shard %d ticks %d..%d differs from what was recorded", i, want[i].Shard, want[i].FirstTick, want[i].LastTick())
		}
	}
	st := l.Stats()
	if st.Ticks != 300 || st.Ranges != 4 || st.Dropped != 0 || st.Bytes == 0 {
		t.Fatalf("stats %+v", st)
	}
	return l
}

func TestLogSteadyStateDoesNotAllocate(t *testing.T) { bothModes(t, testLogSteadyState) }

func testLogSteadyState(t *testing.T, bg bool) *Log {
	l := NewLog(LogOptions{RangeTicks: 256, Store: &discardStore{}, Background: bg})
	var pos uint64
	tick := uint64(0)
	for ; tick < 256; tick++ { // one window grows the buffers
		recordTick(t, l, 0, tick, &pos)
	}
	allocs := testing.AllocsPerRun(600, func() { // crosses a seal (tick 511)
		recordTick(t, l, 0, tick, &pos)
		tick++
	})
	if allocs != 0 {
		t.Fatalf("%.2f allocations per tick", allocs)
	}
	return l
}

// discardStore accepts and forgets ranges, so that allocation counts
// exclude a store's own copies.
type discardStore struct{ MemStore }

func (*discardStore) PutRange(context.Context, RangeInfo, []byte) error { return nil }
func (*discardStore) Ranges(context.Context) ([]RangeInfo, error)       { return nil, nil }

func TestLogMisuse(t *testing.T) {
	ctx := context.Background()
	l := NewLog(LogOptions{})
	l.Command(1, 1) // outside a tick
	l.Input(CommandInfo{Pos: 1})
	if err := l.EndTick(ctx); !errors.Is(err, ErrNoTick) {
		t.Fatalf("EndTick without BeginTick: %v", err)
	}
	if err := l.BeginTick(ctx, 0, 1); err != nil {
		t.Fatal(err)
	}
	if err := l.BeginTick(ctx, 0, 2); !errors.Is(err, ErrNoTick) {
		t.Fatalf("nested BeginTick: %v", err)
	}
	if err := l.Flush(ctx); !errors.Is(err, ErrNoTick) {
		t.Fatalf("Flush in a tick: %v", err)
	}
	l.Input(CommandInfo{Pos: 5})
	l.Input(CommandInfo{Pos: 5})
	if err := l.EndTick(ctx); !errors.Is(err, ErrInvalidRange) {
		t.Fatalf("inputs out of order: %v", err)
	}
	if st := l.Stats(); st.Dropped != 3 {
		t.Fatalf("dropped %d, want 3 (event and input outside a tick, repeated input)", st.Dropped)
	}
	// The next tick is clean.
	if err := l.BeginTick(ctx, 0, 2); err != nil {
		t.Fatal(err)
	}
	if err := l.EndTick(ctx); err != nil {
		t.Fatalf("clean tick: %v", err)
	}
}

func TestLogReexecutesAndResumes(t *testing.T) { bothModes(t, testLogReexecutesAndResumes) }

func testLogReexecutesAndResumes(t *testing.T, bg bool) *Log {
	ctx := context.Background()
	store := NewMemStore()
	l := NewLog(LogOptions{RangeTicks: 64, Store: store, Background: bg})
	var pos uint64
	for tick := uint64(1); tick <= 100; tick++ {
		recordTick(t, l, 3, tick, &pos)
	}
	// Going back within the window: ticks 90.. are recorded again.
	pos90 := uint64(0)
	expected(3, 1, 89, &pos90)
	pos = pos90
	for tick := uint64(90); tick <= 100; tick++ {
		recordTick(t, l, 3, tick, &pos)
	}
	if err := l.Flush(ctx); err != nil { // as when a snapshot is taken
		t.Fatal(err)
	}
	// A new process recovers from a snapshot at tick 80: it re-executes
	// from 81 with a new Log over the same store.
	if err := l.Close(ctx); err != nil { // the process dies
		t.Fatal(err)
	}
	l2 := NewLog(LogOptions{RangeTicks: 64, Store: store, Background: bg})
	pos80 := uint64(0)
	expected(3, 1, 80, &pos80)
	pos = pos80
	for tick := uint64(81); tick <= 130; tick++ {
		recordTick(t, l2, 3, tick, &pos)
	}
	if err := l2.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	var q uint64
	want := []*Range{expected(3, 1, 63, &q), expected(3, 64, 127, &q), expected(3, 128, 130, &q)}
	got := storedRanges(t, store)
	if len(got) != len(want) {
		t.Fatalf("%d ranges, want %d", len(got), len(want))
	}
	for i := range want {
		if !sameRange(got[i], want[i]) {
			t.Fatalf("range %d (ticks %d..%d) differs", i, want[i].FirstTick, want[i].LastTick())
		}
	}
	// Going back before the buffer reloads the window from the store.
	q = 0
	expected(3, 1, 69, &q)
	pos = q
	for tick := uint64(70); tick <= 127; tick++ {
		recordTick(t, l2, 3, tick, &pos)
	}
	if err := l2.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := storedRanges(t, store); !sameRange(got[1], want[1]) {
		t.Fatal("re-executed window differs")
	}
	return l2
}

// TestLogResumePastTheStoredRange: a new Log whose first tick is past the
// end of its window's stored range (the ticks between never recorded, or
// an older version of the range read back) leaves those ticks missing: the
// stored range is kept as it is, and the new ticks go to a range of their
// own, never padded with empty ticks that would claim no command
// explains them.
func TestLogResumePastTheStoredRange(t *testing.T) { bothModes(t, testLogResumePastTheStoredRange) }

func testLogResumePastTheStoredRange(t *testing.T, bg bool) *Log {
	ctx := context.Background()
	store := NewMemStore()
	l := NewLog(LogOptions{RangeTicks: 64, Store: store, Background: bg})
	var pos uint64
	for tick := uint64(1); tick <= 70; tick++ {
		recordTick(t, l, 3, tick, &pos)
	}
	if err := l.Flush(ctx); err != nil { // the partial range 64..70
		t.Fatal(err)
	}
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	l2 := NewLog(LogOptions{RangeTicks: 64, Store: store, Background: bg})
	var q uint64
	expected(3, 1, 79, &q)
	pos = q
	for tick := uint64(80); tick <= 90; tick++ { // 71..79 never recorded
		recordTick(t, l2, 3, tick, &pos)
	}
	if err := l2.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	q = 0
	want := []*Range{expected(3, 1, 63, &q), expected(3, 64, 70, &q)}
	expected(3, 71, 79, &q)
	want = append(want, expected(3, 80, 90, &q))
	got := storedRanges(t, store)
	if len(got) != len(want) {
		t.Fatalf("%d ranges, want %d (1..63, 64..70, 80..90)", len(got), len(want))
	}
	for i := range want {
		if !sameRange(got[i], want[i]) {
			t.Fatalf("range %d: ticks %d..%d, want %d..%d as recorded", i, got[i].FirstTick, got[i].LastTick(), want[i].FirstTick, want[i].LastTick())
		}
	}
	return l2
}

func TestLogGapsAndRetention(t *testing.T) { bothModes(t, testLogGapsAndRetention) }

func testLogGapsAndRetention(t *testing.T, bg bool) *Log {
	ctx := context.Background()
	store := NewMemStore()
	l := NewLog(LogOptions{RangeTicks: 16, Store: store, RetainTicks: 64, Background: bg})
	var pos uint64
	for _, tick := range []uint64{1, 2, 5} { // 3 and 4 are empty ticks
		recordTick(t, l, 0, tick, &pos)
	}
	recordTick(t, l, 0, 40, &pos) // skips to another window: 0..15 is sealed
	if err := l.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	got := storedRanges(t, store)
	if len(got) != 2 || got[0].FirstTick != 1 || got[0].Ticks() != 5 || got[1].FirstTick != 40 || got[1].Ticks() != 1 {
		t.Fatalf("ranges %+v", got)
	}
	if len(got[0].TickInputs(2)) != 0 || len(got[0].TickEvents(3)) != 0 {
		t.Fatal("padded ticks are not empty")
	}
	for tick := uint64(41); tick <= 200; tick++ {
		recordTick(t, l, 0, tick, &pos)
	}
	if err := l.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	infos, _ := store.Ranges(ctx)
	if infos[0].FirstTick < 200-64-16 || infos[0].FirstTick > 200-64 {
		t.Fatalf("retention kept from tick %d (of 200, retaining 64)", infos[0].FirstTick)
	}
	if h, _ := Horizon(ctx, store); h != infos[0].FirstTick {
		t.Fatalf("horizon %d, first kept %d", h, infos[0].FirstTick)
	}
	return l
}

// failingStore fails every PutRange.
type failingStore struct{ MemStore }

var errDiskFull = errors.New("disk full")

func (*failingStore) PutRange(context.Context, RangeInfo, []byte) error { return errDiskFull }
func (*failingStore) Ranges(context.Context) ([]RangeInfo, error)       { return nil, nil }

func TestLogReportsStoreErrors(t *testing.T) {
	bothModes(t, func(t *testing.T, bg bool) *Log {
		ctx := context.Background()
		l := NewLog(LogOptions{RangeTicks: 8, Store: &failingStore{}, Background: bg})
		t.Cleanup(func() { _ = l.Close(ctx) }) // stops the goroutine if the test fails
		var pos uint64
		var got error
		for tick := uint64(0); tick < 40 && got == nil; tick++ {
			if err := l.BeginTick(ctx, 0, tick); err != nil {
				t.Fatal(err)
			}
			l.Command(1, pos)
			got = l.EndTick(ctx)
			pos++
		}
		if got == nil {
			got = l.Flush(ctx)
		}
		if !errors.Is(got, errDiskFull) {
			t.Fatalf("store error not reported: %v", got)
		}
		// The Log still closes (and stops its goroutine); the partial
		// range it flushes fails too. (In the background, the next
		// range's failure may surface at this EndTick already.)
		if err := l.BeginTick(ctx, 0, 100); err != nil {
			t.Fatal(err)
		}
		l.Command(1, pos)
		if err := l.EndTick(ctx); err != nil && !errors.Is(err, errDiskFull) {
			t.Fatal(err)
		}
		if err := l.Close(ctx); !errors.Is(err, errDiskFull) {
			t.Fatalf("close: %v, want the store's error again (the partial range)", err)
		}
		return NewLog(LogOptions{Background: bg})
	})
}

func TestLogClosed(t *testing.T) {
	ctx := context.Background()
	l := NewLog(LogOptions{Background: true})
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.BeginTick(ctx, 0, 1); !errors.Is(err, ErrLogClosed) {
		t.Fatalf("BeginTick after Close: %v", err)
	}
	if err := l.Close(ctx); !errors.Is(err, ErrLogClosed) {
		t.Fatalf("second Close: %v", err)
	}
	goleak.VerifyNone(t)
}
