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
