// Package storagetest is the conformance suite of shard.Storage: every
// implementation (shardstore.Memory, shardstore.Pebble, any future one) runs
// Run and so behaves the same.
package storagetest

import (
	"bytes"
	"fmt"
	"math"
	"testing"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/cmdlog/shard"
)

// Harness creates stores for the suite.
type Harness struct {
	// Open returns a new, empty store. Cleanup is the harness's business
	// (t.Cleanup).
	Open func(t *testing.T) shard.Storage
	// Reopen models a crash and restart: it returns a store holding what s
	// made durable. s is not used afterwards.
	Reopen func(t *testing.T, s shard.Storage) shard.Storage
}

// State is the whole content of a store.
type State struct {
	Entries []msg.Entry // ascending positions
	Meta    shard.Meta
}

// Step is one action of a test case: apply Writes, or (if Reopen) reopen
// the store.
type Step struct {
	Writes shard.Writes
	Reopen bool
}

// E returns an entry at pos with a record id and data derived from pos and
// tag (so an overwrite with another tag is visible).
func E(pos uint64, tag string) msg.Entry {
	return msg.Entry{Pos: pos, Record: msg.Record{
		ID:   msg.RecordID{Client: pos%7 + 1, Seq: pos},
		Data: []byte(fmt.Sprintf("%s@%d", tag, pos)),
	}}
}

// Range returns entries E(p, tag) for p in from..to.
func Range(from, to uint64, tag string) []msg.Entry {
	var es []msg.Entry
	for p := from; p <= to; p++ {
		es = append(es, E(p, tag))
		if p == math.MaxUint64 {
			break
		}
	}
	return es
}

func puts(es ...msg.Entry) shard.Writes { return shard.Writes{Puts: es} }

func apply(w shard.Writes) Step { return Step{Writes: w} }

var reopen = Step{Reopen: true}

