package table

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"testing"
)

func le32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }

func crcOf(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// FuzzDecodeCapture feeds arbitrary bytes to both capture decoders, as they
// are and with their trailing checksum corrected. A decoder must never
// panic; whatever it accepts must re-encode to the same
// bytes (the encoding is canonical) and must be safe to restore from. The
// seed corpus (testdata/fuzz/FuzzDecodeCapture) holds valid table and set
// captures, full and delta.
func FuzzDecodeCapture(f *testing.F) {
	tb, _ := New(9, 10, Options{RecordsPerPage: 4})
	for i := 0; i < 6; i++ {
		tb.Alloc()
		tb.Mut(i).SetU16(2, uint16(i))
	}
	full := tb.CaptureFull()
	tb.Mut(5).SetU8(0, 1)
	delta := tb.Capture()
	for _, c := range []*Capture{full, delta} {
		b, _ := c.MarshalBinary()
		f.Add(b)
	}
	set, _ := NewSet(tb)
	sc, _ := set.CaptureFull().MarshalBinary()
	f.Add(sc)

	f.Fuzz(func(t *testing.T, data []byte) {
		checkDecode(t, data)
		// Most mutations only break the checksum: also decode the input
		// with a correct checksum, to reach the structural checks.
		if len(data) >= 4 {
			resealed := append(data[:len(data)-4:len(data)-4], le32(crcOf(data[:len(data)-4]))...)
			checkDecode(t, resealed)
		}
	})
}

// checkDecode decodes data as a table capture and as a set capture.
func checkDecode(t *testing.T, data []byte) {
	var c Capture
	if err := c.UnmarshalBinary(data); err == nil {
		again, err := c.MarshalBinary()
		if err != nil {
			t.Fatalf("decoded capture does not encode: %v", err)
		}
		if !bytes.Equal(again, data) {
			t.Fatal("re-encoding differs from the input")
		}
		if c.Full {
			r, err := New(c.TableID, int(c.RecordSize), Options{RecordsPerPage: int(c.RecordsPerPage), Policy: c.Policy})
			if err != nil {
				t.Fatalf("decoded capture has an impossible shape: %v", err)
			}
			if r.Restore(&c) == nil && r.Hash() != c.Hash {
				t.Fatal("restored table does not have the capture's hash")
			}
		}
	}
	var s SetCapture
	if err := s.UnmarshalBinary(data); err == nil {
		again, err := s.MarshalBinary()
		if err != nil {
			t.Fatalf("decoded set capture does not encode: %v", err)
		}
		if !bytes.Equal(again, data) {
			t.Fatal("set re-encoding differs from the input")
		}
	}
}

// FuzzDecodeFieldSums: recorded field sums decode or fail, never panic,
// and what decodes re-encodes the same.
func FuzzDecodeFieldSums(f *testing.F) {
	var s FieldSums
	f.Add(s.AppendBinary(nil))
	f.Add(make([]byte, FieldSumsSize+1))
	f.Fuzz(func(t *testing.T, b []byte) {
		fs, err := DecodeFieldSums(b)
		if err == nil && string(fs.AppendBinary(nil)) != string(b) {
			t.Fatal("field sums re-encode differently")
		}
	})
}
