// Package wiretest helps test decoders of FlatBuffers bytes from outside:
// it derives malformed buffers from valid ones (for table tests and fuzz
// seeds) and writes Go fuzz seed corpora. It is used by tests only.
package wiretest

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Mutations returns deterministic malformed variants of the valid buffer b,
// each a fresh copy, covering the classic attacks on FlatBuffers readers
// without knowing the schema:
//   - truncations to every length below len(b);
//   - every 4-aligned 32-bit word (root and field offsets, vtable soffsets,
//     vector lengths) replaced by 0 (self-reference / empty), 1, len(b)
//     (just out of bounds), 0x7FFFFFFF, 0xFFFFFFFF (huge vector lengths,
//     far offsets, negative soffsets) and 0x80000000;
//   - every 2-aligned 16-bit word (vtable sizes and field offsets) replaced
//     by 0, 3 (odd), 0x7FFF and 0xFFFF;
//   - every byte (union types, enums, bools, file identifier) XORed with
//     0xFF.
func Mutations(b []byte) [][]byte {
	var out [][]byte
	mutate := func(f func(c []byte)) {
		c := append([]byte(nil), b...)
		f(c)
		out = append(out, c)
	}
	for n := 0; n < len(b); n++ {
		out = append(out, append([]byte(nil), b[:n]...))
	}
	words := []uint32{0, 1, uint32(len(b)), 0x7FFFFFFF, 0xFFFFFFFF, 0x80000000}
	for p := 0; p+4 <= len(b); p += 4 {
		for _, w := range words {
			mutate(func(c []byte) { binary.LittleEndian.PutUint32(c[p:], w) })
		}
	}
	halves := []uint16{0, 3, 0x7FFF, 0xFFFF}
	for p := 0; p+2 <= len(b); p += 2 {
		for _, h := range halves {
			mutate(func(c []byte) { binary.LittleEndian.PutUint16(c[p:], h) })
		}
	}
	for p := range b {
		mutate(func(c []byte) { c[p] ^= 0xFF })
	}
	return out
}

// Flip returns a copy of b with n random bytes replaced by random values.
func Flip(rng *rand.Rand, b []byte, n int) []byte {
	c := append([]byte(nil), b...)
	if len(c) == 0 {
		return c
	}
	for range n {
		c[rng.IntN(len(c))] = byte(rng.UintN(256))
	}
	return c
}

var digits = regexp.MustCompile(`[0-9]+`)

// DistinctErrors returns one input per distinct key(error) that check
// reports, plus the first maxAccepted inputs check accepts. It picks small,
// diverse fuzz seeds from a large set of mutations.
func DistinctErrors(inputs [][]byte, check func([]byte) error, key func(error) string, maxAccepted int) [][]byte {
	seen := map[string]bool{}
	var out [][]byte
	accepted := 0
	for _, in := range inputs {
		err := check(in)
		if err == nil {
			if accepted < maxAccepted {
				accepted++
				out = append(out, in)
			}
			continue
		}
		k := key(err)
		if !seen[k] {
			seen[k] = true
			out = append(out, in)
		}
	}
	return out
}

// TableFault reduces a verifier error such as "wire: Frame: field 1:
// Append: field 1: element 3: Record: field 1: vector of 9 elements ...:
// malformed flatbuffer" to the table holding the fault and the fault,
// numbers removed: "Record|vector of N elements ...".
func TableFault(err error) string {
	segs := strings.Split(digits.ReplaceAllString(err.Error(), "N"), ": ")
	detail := segs[len(segs)-1]
	if len(segs) >= 2 {
		detail = segs[len(segs)-2]
	}
	table := ""
	for i, s := range segs {
		if s == "field N" && i > 0 {
			table = segs[i-1]
		}
	}
	return table + "|" + detail
}

// Fault reduces a verifier error to its fault, numbers removed: "vector of
// N elements ...".
func Fault(err error) string {
	k := TableFault(err)
	return k[strings.Index(k, "|")+1:]
}

// CorpusEnv is the environment variable that makes MaybeWriteCorpus write.
const CorpusEnv = "BROADSIDE_WRITE_CORPUS"

// MaybeWriteCorpus writes seeds as testdata/fuzz/<fuzzName>/seed-NNN files
// in the Go fuzzing corpus format when the environment variable CorpusEnv is
// 1, replacing earlier seed-* files (files the fuzzer added are kept). It
// returns whether it wrote.
func MaybeWriteCorpus(t testing.TB, fuzzName string, seeds [][]byte) bool {
	t.Helper()
	if os.Getenv(CorpusEnv) != "1" {
		return false
	}
	dir := filepath.Join("testdata", "fuzz", fuzzName)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	old, err := filepath.Glob(filepath.Join(dir, "seed-*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range old {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	for i, s := range seeds {
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", s)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%03d", i)), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("wrote %d seeds to %s", len(seeds), dir)
	return true
}