func cat(parts ...[]msg.Entry) []msg.Entry {
	var out []msg.Entry
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// cases are the table of the suite: a sequence of steps and the state they
// must leave.
var cases = []struct {
	name  string
	steps []Step
	want  State
}{
	{name: "empty"},
	{
		name:  "puts",
		steps: []Step{apply(puts(Range(1, 5, "a")...))},
		want:  State{Entries: Range(1, 5, "a")},
	},
	{
		name:  "puts out of order",
		steps: []Step{apply(puts(E(5, "a"), E(1, "a"), E(3, "a"))), apply(puts(E(2, "a"), E(4, "a")))},
		want:  State{Entries: Range(1, 5, "a")},
	},
	{
		name: "overwrite across batches",
		steps: []Step{
			apply(puts(Range(1, 5, "a")...)),
			apply(puts(E(3, "b"), E(5, "b"))),
		},
		want: State{Entries: []msg.Entry{E(1, "a"), E(2, "a"), E(3, "b"), E(4, "a"), E(5, "b")}},
	},
	{
		name:  "overwrite within a batch: last wins",
		steps: []Step{apply(puts(E(2, "a"), E(2, "b"), E(1, "a"), E(2, "c")))},
		want:  State{Entries: []msg.Entry{E(1, "a"), E(2, "c")}},
	},
	{
		name:  "extreme positions",
		steps: []Step{apply(puts(E(0, "a"), E(1, "a"), E(math.MaxUint64, "a"), E(math.MaxUint64-1, "a")))},
		want:  State{Entries: []msg.Entry{E(0, "a"), E(1, "a"), E(math.MaxUint64-1, "a"), E(math.MaxUint64, "a")}},
	},
	{
		name: "empty and large data",
		steps: []Step{apply(puts(
			msg.Entry{Pos: 1, Record: msg.Record{ID: msg.RecordID{Client: 1, Seq: 1}}},
			msg.Entry{Pos: 2, Record: msg.Record{ID: msg.RecordID{Client: math.MaxUint64, Seq: math.MaxUint64}, Data: []byte{}}},
			msg.Entry{Pos: 3, Record: msg.Record{ID: msg.RecordID{Client: 0, Seq: 0}, Data: bytes.Repeat([]byte{0xAB}, 1<<16)}},
		))},
		want: State{Entries: []msg.Entry{
			{Pos: 1, Record: msg.Record{ID: msg.RecordID{Client: 1, Seq: 1}}},
			{Pos: 2, Record: msg.Record{ID: msg.RecordID{Client: math.MaxUint64, Seq: math.MaxUint64}}},
			{Pos: 3, Record: msg.Record{Data: bytes.Repeat([]byte{0xAB}, 1<<16)}},
		}},
	},
	{
		name: "delete above",
		steps: []Step{
			apply(puts(Range(1, 10, "a")...)),
			apply(shard.Writes{HasDeleteAbove: true, DeleteAbove: 6}),
		},
		want: State{Entries: Range(1, 6, "a")},
	},
	{
		name: "delete above zero keeps position zero",
		steps: []Step{
			apply(puts(Range(0, 10, "a")...)),
			apply(shard.Writes{HasDeleteAbove: true, DeleteAbove: 0}),
		},
		want: State{Entries: Range(0, 0, "a")},
	},
	{
		name: "delete above max is a no-op",
		steps: []Step{
			apply(puts(E(1, "a"), E(math.MaxUint64, "a"))),
			apply(shard.Writes{HasDeleteAbove: true, DeleteAbove: math.MaxUint64}),
		},
		want: State{Entries: []msg.Entry{E(1, "a"), E(math.MaxUint64, "a")}},
	},
	{
		name: "delete above removes the max position",
		steps: []Step{
			apply(puts(E(1, "a"), E(math.MaxUint64, "a"))),
			apply(shard.Writes{HasDeleteAbove: true, DeleteAbove: math.MaxUint64 - 1}),
		},
		want: State{Entries: []msg.Entry{E(1, "a")}},
	},
	{
		name:  "DeleteAbove without HasDeleteAbove is ignored",
		steps: []Step{apply(puts(Range(1, 3, "a")...)), apply(shard.Writes{DeleteAbove: 1})},
		want:  State{Entries: Range(1, 3, "a")},
	},
	{
		name: "puts then delete above in one batch: puts above are deleted",
		steps: []Step{
			apply(puts(Range(1, 5, "a")...)),
			apply(shard.Writes{Puts: []msg.Entry{E(3, "b"), E(7, "b")}, HasDeleteAbove: true, DeleteAbove: 4}),
		},
		want: State{Entries: []msg.Entry{E(1, "a"), E(2, "a"), E(3, "b"), E(4, "a")}},
	},
	{
		name: "overwrite tail after delete above",
		steps: []Step{
			apply(puts(Range(1, 8, "a")...)),
			apply(shard.Writes{Puts: Range(5, 6, "b"), HasDeleteAbove: true, DeleteAbove: 6}),
		},
		want: State{Entries: cat(Range(1, 4, "a"), Range(5, 6, "b"))},
	},
	{
		name: "trim",
		steps: []Step{
			apply(puts(Range(1, 10, "a")...)),
			apply(shard.Writes{TrimTo: 4}),
		},
		want: State{Entries: Range(5, 10, "a")},
	},
	{
		name: "trim includes position zero",
		steps: []Step{
			apply(puts(Range(0, 3, "a")...)),
			apply(shard.Writes{TrimTo: 1}),
		},
		want: State{Entries: Range(2, 3, "a")},
	},
	{
		name: "trim to max removes everything",
		steps: []Step{
			apply(puts(E(1, "a"), E(math.MaxUint64, "a"))),
			apply(shard.Writes{TrimTo: math.MaxUint64}),
		},
	},
	{
		name: "trim twice and put below the trim point",
		steps: []Step{
			apply(puts(Range(1, 10, "a")...)),
			apply(shard.Writes{TrimTo: 3}),
			apply(shard.Writes{TrimTo: 2}), // lower: nothing left to remove
			apply(puts(E(1, "b"))),         // storage does not police trims; the shard core does
		},
		want: State{Entries: cat([]msg.Entry{E(1, "b")}, Range(4, 10, "a"))},
	},
	{
		name: "puts then trim in one batch: puts at or below are trimmed",
		steps: []Step{
			apply(shard.Writes{Puts: Range(1, 6, "a"), TrimTo: 3}),
		},
		want: State{Entries: Range(4, 6, "a")},
	},
	{
		name: "meta round trip",
		steps: []Step{
			apply(shard.Writes{Meta: &shard.Meta{Epoch: 3, StableGP: 100, Trimmed: 7}}),
		},
		want: State{Meta: shard.Meta{Epoch: 3, StableGP: 100, Trimmed: 7}},
	},
	{
		name: "meta replaced, kept when absent, extreme values",
		steps: []Step{
			apply(shard.Writes{Meta: &shard.Meta{Epoch: 3, StableGP: 100, Trimmed: 7}}),
			apply(shard.Writes{Meta: &shard.Meta{Epoch: math.MaxUint64, StableGP: math.MaxUint64, Trimmed: math.MaxUint64}}),
			apply(puts(E(1, "a"))),
		},
		want: State{
			Entries: Range(1, 1, "a"),
			Meta:    shard.Meta{Epoch: math.MaxUint64, StableGP: math.MaxUint64, Trimmed: math.MaxUint64},
		},
	},
	{
		name: "meta reset to zero",
		steps: []Step{
			apply(shard.Writes{Meta: &shard.Meta{Epoch: 3}}),
			apply(shard.Writes{Meta: &shard.Meta{}}),
		},
	},
	{
		name:  "empty writes change nothing",
		steps: []Step{apply(puts(Range(1, 2, "a")...)), apply(shard.Writes{})},
		want:  State{Entries: Range(1, 2, "a")},
	},
	{
		name: "everything in one batch",
		steps: []Step{
			apply(puts(Range(1, 10, "a")...)),
			apply(shard.Writes{
				Puts:           cat(Range(2, 3, "b"), Range(8, 12, "b")),
				HasDeleteAbove: true, DeleteAbove: 9,
				TrimTo: 2,
				Meta:   &shard.Meta{Epoch: 2, StableGP: 5, Trimmed: 2},
			}),
		},
		want: State{
			Entries: cat(Range(3, 3, "b"), Range(4, 7, "a"), Range(8, 9, "b")),
			Meta:    shard.Meta{Epoch: 2, StableGP: 5, Trimmed: 2},
		},
	},
	{
		name: "reopen keeps everything",
		steps: []Step{
			apply(puts(Range(1, 100, "a")...)),
			apply(shard.Writes{Puts: Range(50, 60, "b"), HasDeleteAbove: true, DeleteAbove: 90, Meta: &shard.Meta{Epoch: 1, StableGP: 40}}),
			reopen,
			apply(shard.Writes{TrimTo: 10, Meta: &shard.Meta{Epoch: 1, StableGP: 80, Trimmed: 10}}),
			reopen,
			reopen,
			apply(puts(E(91, "c"))),
			reopen,
		},
		want: State{
			Entries: cat(Range(11, 49, "a"), Range(50, 60, "b"), Range(61, 90, "a"), Range(91, 91, "c")),
			Meta:    shard.Meta{Epoch: 1, StableGP: 80, Trimmed: 10},
		},
	},
}

// Run runs the conformance suite against the stores h makes.
func Run(t *testing.T, h Harness) {
	t.Run("cases", func(t *testing.T) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				s := h.Open(t)
				for i, st := range tc.steps {
					if st.Reopen {
						s = h.Reopen(t, s)
						continue
					}
					if err := s.Apply(st.Writes); err != nil {
						t.Fatalf("step %d: Apply: %v", i, err)
					}
				}
				CheckState(t, s, tc.want)
			})
		}
	})
	t.Run("scan bounds", func(t *testing.T) { testScanBounds(t, h) })
	t.Run("large scan", func(t *testing.T) { testLargeScan(t, h) })
	t.Run("copies", func(t *testing.T) { testCopies(t, h) })
	t.Run("reentrant scan", func(t *testing.T) { testReentrantScan(t, h) })
}

