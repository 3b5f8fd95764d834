package lineage

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"
)

func appendUvarint(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }

func appendCRC(b []byte) []byte {
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// fuzzSeedRanges are the valid ranges of the seed corpus
// (testdata/fuzz/FuzzDecodeRange holds their encodings and some damaged
// ones).
func fuzzSeedRanges() []*Range {
	return []*Range{
		{Shard: 0, FirstTick: 0},
		{Shard: 3, FirstTick: 128, InputEnds: []int{0, 0}, EventEnds: []int{0, 0}},
		{
			Shard: 1, FirstTick: 256,
			InputEnds: []int{2, 3, 3},
			EventEnds: []int{3, 12, 14},
			Inputs: []CommandInfo{
				{Pos: 1000, Tick: 256, Player: 7, Kind: 4},
				{Pos: 1001, Tick: 256, Player: 9, Kind: 2},
				{Pos: 1005, Tick: 257, Player: 0, Kind: 0},
			},
			Events: []Event{
				CommandEvent(1<<56|7, 1000), CommandEvent(1<<56|9, 1001), CommandEvent(1<<56|9, 990),
				CommandEvent(1<<56|3, 1005),
				DerivedEvent(2<<56|1<<48|40, 1<<56|7), DerivedEvent(2<<56|1<<48|41, 1<<56|7),
				DerivedEvent(2<<56|1<<48|42, 1<<56|7), DerivedEvent(2<<56|1<<48|43, 1<<56|7),
				DerivedEvent(2<<56|1<<48|44, 1<<56|7), DerivedEvent(2<<56|1<<48|45, 1<<56|7),
				DerivedEvent(2<<56|1<<48|46, 1<<56|7), DerivedEvent(2<<56|1<<48|47, 1<<56|7),
				DerivedEvent(1<<56|9, 2<<56|1<<48|12),
				DerivedEvent(1<<56|9, 2<<56|1<<48|13),
			},
		},
	}
}

// FuzzDecodeRange feeds arbitrary bytes to DecodeRange, as they are and
// with their trailing checksum corrected (most mutations only break the
// checksum; resealing reaches the structural checks). The decoder must
// never panic; what it accepts must describe a valid Range that encodes
// and decodes back to itself, and its header must agree.
func FuzzDecodeRange(f *testing.F) {
	for _, r := range fuzzSeedRanges() {
		b, err := EncodeRange(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkDecodeRange(t, data)
		if len(data) >= 4 {
			checkDecodeRange(t, appendCRC(data[:len(data)-4:len(data)-4]))
		}
	})
}

func checkDecodeRange(t *testing.T, data []byte) {
	var r Range
	err := DecodeRange(data, &r)
	h, herr := DecodeRangeHeader(data)
	if err != nil {
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("error does not wrap ErrCorrupt: %v", err)
		}
		return
	}
	if herr != nil || h.Shard != r.Shard || h.FirstTick != r.FirstTick || h.Ticks != r.Ticks() || h.Inputs != len(r.Inputs) || h.Events != len(r.Events) {
		t.Fatalf("header %+v (%v) disagrees with the range", h, herr)
	}
	again, err := EncodeRange(&r)
	if err != nil {
		t.Fatalf("decoded range does not encode: %v", err)
	}
	var back Range
	if err := DecodeRange(again, &back); err != nil || !sameRange(&r, &back) {
		t.Fatalf("re-encoded range does not decode to itself: %v", err)
	}
	// Queries over whatever was accepted must not fail or panic either.
	ix, err := BuildIndex([]*Range{&r}, nil, 0)
	if err != nil {
		return // e.g. more events in a tick than an index holds
	}
	for k, ev := range r.Events {
		if k == 16 {
			break // a few queries suffice; all would be quadratic
		}
		_, _ = ix.Why(AnyShard, ev.Entity, r.LastTick(), Unlimited)
		if ev.Kind == EventCommand {
			_, _ = ix.Affected(ev.Arg, 0)
		}
	}
	if r.Ticks() > 0 {
		_, _ = ix.Frame(r.FirstTick)
	}
}
