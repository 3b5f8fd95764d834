package wire

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	flatbuffers "github.com/google/flatbuffers/go"
)

// The tests here drive the generic Verifier with hand-built buffers of a
// test schema; the schema-specific functions are tested through the
// decoders (here and in cmdlog/codec) and the fuzz targets.

// testTable is the test schema's table:
//
//	table T { name: string; child: T; data: [ubyte]; ids: [ulong]; kids: [T]; u_type: ubyte; u: T; }
//
// field ids: 0 name, 1 child, 2 data, 3 ids, 4 kids, 5 u_type, 6 u.
func verifyTestTable(t Table) error {
	if _, err := t.String(0); err != nil {
		return err
	}
	if c, ok, err := t.NestedTable(1, "T"); err != nil {
		return err
	} else if ok {
		if err := verifyTestTable(c); err != nil {
			return err
		}
	}
	if _, err := t.Vector(2, 1, 1); err != nil {
		return err
	}
	if _, err := t.Vector(3, 8, 8); err != nil {
		return err
	}
	kids, err := t.Vector(4, 4, 4)
	if err != nil {
		return err
	}
	for i := range kids.Len() {
		k, err := t.VectorTable(kids, i, "T")
		if err == nil {
			err = verifyTestTable(k)
		}
		if err != nil {
			return err
		}
	}
	typ, u, err := t.Union(5, 6, []string{"NONE", "T"})
	if err != nil || typ == 0 {
		return err
	}
	return verifyTestTable(u)
}

func verifyTest(buf []byte, depth int) error {
	v := NewVerifier(buf)
	if depth > 0 {
		v.MaxDepth = depth
	}
	root, err := v.Root("T", "TEST")
	if err != nil {
		return err
	}
	return verifyTestTable(root)
}

type testSpec struct {
	name   string
	child  *testSpec
	data   []byte
	ids    []uint64
	kids   []testSpec
	union  *testSpec
	utype  byte // overrides the union type when not 0
	shared int  // kids: repeat the offset of kids[0] this many times
}

func buildTest(s testSpec) []byte {
	b := flatbuffers.NewBuilder(0)
	b.FinishWithFileIdentifier(buildTestTable(b, &s), []byte("TEST"))
	return b.FinishedBytes()
}

func buildTestTable(b *flatbuffers.Builder, s *testSpec) flatbuffers.UOffsetT {
	var name, child, data, ids, kids, u flatbuffers.UOffsetT
	if s.name != "" {
		name = b.CreateString(s.name)
	}
	if s.child != nil {
		child = buildTestTable(b, s.child)
	}
	if s.data != nil {
		data = b.CreateByteVector(s.data)
	}
	if s.ids != nil {
		b.StartVector(8, len(s.ids), 8)
		for i := len(s.ids) - 1; i >= 0; i-- {
			b.PrependUint64(s.ids[i])
		}
		ids = b.EndVector(len(s.ids))
	}
	if s.shared > 0 {
		k := buildTestTable(b, &s.kids[0])
		b.StartVector(4, s.shared, 4)
		for range s.shared {
			b.PrependUOffsetT(k)
		}
		kids = b.EndVector(s.shared)
	} else if s.kids != nil {
		offs := make([]flatbuffers.UOffsetT, len(s.kids))
		for i := range s.kids {
			offs[i] = buildTestTable(b, &s.kids[i])
		}
		kids = b.CreateVectorOfTables(offs)
	}
	utype := s.utype
	if s.union != nil {
		u = buildTestTable(b, s.union)
		if utype == 0 {
			utype = 1
		}
	}
	b.StartObject(7)
	b.PrependUOffsetTSlot(0, name, 0)
	b.PrependUOffsetTSlot(1, child, 0)
	b.PrependUOffsetTSlot(2, data, 0)
	b.PrependUOffsetTSlot(3, ids, 0)
	b.PrependUOffsetTSlot(4, kids, 0)
	b.PrependUOffsetTSlot(6, u, 0)
	b.PrependByteSlot(5, utype, 0)
	return b.EndObject()
}