func testScanBounds(t *testing.T, h Harness) {
	s := h.Open(t)
	all := cat(Range(0, 0, "a"), Range(10, 20, "a"), Range(math.MaxUint64-1, math.MaxUint64, "a"))
	if err := s.Apply(puts(all...)); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	between := func(from, to uint64) []msg.Entry {
		var out []msg.Entry
		for _, e := range all {
			if e.Pos >= from && e.Pos <= to {
				out = append(out, e)
			}
		}
		return out
	}
	bounds := []struct{ from, to uint64 }{
		{0, math.MaxUint64}, {0, 0}, {1, 9}, {10, 10}, {10, 20}, {11, 19}, {5, 15}, {15, 25},
		{20, 10}, {21, math.MaxUint64 - 2}, {math.MaxUint64, math.MaxUint64}, {math.MaxUint64, 0},
		{math.MaxUint64 - 1, math.MaxUint64}, {1, math.MaxUint64 - 1},
	}
	for _, b := range bounds {
		got, err := ScanAll(s, b.from, b.to)
		if err != nil {
			t.Fatalf("Scan(%d, %d): %v", b.from, b.to, err)
		}
		if d := DiffEntries(got, between(b.from, b.to)); d != "" {
			t.Errorf("Scan(%d, %d): %s", b.from, b.to, d)
		}
	}
	// fn returning false stops the scan at once.
	for stopAfter := 1; stopAfter <= 3; stopAfter++ {
		var got []msg.Entry
		err := s.Scan(0, math.MaxUint64, func(e msg.Entry) bool {
			got = append(got, e)
			return len(got) < stopAfter
		})
		if err != nil {
			t.Fatalf("Scan: %v", err)
		}
		if d := DiffEntries(got, all[:stopAfter]); d != "" {
			t.Errorf("Scan stopping after %d: %s", stopAfter, d)
		}
	}
	for _, pos := range []uint64{1, 9, 21, math.MaxUint64 - 2} {
		if e, ok, err := s.Get(pos); err != nil || ok {
			t.Errorf("Get(%d) = %v, %v, %v; want absent", pos, e, ok, err)
		}
	}
}

