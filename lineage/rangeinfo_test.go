//go:build !js

package lineage

import (
	"errors"
	"testing"
)

func TestRangeInfoRoundTrip(t *testing.T) {
	info := RangeInfo{Shard: 2, FirstTick: 128, LastTick: 255, FirstPos: 1000, LastPos: 1127, Inputs: 128, Events: 130, Bytes: 4000}
	b := EncodeRangeInfo(info)
	got, err := DecodeRangeInfo(b)
	if err != nil || got != info {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	for i := range b {
		c := append([]byte(nil), b...)
		c[i] ^= 0x10
		if _, err := DecodeRangeInfo(c); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("byte %d flipped: %v", i, err)
		}
	}
}

// FuzzDecodeRangeInfo: a range description from a shared store decodes
// to what was encoded, or fails with ErrCorrupt; never a panic.
func FuzzDecodeRangeInfo(f *testing.F) {
	f.Add(EncodeRangeInfo(RangeInfo{Shard: 2, FirstTick: 128, LastTick: 255, FirstPos: 1000, LastPos: 1127, Inputs: 128, Events: 128, Bytes: 4000}))
	f.Add(EncodeRangeInfo(RangeInfo{}))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		info, err := DecodeRangeInfo(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		again, err := DecodeRangeInfo(EncodeRangeInfo(info))
		if err != nil || again != info {
			t.Fatalf("round trip: %+v -> %+v, %v", info, again, err)
		}
	})
}
