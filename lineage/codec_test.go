package lineage

import (
	"errors"
	"math"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// genRange draws a valid Range: up to 24 ticks, positions anywhere in the
// uint64 space (strictly increasing), entities from a pool mixing small
// and huge ids, both event kinds.
func genRange(t *rapid.T) *Range {
	r := &Range{
		Shard:     ShardID(rapid.Uint32().Draw(t, "shard")),
		FirstTick: rapid.OneOf(rapid.Uint64Range(0, 1000), rapid.Uint64Range(math.MaxUint64-100, math.MaxUint64-30)).Draw(t, "first"),
	}
	ticks := rapid.IntRange(0, 24).Draw(t, "ticks")
	pool := rapid.SliceOfN(rapid.OneOf(rapid.Uint64Range(1, 50), rapid.Uint64Range(1<<56, 1<<56+50), rapid.Uint64Range(math.MaxUint64-5, math.MaxUint64)), 1, 12).Draw(t, "pool")
	pos := rapid.OneOf(rapid.Uint64Range(0, 10), rapid.Uint64Range(math.MaxUint64/2, math.MaxUint64/2+10)).Draw(t, "pos0")
	for i := 0; i < ticks; i++ {
		tick := r.FirstTick + uint64(i)
		for n := rapid.IntRange(0, 5).Draw(t, "inputs"); n > 0; n-- {
			r.Inputs = append(r.Inputs, CommandInfo{Pos: pos, Tick: tick, Player: rapid.Uint32().Draw(t, "player"), Kind: rapid.Uint8().Draw(t, "kind")})
			pos += rapid.Uint64Range(1, 1000).Draw(t, "step")
		}
		r.InputEnds = append(r.InputEnds, len(r.Inputs))
		for n := rapid.IntRange(0, 10).Draw(t, "events"); n > 0; n-- {
			e := EntityID(rapid.SampledFrom(pool).Draw(t, "entity"))
			if rapid.Bool().Draw(t, "derived") {
				r.Events = append(r.Events, DerivedEvent(e, EntityID(rapid.SampledFrom(pool).Draw(t, "from"))))
			} else {
				r.Events = append(r.Events, CommandEvent(e, rapid.Uint64().Draw(t, "cmdpos")))
			}
		}
		r.EventEnds = append(r.EventEnds, len(r.Events))
	}
	return r
}

// sameRange compares ranges ignoring nil versus empty slices.
func sameRange(a, b *Range) bool {
	return a.Shard == b.Shard && a.FirstTick == b.FirstTick &&
		slices.Equal(a.InputEnds, b.InputEnds) && slices.Equal(a.EventEnds, b.EventEnds) &&
		slices.Equal(a.Inputs, b.Inputs) && slices.Equal(a.Events, b.Events)
}

func TestRangeRoundTrip(t *testing.T) {
	var reused Range
	rapid.Check(t, func(t *rapid.T) {
		r := genRange(t)
		b, err := EncodeRange(r)
		if err != nil {
			t.Fatalf("encode: %v", err)
		}
		var got Range
		if err := DecodeRange(b, &got); err != nil {
			t.Fatalf("decode: %v", err)
		}
		if !sameRange(r, &got) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, *r)
		}
		// Decoding into a Range that holds an earlier, larger range.
		if err := DecodeRange(b, &reused); err != nil || !sameRange(r, &reused) {
			t.Fatalf("decode into a used range: %v", err)
		}
		h, err := DecodeRangeHeader(b)
		if err != nil || h.Shard != r.Shard || h.FirstTick != r.FirstTick || h.Ticks != r.Ticks() || h.Inputs != len(r.Inputs) || h.Events != len(r.Events) {
			t.Fatalf("header %+v, %v", h, err)
		}
		// Any truncation or single-byte change is detected.
		cut := rapid.IntRange(0, len(b)-1).Draw(t, "cut")
		if err := DecodeRange(b[:cut], &got); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncated to %d of %d bytes: %v", cut, len(b), err)
		}
		flip := slices.Clone(b)
		flip[rapid.IntRange(0, len(b)-1).Draw(t, "at")] ^= byte(rapid.IntRange(1, 255).Draw(t, "xor"))
		if err := DecodeRange(flip, &got); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("flipped byte accepted: %v", err)
		}
	})
}

func TestEncodeRejectsInvalidRanges(t *testing.T) {
	valid := func() *Range {
		return &Range{
			Shard: 1, FirstTick: 10,
			InputEnds: []int{1, 2}, EventEnds: []int{1, 2},
			Inputs: []CommandInfo{{Pos: 5, Tick: 10, Player: 1}, {Pos: 6, Tick: 11, Player: 2}},
			Events: []Event{CommandEvent(1, 5), DerivedEvent(2, 1)},
		}
	}
	if _, err := EncodeRange(valid()); err != nil {
		t.Fatalf("valid range: %v", err)
	}
	for name, mutate := range map[string]func(r *Range){
		"entity 0":          func(r *Range) { r.Events[0].Entity = 0 },
		"derived from 0":    func(r *Range) { r.Events[1].Arg = 0 },
		"bad kind":          func(r *Range) { r.Events[0].Kind = 7 },
		"positions repeat":  func(r *Range) { r.Inputs[1].Pos = 5 },
		"positions go back": func(r *Range) { r.Inputs[1].Pos = 4 },
		"input tick":        func(r *Range) { r.Inputs[1].Tick = 10 },
		"ends mismatch":     func(r *Range) { r.InputEnds = r.InputEnds[:1] },
		"ends short":        func(r *Range) { r.EventEnds[1] = 1 },
		"ends decrease":     func(r *Range) { r.EventEnds[0] = 2; r.EventEnds[1] = 1 },
		"tick overflow":     func(r *Range) { r.FirstTick = math.MaxUint64 },
	} {
		r := valid()
		mutate(r)
		if _, err := EncodeRange(r); !errors.Is(err, ErrInvalidRange) {
			t.Errorf("%s: %v, want ErrInvalidRange", name, err)
		}
	}
}

func TestDecodeRejectsLies(t *testing.T) {
	// A header whose counts the body cannot hold is refused before the
	// body is decompressed or anything is allocated for it.
	r := &Range{Shard: 1, FirstTick: 1, InputEnds: []int{0}, EventEnds: []int{0}}
	b, err := EncodeRange(r)
	if err != nil {
		t.Fatal(err)
	}
	for name, fields := range map[string][]uint64{
		"huge event count": {1, 1, 1, 0, 1 << 40, 2},
		"huge raw length":  {1, 1, 1, 0, 0, 1 << 40},
		"too many ticks":   {1, 1, MaxRangeTicks + 1, 0, 0, 2},
		"shard overflow":   {1 << 33, 1, 1, 0, 0, 2},
	} {
		forged := forgeHeader(b, fields)
		if err := DecodeRange(forged, &Range{}); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// forgeHeader rebuilds an encoding with other header fields and a correct
// checksum, keeping the compressed body of b.
func forgeHeader(b []byte, fields []uint64) []byte {
	c := cursor{b: b[5 : len(b)-4]}
	for range 6 {
		c.uvarint()
	}
	out := append([]byte(nil), b[:5]...)
	for _, f := range fields {
		out = appendUvarint(out, f)
	}
	out = append(out, c.b...)
	return appendCRC(out)
}
