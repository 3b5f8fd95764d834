package shardstore

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

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/cmdlog/shard"
)

var writeCorpus = flag.Bool("write-corpus", false, "rewrite testdata/fuzz/FuzzDecodeEntry from the seeds")

type entrySeed struct {
	name  string
	pos   uint64
	value []byte
}

func entrySeeds() []entrySeed {
	valid := func(pos, client, seq uint64, data string) []byte {
		return appendEntryValue(nil, msg.Entry{Pos: pos, Record: msg.Record{ID: msg.RecordID{Client: client, Seq: seq}, Data: []byte(data)}})
	}
	withCRC := func(pos uint64, body []byte) []byte {
		v := binary.LittleEndian.AppendUint32(nil, entryChecksum(pos, body))
		return append(v, body...)
	}
	flipped := valid(7, 1, 2, "hello")
	flipped[6] ^= 0x10
	return []entrySeed{
		{"valid", 7, valid(7, 1, 2, "hello")},
		{"valid-empty-data", 1, valid(1, 0, 0, "")},
		{"valid-max", math.MaxUint64, valid(math.MaxUint64, math.MaxUint64, math.MaxUint64, "\x00\xff")},
		{"meta", 0, encodeMeta(shard.Meta{Epoch: 3, StableGP: 1 << 40, Trimmed: 12})},
		{"wrong-pos", 8, valid(7, 1, 2, "hello")},
		{"flipped-bit", 7, flipped},
		{"empty", 0, nil},
		{"short", 0, []byte{1, 2, 3}},
		{"crc-only", 5, withCRC(5, nil)},
		{"truncated-varint", 5, withCRC(5, []byte{0x80})},
		{"overlong-varint", 5, withCRC(5, []byte{0x80, 0x00, 0x01})},
		{"varint-overflow", 5, withCRC(5, bytes.Repeat([]byte{0xff}, 11))},
	}
}

// FuzzDecodeEntry feeds arbitrary bytes to the value decoders (entries and
// meta). Because random bytes almost never carry a valid checksum, each
// input is also decoded with a correct checksum prepended, so the parsers
// behind the checksum are explored too. Decoding must never panic, must fail
// only with ErrCorrupt, and a decoded value must re-encode to the same bytes
// (one encoding per value).
func FuzzDecodeEntry(f *testing.F) {
	for _, s := range entrySeeds() {
		f.Add(s.pos, s.value)
	}
	f.Fuzz(func(t *testing.T, pos uint64, value []byte) {
		checkEntry(t, pos, value)
		checkMeta(t, value)
		// The same bytes as the body of a value with a valid checksum.
		entry := binary.LittleEndian.AppendUint32(nil, entryChecksum(pos, value))
		checkEntry(t, pos, append(entry, value...))
		meta := binary.LittleEndian.AppendUint32(nil, crc32.Checksum(value, castagnoli))
		checkMeta(t, append(meta, value...))
	})
}

func checkEntry(t *testing.T, pos uint64, value []byte) {
	e, err := decodeEntry(pos, value)
	if err != nil {
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("decodeEntry error %v does not wrap ErrCorrupt", err)
		}
		return
	}
	if e.Pos != pos {
		t.Fatalf("decoded pos %d, want %d", e.Pos, pos)
	}
	if e.Record.Data != nil && len(e.Record.Data) == 0 {
		t.Fatalf("empty data decoded as non-nil")
	}
	if re := appendEntryValue(nil, e); !bytes.Equal(re, value) {
		t.Fatalf("re-encoding %x gives %x", value, re)
	}
	if len(value) > 0 { // the decoded data must not alias the input
		for i := range value {
			value[i] ^= 0xff
		}
		if re := appendEntryValue(nil, e); bytes.Equal(re, value) {
			t.Fatalf("decoded entry aliases the input buffer")
		}
	}
}

func checkMeta(t *testing.T, value []byte) {
	m, err := decodeMeta(value)
	if err != nil {
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("decodeMeta error %v does not wrap ErrCorrupt", err)
		}
		return
	}
	if re := encodeMeta(m); !bytes.Equal(re, value) {
		t.Fatalf("re-encoding meta %x gives %x", value, re)
	}
}

func TestEntryChecksum(t *testing.T) {
	for _, pos := range []uint64{0, 1, 0x0102030405060708, math.MaxUint64} {
		for _, body := range [][]byte{nil, []byte("x"), bytes.Repeat([]byte{0xA5}, 1000)} {
			whole := binary.BigEndian.AppendUint64(nil, pos)
			if got, want := entryChecksum(pos, body), crc32.Checksum(append(whole, body...), castagnoli); got != want {
				t.Errorf("entryChecksum(%d, %d bytes) = %08x, want %08x", pos, len(body), got, want)
			}
		}
	}
}

func TestEntryRoundTrip(t *testing.T) {
	for _, s := range entrySeeds() {
		e, err := decodeEntry(s.pos, s.value)
		t.Logf("%s: %v, %v", s.name, e, err)
	}
	for _, e := range []msg.Entry{
		{},
		{Pos: 1, Record: msg.Record{ID: msg.RecordID{Client: 127, Seq: 128}, Data: []byte("x")}},
		{Pos: math.MaxUint64, Record: msg.Record{ID: msg.RecordID{Client: math.MaxUint64, Seq: 1 << 63}, Data: make([]byte, 1000)}},
	} {
		v := appendEntryValue([]byte("prefix"), e)
		got, err := decodeEntry(e.Pos, v[len("prefix"):])
		if err != nil || got.Pos != e.Pos || got.Record.ID != e.Record.ID || !bytes.Equal(got.Record.Data, e.Record.Data) {
			t.Errorf("round trip of %v: %v, %v", e, got, err)
		}
	}
	for _, m := range []shard.Meta{{}, {Epoch: 1, StableGP: 2, Trimmed: 3}, {Epoch: math.MaxUint64, StableGP: math.MaxUint64, Trimmed: math.MaxUint64}} {
		got, err := decodeMeta(encodeMeta(m))
		if err != nil || got != m {
			t.Errorf("meta round trip of %+v: %+v, %v", m, got, err)
		}
	}
	// Every seed meant to be invalid is rejected.
	for _, s := range entrySeeds() {
		_, err := decodeEntry(s.pos, s.value)
		if wantOK := s.name == "valid" || s.name == "valid-empty-data" || s.name == "valid-max"; wantOK != (err == nil) {
			t.Errorf("seed %s: decode error %v", s.name, err)
		}
	}
}

// TestWriteFuzzCorpus rewrites the committed seed corpus when run with
// -write-corpus (go test -run TestWriteFuzzCorpus -write-corpus).
func TestWriteFuzzCorpus(t *testing.T) {
	if !*writeCorpus {
		t.Skip("run with -write-corpus to rewrite testdata/fuzz/FuzzDecodeEntry")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzDecodeEntry")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, s := range entrySeeds() {
		body := fmt.Sprintf("go test fuzz v1\nuint64(%d)\n[]byte(%s)\n", s.pos, strconv.Quote(string(s.value)))
		if err := os.WriteFile(filepath.Join(dir, s.name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
