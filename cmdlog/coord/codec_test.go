package coord_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"pgregory.net/rapid"

	"github.com/anoptic/broadside/cmdlog/coord"
	"github.com/anoptic/broadside/cmdlog/coord/coordtest"
	"github.com/anoptic/broadside/cmdlog/msg"
)

var writeCorpus = flag.Bool("write-corpus", false, "rewrite testdata/fuzz/FuzzDecodeViewRecord from the seeds")

// withCRC appends the checksum coord.DecodeViewRecord expects to body.
func withCRC(body []byte) []byte {
	return binary.LittleEndian.AppendUint32(append([]byte(nil), body...), crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli)))
}

type recordSeed struct {
	name string
	b    []byte
}

func recordSeeds() []recordSeed {
	valid := coord.EncodeViewRecord(coordtest.SampleRecord(2))
	flipped := append([]byte(nil), valid...)
	flipped[3] ^= 4
	return []recordSeed{
		{"valid-change", valid},
		{"valid-active", coord.EncodeViewRecord(coordtest.SampleRecord(3))},
		{"valid-empty", coord.EncodeViewRecord(msg.ViewRecord{})},
		{"valid-max", coord.EncodeViewRecord(msg.ViewRecord{
			Number: math.MaxUint64, Members: []msg.NodeID{math.MaxUint32}, Leader: math.MaxUint32, StartGP: math.MaxUint64,
			Dedup:  []msg.ClientMark{{Client: math.MaxUint64, Mark: math.MaxUint64, Above: []uint64{0, math.MaxUint64, 1}}},
			Change: &msg.ViewChange{Epoch: math.MaxUint64, Flusher: msg.Coordinator},
		})},
		{"flipped-bit", flipped},
		{"empty", nil},
		{"truncated", valid[:len(valid)/2]},
		{"bad-version", withCRC([]byte{3, 0, 0, 0, 0, 0, 0})},
		// A version 1 record (before dedup leases): a mark without View.
		{"valid-v1", withCRC([]byte{1, 7, 1, 1, 1, 9, 1, 5, 4, 2, 2, 4, 0})},
		{"truncated-v2-mark", withCRC([]byte{2, 7, 1, 1, 1, 9, 1, 5, 4, 2, 2, 4, 0})},
		{"huge-count", withCRC([]byte{1, 0, 0xff, 0xff, 0xff, 0xff, 0x0f})},
		{"node-overflow", withCRC([]byte{1, 0, 1, 0x80, 0x80, 0x80, 0x80, 0x10, 0, 0, 0, 0})},
		{"overlong-varint", withCRC([]byte{1, 0x80, 0x00, 0, 0, 0, 0, 0})},
		{"bad-change-flag", withCRC([]byte{1, 0, 0, 0, 0, 0, 2})},
		{"trailing", withCRC([]byte{1, 0, 0, 0, 0, 0, 0, 9})},
	}
}

func TestViewRecordSeeds(t *testing.T) {
	for _, s := range recordSeeds() {
		_, err := coord.DecodeViewRecord(s.b)
		wantOK := len(s.name) > 5 && s.name[:5] == "valid"
		if wantOK != (err == nil) {
			t.Errorf("%s: decode error %v", s.name, err)
		}
		if err != nil && !errors.Is(err, coord.ErrBadRecord) {
			t.Errorf("%s: error %v does not wrap coord.ErrBadRecord", s.name, err)
		}
	}
}

