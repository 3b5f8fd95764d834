package broadside

import (
	"slices"
	"testing"
)

// TestSectorPartRoundTrip encodes the sectors of a battle (ships sailing,
// balls flying) and checks that the frame a front end assembles from the
// parts equals the one assembled from the sims.
func TestSectorPartRoundTrip(t *testing.T) {
	cfg := Config{Seed: 8, Width: 3000, Height: 3000, SectorsX: 2, SectorsY: 1, Islands: 4}
	w := newBotWorld(t, cfg, 40, 2, 0)
	sawBalls := false
	for k := 0; k < 120; k++ {
		w.step(t, nil)
		if k%20 != 19 {
			continue
		}
		direct, parts := &liveFrame{Frame: NewFrame(1)}, &liveFrame{Frame: NewFrame(1)}
		for i, s := range w.Sectors() {
			direct.AddShard(uint32(i), s)
			b := EncodeSectorPart(uint32(i), s)
			if len(b) > MaxSectorPart {
				t.Fatalf("part of %d bytes", len(b))
			}
			if err := parts.AddPart(uint32(i), b); err != nil {
				t.Fatal(err)
			}
		}
		direct.Seal(nil)
		parts.Seal(nil)
		if len(direct.Ships) == 0 || !slices.Equal(direct.Ships, parts.Ships) || !slices.Equal(direct.Balls, parts.Balls) {
			t.Fatalf("tick %d: %d ships %d balls from the sims, %d/%d from the parts", k, len(direct.Ships), len(direct.Balls),
				len(parts.Ships), len(parts.Balls))
		}
		sawBalls = sawBalls || len(direct.Balls) > 0
	}
	if !sawBalls {
		t.Fatal("no ball ever in flight: the balls' encoding went untested")
	}
	if EncodeSectorPart(0, nil) != nil {
		t.Fatal("a part of no sector")
	}
	good := EncodeSectorPart(0, w.Sectors()[0])
	for _, bad := range [][]byte{nil, good[:len(good)-1], append(slices.Clone(good), 0), {2, 0, 0, 0, 0, 0, 0, 0, 0},
		{1, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}, make([]byte, MaxSectorPart+1)} {
		if _, _, err := DecodeSectorPart(bad); err == nil {
			t.Fatalf("decoded %d bad bytes", len(bad))
		}
	}
}

func FuzzDecodeSectorPart(f *testing.F) {
	cfg := Config{Seed: 8, Width: 3000, Height: 3000, SectorsX: 2, SectorsY: 1, Islands: 4}
	w := newBotWorld(f, cfg, 6, 2, 0)
	for range 40 {
		w.step(f, nil)
	}
	for i, s := range w.Sectors() {
		f.Add(EncodeSectorPart(uint32(i), s))
	}
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		ships, balls, err := DecodeSectorPart(b)
		if err != nil {
			return
		}
		// What decodes encodes back to the same bytes.
		again := appendPart(nil, ships, balls)
		if string(again) != string(b) {
			t.Fatalf("%d bytes decoded to %d ships %d balls, encoded back to %d bytes", len(b), len(ships), len(balls), len(again))
		}
	})
}