// fieldPos returns the position of field id of the root table of buf.
func fieldPos(t *testing.T, buf []byte, id int) int {
	t.Helper()
	tab := flatbuffers.Table{Bytes: buf, Pos: flatbuffers.GetUOffsetT(buf)}
	off := tab.Offset(flatbuffers.VOffsetT(4 + 2*id))
	if off == 0 {
		t.Fatalf("field %d absent", id)
	}
	return int(tab.Pos) + int(off)
}

// target returns where the offset field id of the root table points.
func target(t *testing.T, buf []byte, id int) int {
	p := fieldPos(t, buf, id)
	return p + int(binary.LittleEndian.Uint32(buf[p:]))
}

func chain(depth int) *testSpec {
	var s *testSpec
	for range depth {
		s = &testSpec{name: "x", child: s}
	}
	return s
}

func TestVerifierAcceptsValid(t *testing.T) {
	for name, s := range map[string]testSpec{
		"empty":        {},
		"string":       {name: "hello"},
		"empty string": {name: ""},
		"all fields": {name: "a", child: &testSpec{name: "b"}, data: []byte{1, 2, 3}, ids: []uint64{1, 2},
			kids: []testSpec{{name: "k1"}, {data: []byte{9}}}, union: &testSpec{ids: []uint64{7}}},
		"empty vectors": {data: []byte{}, ids: []uint64{}, kids: []testSpec{}},
		"depth 16":      *chain(16),
	} {
		if err := verifyTest(buildTest(s), 0); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestVerifierRejects(t *testing.T) {
	valid := buildTest(testSpec{name: "hello", data: []byte{1, 2, 3, 4}, ids: []uint64{5},
		kids: []testSpec{{name: "k"}}, union: &testSpec{name: "u"}})
	if err := verifyTest(valid, 0); err != nil {
		t.Fatal(err)
	}
	put32 := func(b []byte, p int, x uint32) { binary.LittleEndian.PutUint32(b[p:], x) }
	root := int(binary.LittleEndian.Uint32(valid))
	vt := root - int(int32(binary.LittleEndian.Uint32(valid[root:])))
	cases := []struct {
		name   string
		mutate func(b []byte) []byte
		want   string // substring of the error
	}{
		{"empty buffer", func(b []byte) []byte { return nil }, "too short"},
		{"short buffer", func(b []byte) []byte { return b[:8] }, "too short"},
		{"wrong identifier", func(b []byte) []byte { b[4] = 'X'; return b }, "file identifier"},
		{"root out of bounds", func(b []byte) []byte { put32(b, 0, uint32(len(b))); return b }, "out of bounds"},
		{"root misaligned", func(b []byte) []byte { put32(b, 0, uint32(root+2)); return b }, "misaligned"},
		{"root in header", func(b []byte) []byte { put32(b, 0, 0); return b }, "inside the header"},
		{"vtable out of bounds", func(b []byte) []byte { put32(b, root, 0x80000000); return b }, "vtable"},
		{"vtable odd", func(b []byte) []byte { put32(b, root, uint32(int32(root-vt+1))); return b }, "vtable"},
		{"vtable size too big", func(b []byte) []byte {
			binary.LittleEndian.PutUint16(b[vt:], 0xFFFE)
			return b
		}, "bad vtable size"},
		{"vtable size odd", func(b []byte) []byte { binary.LittleEndian.PutUint16(b[vt:], 5); return b }, "bad vtable size"},
		{"table size too big", func(b []byte) []byte { binary.LittleEndian.PutUint16(b[vt+2:], 0xFFFF); return b }, "size"},
		{"field outside table", func(b []byte) []byte {
			binary.LittleEndian.PutUint16(b[vt+4:], binary.LittleEndian.Uint16(b[vt+2:]))
			return b
		}, "outside table"},
		{"field overlapping soffset", func(b []byte) []byte { binary.LittleEndian.PutUint16(b[vt+4:], 2); return b }, "outside table"},
		{"self-referencing offset", func(b []byte) []byte { put32(b, fieldPos(t, b, 0), 0); return b }, "self-referencing"},
		{"offset out of bounds", func(b []byte) []byte {
			p := fieldPos(t, b, 2) // data
			put32(b, p, uint32(len(b)-p))
			return b
		}, "outside buffer"},
		{"huge offset", func(b []byte) []byte { put32(b, fieldPos(t, b, 2), 0xFFFFFFFF); return b }, "outside buffer"},
		{"huge vector length", func(b []byte) []byte { put32(b, target(t, b, 2), 0xFFFFFFFF); return b }, "exceeds buffer"},
		{"vector length past end", func(b []byte) []byte {
			p := target(t, b, 3)
			put32(b, p, uint32((len(b)-p)/8+1))
			return b
		}, "exceeds buffer"},
		{"string without NUL", func(b []byte) []byte {
			p := target(t, b, 0)
			b[p+4+len("hello")] = '!'
			return b
		}, "NUL"},
		{"string to the end", func(b []byte) []byte {
			p := target(t, b, 0)
			put32(b, p, uint32(len(b)-p-4))
			return b
		}, "NUL"},
		{"vector of tables element self-reference", func(b []byte) []byte { put32(b, target(t, b, 4)+4, 0); return b }, "self-referencing"},
		{"vector of tables element out of bounds", func(b []byte) []byte { put32(b, target(t, b, 4)+4, 1<<30); return b }, "out of bounds"},
		{"unknown union type", func(b []byte) []byte { b[fieldPos(t, b, 5)] = 2; return b }, "unknown union type"},
		{"union value without type", func(b []byte) []byte { b[fieldPos(t, b, 5)] = 0; return b }, "without a type"},
		{"union type without value", func(b []byte) []byte {
			binary.LittleEndian.PutUint16(b[vt+4+2*6:], 0)
			return b
		}, "without a value"},
	}
	for _, c := range cases {
		b := c.mutate(append([]byte(nil), valid...))
		err := verifyTest(b, 0)
		if err == nil || !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want error containing %q wrapping ErrMalformed", c.name, err, c.want)
		}
	}
}

func TestVerifierDepthLimit(t *testing.T) {
	deep := buildTest(*chain(DefaultMaxDepth + 1))
	if err := verifyTest(deep, 0); err == nil || !strings.Contains(err.Error(), "nested deeper") {
		t.Errorf("depth %d: got %v", DefaultMaxDepth+1, err)
	}
	if err := verifyTest(deep, DefaultMaxDepth+1); err != nil {
		t.Errorf("depth %d with MaxDepth raised: %v", DefaultMaxDepth+1, err)
	}
	// Unions and vectors of tables nest too.
	s := testSpec{}
	for range DefaultMaxDepth {
		prev := s
		s = testSpec{kids: []testSpec{{union: &prev}}}
	}
	if err := verifyTest(buildTest(s), 0); err == nil || !strings.Contains(err.Error(), "nested deeper") {
		t.Errorf("deep kids/unions: got %v", err)
	}
}

func TestVerifierRejectsSharedObjects(t *testing.T) {
	kid := testSpec{data: make([]byte, 100)}
	distinct := testSpec{kids: make([]testSpec, 50)}
	for i := range distinct.kids {
		distinct.kids[i] = kid
	}
	if err := verifyTest(buildTest(distinct), 0); err != nil {
		t.Fatalf("50 distinct kids: %v", err)
	}
	// 1000 references to one 100-byte kid: 4 KB of buffer, 100 KB to decode.
	shared := buildTest(testSpec{kids: []testSpec{kid}, shared: 1000})
	if err := verifyTest(shared, 0); err == nil || !strings.Contains(err.Error(), "shared") {
		t.Errorf("1000 shared kids: got %v", err)
	}
}

func TestVerifierMaxTables(t *testing.T) {
	buf := buildTest(testSpec{kids: make([]testSpec, 10)})
	v := NewVerifier(buf)
	v.MaxTables = 5
	root, err := v.Root("T", "TEST")
	if err == nil {
		err = verifyTestTable(root)
	}
	if err == nil || !strings.Contains(err.Error(), "more than 5 tables") {
		t.Errorf("got %v", err)
	}
}

func TestVerifierNoIdentifier(t *testing.T) {
	b := flatbuffers.NewBuilder(0)
	b.StartObject(1)
	b.PrependUint64Slot(0, 42, 0)
	b.Finish(b.EndObject())
	v := NewVerifier(b.FinishedBytes())
	root, err := v.Root("T", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := root.Field(0, 8, 8); err != nil {
		t.Error(err)
	}
	if err := root.Field(0, 16, 8); err == nil {
		t.Error("16-byte read of an 8-byte field accepted")
	}
}
