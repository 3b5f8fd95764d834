package table

import "encoding/binary"

// Record is one fixed-size record of a table: a window onto the table's
// page, valid until the table grows or is restored. Field accessors read and
// write little-endian values at byte offsets chosen by the game; they are
// inlined and never allocate. Writing through a Record obtained from
// Table.Row is a bug (the change would be neither hashed nor captured): use
// Table.Mut.
type Record []byte

// at returns the n bytes at off. Slicing r to its length first lets the
// compiler check a constant off and n with one comparison against len(r)
// (r[off:] then a length test costs two tests and a pointer mask); it
// panics exactly when r[off:] and the n-byte read would.
func (r Record) at(off, n int) []byte { return r[:len(r):len(r)][off : off+n] }

// U8 returns the byte at off.
func (r Record) U8(off int) uint8 { return r[off] }

// I8 returns the signed byte at off.
func (r Record) I8(off int) int8 { return int8(r[off]) }

// U16 returns the little-endian uint16 at off.
func (r Record) U16(off int) uint16 { return binary.LittleEndian.Uint16(r.at(off, 2)) }

// I16 returns the little-endian int16 at off.
func (r Record) I16(off int) int16 { return int16(binary.LittleEndian.Uint16(r.at(off, 2))) }

// U32 returns the little-endian uint32 at off.
func (r Record) U32(off int) uint32 { return binary.LittleEndian.Uint32(r.at(off, 4)) }

// I32 returns the little-endian int32 at off.
func (r Record) I32(off int) int32 { return int32(binary.LittleEndian.Uint32(r.at(off, 4))) }

// U64 returns the little-endian uint64 at off.
func (r Record) U64(off int) uint64 { return binary.LittleEndian.Uint64(r.at(off, 8)) }

// I64 returns the little-endian int64 at off.
func (r Record) I64(off int) int64 { return int64(binary.LittleEndian.Uint64(r.at(off, 8))) }

// SetU8 stores v at off.
func (r Record) SetU8(off int, v uint8) { r[off] = v }

// SetI8 stores v at off.
func (r Record) SetI8(off int, v int8) { r[off] = uint8(v) }

// SetU16 stores v little-endian at off.
func (r Record) SetU16(off int, v uint16) { binary.LittleEndian.PutUint16(r.at(off, 2), v) }

// SetI16 stores v little-endian at off.
func (r Record) SetI16(off int, v int16) { binary.LittleEndian.PutUint16(r.at(off, 2), uint16(v)) }

// SetU32 stores v little-endian at off.
func (r Record) SetU32(off int, v uint32) { binary.LittleEndian.PutUint32(r.at(off, 4), v) }

// SetI32 stores v little-endian at off.
func (r Record) SetI32(off int, v int32) { binary.LittleEndian.PutUint32(r.at(off, 4), uint32(v)) }

// SetU64 stores v little-endian at off.
func (r Record) SetU64(off int, v uint64) { binary.LittleEndian.PutUint64(r.at(off, 8), v) }