func testLargeScan(t *testing.T, h Harness) {
	s := h.Open(t)
	const n = 5000
	for from := uint64(1); from <= n; from += 500 {
		if err := s.Apply(puts(Range(from, from+499, "x")...)); err != nil {
			t.Fatalf("Apply: %v", err)
		}
	}
	got, err := ScanAll(s, 1234, 4321)
	if err != nil {
		t.Fatalf("Scan: %v", err)
	}
	if d := DiffEntries(got, Range(1234, 4321, "x")); d != "" {
		t.Fatalf("Scan(1234, 4321): %s", d)
	}
	s = h.Reopen(t, s)
	CheckState(t, s, State{Entries: Range(1, n, "x")})
}

func testCopies(t *testing.T, h Harness) {
	s := h.Open(t)
	in := E(1, "a")
	if err := s.Apply(puts(in)); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	in.Record.Data[0] = 'X' // the caller reuses its buffer
	e, _, err := s.Get(1)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	e.Record.Data[0] = 'Y' // the caller scribbles on what it got
	if err := s.Scan(1, 1, func(e msg.Entry) bool { e.Record.Data[1] = 'Z'; return true }); err != nil {
		t.Fatalf("Scan: %v", err)
	}
	CheckState(t, s, State{Entries: []msg.Entry{E(1, "a")}})
}

