package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
)

// ErrMalformed is wrapped by every error of the verifier and of the decoders
// built on it (here and in cmdlog/codec): the bytes are not a valid buffer of
// the expected schema, or exceed a limit. Input that fails this way came from
// a broken or hostile peer; drop it (or the connection), do not retry it.
var ErrMalformed = errors.New("malformed flatbuffer")

// Verifier limits.
const (
	// MaxBufferSize is the largest buffer the verifier accepts. FlatBuffers
	// offsets are 32-bit and the Go runtime computes positions in int32.
	MaxBufferSize = math.MaxInt32
	// DefaultMaxDepth bounds how deeply tables may nest (the root is at
	// depth 1). Our schemas nest at most 4 deep.
	DefaultMaxDepth = 16
	// DefaultMaxTables bounds how many tables one verification visits.
	DefaultMaxTables = 1 << 20
)

// A Verifier checks that a FlatBuffers buffer can be read by the generated
// Go accessors without panicking or reading out of bounds. It checks the
// structure (root offset, file identifier, vtables, field bounds and
// alignment, offsets, vectors, strings, unions, nesting depth); what a table
// contains is described by the per-table functions (VerifyFrame,
// VerifyEnvelope, VerifyGameCommand) that drive it.
//
// Beyond the reference (C++) verifier, it rejects buffers whose tables and
// vectors, counted once per reference, add up to more bytes than the buffer
// holds. Standard builders never share tables or vectors (only vtables, and
// strings on request), so this costs valid buffers nothing and bounds the
// work and memory of decoding a hostile DAG-shaped buffer to O(len(buf)).
//
// Errors wrap ErrMalformed and name the path to the fault, such as
// "Frame: field 1: Append: field 1: element 3: Record: field 1: vector of
// 4000000 elements of 1 bytes at 96 exceeds buffer of 200 bytes"; the
// Verify functions prefix them with "wire: ".
//
// A Verifier is used for one buffer, by one goroutine.
type Verifier struct {
	// MaxDepth bounds table nesting; NewVerifier sets DefaultMaxDepth.
	MaxDepth int
	// MaxTables bounds the tables visited; NewVerifier sets
	// DefaultMaxTables.
	MaxTables int

	buf    []byte
	tables int
	budget uint64 // bytes of vectors still creditable
}

// NewVerifier returns a Verifier for buf with the default limits.
func NewVerifier(buf []byte) Verifier {
	return Verifier{MaxDepth: DefaultMaxDepth, MaxTables: DefaultMaxTables, buf: buf}
}

// Table is a verified table: its header and vtable are in bounds. Its fields
// are not verified until a method of Table is called for them.
type Table struct {
	v      *Verifier
	name   string // schema name of the table, for errors
	pos    uint32 // position of the table (its soffset) in the buffer
	vt     uint32 // position of its vtable
	vtSize uint16 // size of the vtable in bytes
	tSize  uint16 // size of the table's inline data in bytes
	depth  int
}

// Vector is a verified vector: its length and elements are in bounds.
type Vector struct {
	start    uint32 // position of the first element
	n        uint32 // number of elements
	elemSize int    // bytes per element, as verified
	present  bool   // the field was set
}

// Len returns the number of elements (0 if the field is absent).
func (v Vector) Len() int { return int(v.n) }

func (v *Verifier) errorf(name, format string, args ...any) error {
	return fmt.Errorf("%s: %s: %w", name, fmt.Sprintf(format, args...), ErrMalformed)
}

func (t Table) errorf(id int, format string, args ...any) error {
	return fmt.Errorf("%s: field %d: %s: %w", t.errName(), id, fmt.Sprintf(format, args...), ErrMalformed)
}

// errName returns the table's name for an error message. It is a copy:
// were t.name itself stored in an error, escape analysis would move every
// Table, and so the Verifier, to the heap, costing an allocation per
// verification on the happy path.
func (t Table) errName() string { return strings.Clone(t.name) }

// FieldError adds the path "Table: field id:" to err, an error about what
// field id of t refers to (a nested table's fields, say).
func (t Table) FieldError(id int, err error) error {
	return fmt.Errorf("%s: field %d: %w", t.errName(), id, err)
}

// ElementError adds the path "Table: field id: element i:" to err, an
// error about element i of the vector in field id of t.
func (t Table) ElementError(id, i int, err error) error {
	return fmt.Errorf("%s: field %d: element %d: %w", t.errName(), id, i, err)
}

func (v *Verifier) u16(pos uint64) uint16 { return binary.LittleEndian.Uint16(v.buf[pos:]) }
func (v *Verifier) u32(pos uint64) uint32 { return binary.LittleEndian.Uint32(v.buf[pos:]) }