func TestViewRecordRoundTrip(t *testing.T) {
	genNodes := rapid.SliceOfN(rapid.Custom(func(t *rapid.T) msg.NodeID { return msg.NodeID(rapid.Uint32().Draw(t, "id")) }), 0, 6)
	genRecord := rapid.Custom(func(t *rapid.T) msg.ViewRecord {
		rec := msg.ViewRecord{
			Number:  rapid.Uint64().Draw(t, "number"),
			Members: genNodes.Draw(t, "members"),
			Leader:  msg.NodeID(rapid.Uint32().Draw(t, "leader")),
			StartGP: rapid.Uint64().Draw(t, "startGP"),
			Dedup: rapid.SliceOfN(rapid.Custom(func(t *rapid.T) msg.ClientMark {
				return msg.ClientMark{
					Client: rapid.Uint64().Draw(t, "client"),
					Mark:   rapid.Uint64().Draw(t, "mark"),
					Above:  rapid.SliceOfN(rapid.Uint64(), 0, 8).Draw(t, "above"),
					View:   rapid.Uint64().Draw(t, "lease"),
				}
			}), 0, 5).Draw(t, "dedup"),
		}
		if rapid.Bool().Draw(t, "change") {
			rec.Change = &msg.ViewChange{
				Epoch:      rapid.Uint64().Draw(t, "epoch"),
				Flusher:    msg.NodeID(rapid.Uint32().Draw(t, "flusher")),
				NewMembers: genNodes.Draw(t, "newMembers"),
			}
		}
		return rec
	})
	rapid.Check(t, func(t *rapid.T) {
		rec := genRecord.Draw(t, "rec")
		b := coord.EncodeViewRecord(rec)
		got, err := coord.DecodeViewRecord(b)
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		if !equalRecords(got, rec) {
			t.Fatalf("round trip: got %+v, want %+v", got, rec)
		}
		if !equalRecords(rec.Clone(), rec) {
			t.Fatalf("Clone changed the record")
		}
	})
}

// equalRecords compares field by field, nil and empty slices alike.
func equalRecords(a, b msg.ViewRecord) bool {
	eqNodes := func(x, y []msg.NodeID) bool {
		if len(x) != len(y) {
			return false
		}
		for i := range x {
			if x[i] != y[i] {
				return false
			}
		}
		return true
	}
	if a.Number != b.Number || a.Leader != b.Leader || a.StartGP != b.StartGP ||
		!eqNodes(a.Members, b.Members) || len(a.Dedup) != len(b.Dedup) || (a.Change == nil) != (b.Change == nil) {
		return false
	}
	for i := range a.Dedup {
		x, y := a.Dedup[i], b.Dedup[i]
		if x.Client != y.Client || x.Mark != y.Mark || x.View != y.View || len(x.Above) != len(y.Above) {
			return false
		}
		for j := range x.Above {
			if x.Above[j] != y.Above[j] {
				return false
			}
		}
	}
	if a.Change != nil {
		x, y := a.Change, b.Change
		return x.Epoch == y.Epoch && x.Flusher == y.Flusher && eqNodes(x.NewMembers, y.NewMembers)
	}
	return true
}

// FuzzDecodeViewRecord decodes arbitrary bytes, as they are and with a valid
// checksum appended (so the parser behind the checksum is explored). It must
// never panic, must fail only with coord.ErrBadRecord, and a decoded record must
// re-encode to the same bytes.
func FuzzDecodeViewRecord(f *testing.F) {
	for _, s := range recordSeeds() {
		f.Add(s.b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, in := range [][]byte{b, withCRC(b)} {
			rec, err := coord.DecodeViewRecord(in)
			if err != nil {
				if !errors.Is(err, coord.ErrBadRecord) {
					t.Fatalf("error %v does not wrap coord.ErrBadRecord", err)
				}
				continue
			}
			re := coord.EncodeViewRecord(rec)
			if in[0] == 1 {
				// Version 1 re-encodes as version 2, to the same record.
				again, err := coord.DecodeViewRecord(re)
				if err != nil || re[0] != 2 || !equalRecords(again, rec) {
					t.Fatalf("re-encoding version 1 %x gives %x (%v)", in, re, err)
				}
				continue
			}
			if !bytes.Equal(re, in) {
				t.Fatalf("re-encoding %x gives %x", in, re)
			}
		}
	})
}

// TestWriteFuzzCorpus rewrites the committed seed corpus when run with
// -write-corpus (go test -run TestWriteFuzzCorpus ./cmdlog/coord -args -write-corpus).
func TestWriteFuzzCorpus(t *testing.T) {
	if !*writeCorpus {
		t.Skip("run with -write-corpus to rewrite testdata/fuzz/FuzzDecodeViewRecord")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzDecodeViewRecord")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, s := range recordSeeds() {
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%s)\n", strconv.Quote(string(s.b)))
		if err := os.WriteFile(filepath.Join(dir, s.name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