// testReentrantScan checks that fn may call the store during a Scan.
func testReentrantScan(t *testing.T, h Harness) {
	s := h.Open(t)
	if err := s.Apply(puts(Range(1, 300, "a")...)); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	n := 0
	err := s.Scan(1, 300, func(e msg.Entry) bool {
		n++
		if _, ok, err := s.Get(e.Pos); err != nil || !ok {
			t.Errorf("Get(%d) inside Scan: %v, %v", e.Pos, ok, err)
		}
		if e.Pos%100 == 0 {
			if err := s.Apply(puts(E(1000+e.Pos, "b"))); err != nil {
				t.Errorf("Apply inside Scan: %v", err)
			}
		}
		return true
	})
	if err != nil {
		t.Fatalf("Scan: %v", err)
	}
	if n != 300 {
		t.Errorf("Scan visited %d entries, want 300", n)
	}
	CheckState(t, s, State{Entries: cat(Range(1, 300, "a"), []msg.Entry{E(1100, "b"), E(1200, "b"), E(1300, "b")})})
}

// ScanAll returns the entries with from <= Pos <= to.
func ScanAll(s shard.Storage, from, to uint64) ([]msg.Entry, error) {
	var out []msg.Entry
	err := s.Scan(from, to, func(e msg.Entry) bool {
		out = append(out, e)
		return true
	})
	return out, err
}

// ReadState returns the whole content of s.
func ReadState(s shard.Storage) (State, error) {
	es, err := ScanAll(s, 0, math.MaxUint64)
	if err != nil {
		return State{}, err
	}
	m, err := s.Meta()
	if err != nil {
		return State{}, err
	}
	return State{Entries: es, Meta: m}, nil
}

// CheckState fails t unless s holds exactly want, through Scan, Get and Meta.
func CheckState(t testing.TB, s shard.Storage, want State) {
	t.Helper()
	got, err := ReadState(s)
	if err != nil {
		t.Fatalf("read state: %v", err)
	}
	if d := DiffEntries(got.Entries, want.Entries); d != "" {
		t.Errorf("entries: %s", d)
	}
	if got.Meta != want.Meta {
		t.Errorf("meta = %+v, want %+v", got.Meta, want.Meta)
	}
	for _, w := range want.Entries {
		e, ok, err := s.Get(w.Pos)
		if err != nil || !ok || !EqualEntry(e, w) {
			t.Errorf("Get(%d) = %v, %v, %v; want %v", w.Pos, e, ok, err, w)
		}
	}
}

// EqualEntry reports whether a and b are equal (nil and empty data are the
// same).
func EqualEntry(a, b msg.Entry) bool {
	return a.Pos == b.Pos && a.Record.ID == b.Record.ID && bytes.Equal(a.Record.Data, b.Record.Data)
}

// DiffEntries describes the first difference between got and want, or
// returns "" if they are equal.
func DiffEntries(got, want []msg.Entry) string {
	for i := 0; i < len(got) && i < len(want); i++ {
		if !EqualEntry(got[i], want[i]) {
			return fmt.Sprintf("entry %d: got %s, want %s", i, show(got[i]), show(want[i]))
		}
	}
	switch {
	case len(got) > len(want):
		return fmt.Sprintf("%d extra entries from %s", len(got)-len(want), show(got[len(want)]))
	case len(got) < len(want):
		return fmt.Sprintf("%d missing entries from %s", len(want)-len(got), show(want[len(got)]))
	}
	return ""
}

func show(e msg.Entry) string {
	d := e.Record.Data
	if len(d) > 24 {
		return fmt.Sprintf("{%d %v %q...(%d bytes)}", e.Pos, e.Record.ID, d[:24], len(d))
	}
	return fmt.Sprintf("{%d %v %q}", e.Pos, e.Record.ID, d)
}