// spend credits size bytes of table or vector data against the buffer.
func (v *Verifier) spend(size uint64) bool {
	if size > v.budget {
		return false
	}
	v.budget -= size
	return true
}

// Root verifies the buffer's header and root table, named name in errors.
// If ident is not empty, the buffer must carry it as its 4-byte file
// identifier.
func (v *Verifier) Root(name, ident string) (Table, error) {
	n := len(v.buf)
	if n > MaxBufferSize {
		return Table{}, v.errorf(name, "buffer of %d bytes exceeds %d", n, MaxBufferSize)
	}
	hdr := 4
	if ident != "" {
		hdr = 8
	}
	if n < hdr+4 {
		return Table{}, v.errorf(name, "buffer of %d bytes too short", n)
	}
	if ident != "" && string(v.buf[4:8]) != ident {
		return Table{}, v.errorf(name, "file identifier %q, want %q", v.buf[4:8], ident)
	}
	v.tables = 0
	v.budget = uint64(n)
	root := uint64(v.u32(0))
	if root < uint64(hdr) {
		return Table{}, v.errorf(name, "root offset %d inside the header", root)
	}
	return v.table(name, root, 1)
}

// table verifies the table at pos.
func (v *Verifier) table(name string, pos uint64, depth int) (Table, error) {
	if depth > v.MaxDepth {
		return Table{}, v.errorf(name, "nested deeper than %d", v.MaxDepth)
	}
	v.tables++
	if v.tables > v.MaxTables {
		return Table{}, v.errorf(name, "more than %d tables", v.MaxTables)
	}
	n := uint64(len(v.buf))
	if pos%4 != 0 || pos+4 > n {
		return Table{}, v.errorf(name, "table at %d misaligned or out of bounds (buffer %d)", pos, n)
	}
	vt := int64(pos) - int64(int32(v.u32(pos)))
	if vt < 0 || vt%2 != 0 || uint64(vt)+4 > n {
		return Table{}, v.errorf(name, "table at %d: vtable at %d misaligned or out of bounds", pos, vt)
	}
	vtSize, tSize := v.u16(uint64(vt)), v.u16(uint64(vt)+2)
	if vtSize < 4 || vtSize%2 != 0 || uint64(vt)+uint64(vtSize) > n {
		return Table{}, v.errorf(name, "table at %d: bad vtable size %d at %d", pos, vtSize, vt)
	}
	if tSize < 4 || pos+uint64(tSize) > n {
		return Table{}, v.errorf(name, "table at %d: size %d out of bounds", pos, tSize)
	}
	// Tables are not charged to the budget: the builder pads and shares
	// vtables in ways that make inline sizes overlap, and their number is
	// bounded by MaxTables. Vectors, whose bytes decoding copies, are.
	return Table{v: v, name: name, pos: uint32(pos), vt: uint32(vt), vtSize: vtSize, tSize: tSize, depth: depth}, nil
}

// slot returns the offset of field id within the table, 0 if absent.
func (t Table) slot(id int) uint16 {
	e := 4 + 2*uint64(id)
	if e+2 > uint64(t.vtSize) {
		return 0
	}
	return t.v.u16(uint64(t.vt) + e)
}

// Field verifies the inline field id (0-based, in schema order; a union
// counts as two fields, its type first): a scalar or struct of size bytes,
// aligned to align bytes (a power of two). An absent field is valid.
func (t Table) Field(id, size, align int) error {
	off := t.slot(id)
	if off == 0 {
		return nil
	}
	if off < 4 || int(off)+size > int(t.tSize) {
		return t.errorf(id, "%d bytes at offset %d outside table of %d bytes", size, off, t.tSize)
	}
	if (t.pos+uint32(off))&uint32(align-1) != 0 {
		return t.errorf(id, "misaligned: %d bytes at %d", size, t.pos+uint32(off))
	}
	return nil
}

// offset verifies the offset field id and returns the position it points to.
func (t Table) offset(id int) (uint64, bool, error) {
	if t.slot(id) == 0 {
		return 0, false, nil
	}
	if err := t.Field(id, 4, 4); err != nil {
		return 0, false, err
	}
	p := uint64(t.pos) + uint64(t.slot(id)) // in bounds: Field checked it
	rel := t.v.u32(p)
	if rel == 0 {
		return 0, false, t.errorf(id, "self-referencing offset at %d", p)
	}
	target := p + uint64(rel)
	if target >= uint64(len(t.v.buf)) {
		return 0, false, t.errorf(id, "offset %d at %d points outside buffer of %d bytes", rel, p, len(t.v.buf))
	}
	return target, true, nil
}

