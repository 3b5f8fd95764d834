package natsworld

import (
	"bytes"
	"encoding/binary"
	"slices"
	"testing"
)

func TestSectorFrameRoundTrip(t *testing.T) {
	f := SectorFrame{World: 3, Sector: 2, Epoch: 99, Tick: 1234, Pos: 56789, Hash: 0xdeadbeefcafe, Published: 17,
		Applied: []Applied{{Player: 7, Seq: 1}, {Player: 9, Seq: 1 << 40}}, Payload: []byte("state")}
	got, err := DecodeSectorFrame(AppendSectorFrame(nil, f))
	if err != nil || got.World != f.World || got.Sector != f.Sector || got.Epoch != f.Epoch || got.Tick != f.Tick ||
		got.Pos != f.Pos || got.Hash != f.Hash || got.Published != f.Published || !slices.Equal(got.Applied, f.Applied) || !bytes.Equal(got.Payload, f.Payload) {
		t.Fatalf("round trip of %+v: %+v, %v", f, got, err)
	}
	b := AppendSectorFrame(nil, f)
	for _, bad := range [][]byte{nil, b[:frameHeader-1], append([]byte("XSSF"), b[4:]...), make([]byte, MaxSectorFrame+1),
		binary.BigEndian.AppendUint32(b[:frameHeader-4:frameHeader-4], 1)} {
		if _, err := DecodeSectorFrame(bad); err == nil {
			t.Fatalf("decoded %d bad bytes", len(bad))
		}
	}
	if SectorSubject(1, 3) != "world.1.sector.3" || SectorsSubject(1) != "world.1.sector.*" {
		t.Fatal(SectorSubject(1, 3), SectorsSubject(1))
	}
}

func FuzzDecodeSectorFrame(f *testing.F) {
	f.Add(AppendSectorFrame(nil, SectorFrame{World: 1, Sector: 2, Epoch: 3, Tick: 4, Pos: 5, Hash: 6}))
	f.Add(AppendSectorFrame(nil, SectorFrame{World: 1, Payload: []byte{1, 2, 3}}))
	f.Add(AppendSectorFrame(nil, SectorFrame{World: 1, Applied: []Applied{{Player: 1, Seq: 2}}, Payload: []byte{9}}))
	f.Add([]byte("BSSF"))
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := DecodeSectorFrame(b)
		if err != nil {
			return
		}
		again, err := DecodeSectorFrame(AppendSectorFrame(nil, fr))
		if err != nil || again.Hash != fr.Hash || again.Tick != fr.Tick || !slices.Equal(again.Applied, fr.Applied) || !bytes.Equal(again.Payload, fr.Payload) {
			t.Fatalf("round trip of %+v: %+v, %v", fr, again, err)
		}
	})
}

func FuzzDecodeTakeoverReport(f *testing.F) {
	f.Add([]byte(`{"world":1,"sector":2,"epoch":3,"worker":"w1","acquired":1,"restored":2,"live":3}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeTakeoverReport(b)
		if err != nil {
			return
		}
		if r.World == 0 || !validWorker.MatchString(r.Worker) {
			t.Fatalf("accepted %+v", r)
		}
	})
}