// Vector verifies the vector field id of elements of elemSize bytes aligned
// to elemAlign bytes, a power of two: scalars, structs, or the offsets of
// tables (size and alignment 4; see VectorTable). An absent field is valid
// and returns an empty Vector.
func (t Table) Vector(id, elemSize, elemAlign int) (Vector, error) {
	target, ok, err := t.offset(id)
	if !ok || err != nil {
		return Vector{}, err
	}
	n := uint64(len(t.v.buf))
	if target%4 != 0 || target+4 > n {
		return Vector{}, t.errorf(id, "vector at %d misaligned or out of bounds", target)
	}
	count := uint64(t.v.u32(target))
	start := target + 4
	size := count * uint64(elemSize) // < 2^32 * 2^16: no overflow
	if size > n-start {
		return Vector{}, t.errorf(id, "vector of %d elements of %d bytes at %d exceeds buffer of %d bytes", count, elemSize, start, n)
	}
	if count > 0 && start&uint64(elemAlign-1) != 0 {
		return Vector{}, t.errorf(id, "vector elements at %d misaligned for %d", start, elemAlign)
	}
	if !t.v.spend(4 + size) {
		return Vector{}, t.errorf(id, "vector at %d: tables and vectors overlap or are shared", target)
	}
	return Vector{start: uint32(start), n: uint32(count), elemSize: elemSize, present: true}, nil
}

// String verifies the string field id: a byte vector followed by a NUL
// byte inside the buffer.
func (t Table) String(id int) (Vector, error) {
	vec, err := t.Vector(id, 1, 1)
	if !vec.present || err != nil {
		return vec, err
	}
	end := uint64(vec.start) + uint64(vec.n)
	if end >= uint64(len(t.v.buf)) || t.v.buf[end] != 0 {
		return Vector{}, t.errorf(id, "string at %d not NUL-terminated", vec.start)
	}
	if !t.v.spend(1) {
		return Vector{}, t.errorf(id, "string at %d: tables and vectors overlap or are shared", vec.start)
	}
	return vec, nil
}

// NestedTable verifies that field id points to a table, named name in
// errors, one level deeper than t. It reports false if the field is absent.
// The caller verifies the nested table's fields.
func (t Table) NestedTable(id int, name string) (Table, bool, error) {
	target, ok, err := t.offset(id)
	if !ok || err != nil {
		return Table{}, false, err
	}
	nt, err := t.v.table(name, target, t.depth+1)
	if err != nil {
		return Table{}, false, t.FieldError(id, err)
	}
	return nt, true, nil
}

// VectorTable verifies element i of vec, a vector of tables that t.Vector
// verified (with element size and alignment 4), as a table named name one
// level deeper than t. The caller verifies the element's fields, and adds
// the field and element to the error's path.
func (t Table) VectorTable(vec Vector, i int, name string) (Table, error) {
	if i < 0 || i >= int(vec.n) || vec.elemSize != 4 {
		// A bug of the caller, reported as an error all the same.
		return Table{}, t.v.errorf(name, "element %d of a vector of %d elements of %d bytes", i, vec.n, vec.elemSize)
	}
	p := uint64(vec.start) + 4*uint64(i)
	rel := t.v.u32(p)
	if rel == 0 {
		return Table{}, t.v.errorf(name, "self-referencing offset at %d", p)
	}
	return t.v.table(name, p+uint64(rel), t.depth+1)
}

// Union verifies the union whose type is field typeID and whose value is
// field valueID. names[k] is the table name of union type k (names[0] is
// NONE); a type outside names is an error, as is a type without a value or a
// value without a type. It returns the type (0 for an absent union) and the
// value's table, whose fields the caller verifies.
func (t Table) Union(typeID, valueID int, names []string) (byte, Table, error) {
	if err := t.Field(typeID, 1, 1); err != nil {
		return 0, Table{}, err
	}
	var typ byte
	if off := t.slot(typeID); off != 0 {
		typ = t.v.buf[t.pos+uint32(off)]
	}
	target, ok, err := t.offset(valueID)
	if err != nil {
		return 0, Table{}, err
	}
	switch {
	case typ == 0 && !ok:
		return 0, Table{}, nil
	case typ == 0:
		return 0, Table{}, t.errorf(valueID, "union value without a type")
	case int(typ) >= len(names):
		return 0, Table{}, t.errorf(typeID, "unknown union type %d", typ)
	case !ok:
		return 0, Table{}, t.errorf(valueID, "union type %d (%s) without a value", typ, names[typ])
	}
	vt, err := t.v.table(names[typ], target, t.depth+1)
	if err != nil {
		return 0, Table{}, t.FieldError(valueID, err)
	}
	return typ, vt, nil
}
