package table

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// Encoded table capture (all integers little-endian):
//
//	magic "BSTC" | version u8 = 1 | flags u8 (bit 0: full, bit 1: next-fit) | reserved u16 = 0
//	table id u32 | record size u32 | records per page u32 | slots u32
//	cursor u32 | reserved u32 = 0 | epoch u64 | hash u64
//	live bitmap: ceil(slots/64) × u64
//	page count u32 | pages: (index u32, page bytes) × count
//	crc32c u32 of everything before it
//
// Encoded set capture:
//
//	magic "BSTS" | version u8 = 1 | reserved u8, u16 = 0 | table count u32
//	tables: (length u32, encoded table capture) × count
//	crc32c u32 of everything before it
const (
	captureMagic     = "BSTC"
	setCaptureMagic  = "BSTS"
	codecVersion     = 1
	captureHeaderLen = 4 + 4 + 16 + 8 + 16
	flagFull         = 1
	flagNextFit      = 2
	// MaxSetTables bounds the number of tables in a set.
	MaxSetTables = 1 << 10
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// EncodedLen returns the length of c's encoding.
func (c *Capture) EncodedLen() int {
	n := captureHeaderLen + 8*len(c.Live) + 4 + 4
	for _, p := range c.Pages {
		n += 4 + len(p.Data)
	}
	return n
}

// AppendBinary appends c's encoding to b. It fails if c is not valid.
func (c *Capture) AppendBinary(b []byte) ([]byte, error) {
	if err := c.Validate(); err != nil {
		return b, err
	}
	start := len(b)
	b = append(b, captureMagic...)
	var flags byte
	if c.Full {
		flags |= flagFull
	}
	if c.Policy == NextFit {
		flags |= flagNextFit
	}
	b = append(b, codecVersion, flags, 0, 0)
	b = binary.LittleEndian.AppendUint32(b, c.TableID)
	b = binary.LittleEndian.AppendUint32(b, c.RecordSize)
	b = binary.LittleEndian.AppendUint32(b, c.RecordsPerPage)
	b = binary.LittleEndian.AppendUint32(b, c.Slots)
	b = binary.LittleEndian.AppendUint32(b, c.Cursor)
	b = binary.LittleEndian.AppendUint32(b, 0)
	b = binary.LittleEndian.AppendUint64(b, c.Epoch)
	b = binary.LittleEndian.AppendUint64(b, c.Hash)
	for _, w := range c.Live {
		b = binary.LittleEndian.AppendUint64(b, w)
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(c.Pages)))
	for _, p := range c.Pages {
		b = binary.LittleEndian.AppendUint32(b, p.Index)
		b = append(b, p.Data...)
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b[start:], castagnoli)), nil
}

// MarshalBinary encodes c (encoding.BinaryMarshaler).
func (c *Capture) MarshalBinary() ([]byte, error) {
	return c.AppendBinary(make([]byte, 0, c.EncodedLen()))
}

// UnmarshalBinary decodes and validates an encoded capture into c
// (encoding.BinaryUnmarshaler). It never panics, never allocates more than
// the input's size justifies, and copies what it keeps. Every malformed
// input yields an error wrapping ErrCorrupt.
func (c *Capture) UnmarshalBinary(b []byte) error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
	}
	if len(b) < captureHeaderLen+4+4 {
		return fail("capture of %d bytes is too short", len(b))
	}
	body, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return fail("checksum %#x, want %#x", got, sum)
	}
	if string(body[:4]) != captureMagic {
		return fail("bad magic %q", body[:4])
	}
	if body[4] != codecVersion {
		return fail("version %d", body[4])
	}
	if body[5]&^(flagFull|flagNextFit) != 0 || body[6] != 0 || body[7] != 0 || binary.LittleEndian.Uint32(body[28:]) != 0 {
		return fail("reserved bits set")
	}
	var d Capture
	d.Full = body[5]&flagFull != 0
	if body[5]&flagNextFit != 0 {
		d.Policy = NextFit
	}
	d.TableID = binary.LittleEndian.Uint32(body[8:])
	d.RecordSize = binary.LittleEndian.Uint32(body[12:])
	d.RecordsPerPage = binary.LittleEndian.Uint32(body[16:])
	d.Slots = binary.LittleEndian.Uint32(body[20:])
	d.Cursor = binary.LittleEndian.Uint32(body[24:])
	d.Epoch = binary.LittleEndian.Uint64(body[32:])
	d.Hash = binary.LittleEndian.Uint64(body[40:])
	rs, per, slots := uint64(d.RecordSize), uint64(d.RecordsPerPage), uint64(d.Slots)
	if rs == 0 || rs > MaxRecordSize || per == 0 || per > MaxRecordsPerPage || per&(per-1) != 0 || per*rs > MaxPageBytes {
		return fail("table %d: record size %d, %d records per page", d.TableID, rs, per)
	}
	if slots > MaxSlots || slots%per != 0 {
		return fail("table %d: %d slots", d.TableID, slots)
	}
	rest := body[captureHeaderLen:]
	words := (slots + 63) / 64
	if uint64(len(rest)) < 8*words+4 {
		return fail("table %d: truncated bitmap", d.TableID)
	}
	d.Live = make([]uint64, words)
	for i := range d.Live {
		d.Live[i] = binary.LittleEndian.Uint64(rest[8*i:])
	}
	rest = rest[8*words:]
	count := uint64(binary.LittleEndian.Uint32(rest))
	rest = rest[4:]
	pageBytes := per * rs
	if count > slots/per || uint64(len(rest)) != count*(4+pageBytes) {
		return fail("table %d: %d pages of %d bytes in %d bytes", d.TableID, count, pageBytes, len(rest))
	}
	data := make([]byte, count*pageBytes)
	d.Pages = make([]Page, count)
	for k := range d.Pages {
		off := uint64(k) * (4 + pageBytes)
		page := data[uint64(k)*pageBytes : uint64(k+1)*pageBytes : uint64(k+1)*pageBytes]
		copy(page, rest[off+4:off+4+pageBytes])
		d.Pages[k] = Page{Index: binary.LittleEndian.Uint32(rest[off:]), Data: page}
	}
	if err := d.Validate(); err != nil {
		return err
	}
	*c = d
	return nil
}

// SetCapture is the capture of every table of a Set, in the set's order.
type SetCapture struct {
	// Full is true when every table capture is full.
	Full bool
	// Hash is the set's state hash at capture time.
	Hash uint64
	// Tables holds one capture per table.
	Tables []*Capture
}

// AppendBinary appends c's encoding to b.
func (c *SetCapture) AppendBinary(b []byte) ([]byte, error) {
	if len(c.Tables) > MaxSetTables {
		return b, fmt.Errorf("%w: %d tables", ErrCorrupt, len(c.Tables))
	}
	start := len(b)
	b = append(b, setCaptureMagic...)
	b = append(b, codecVersion, 0, 0, 0)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(c.Tables)))
	for _, tc := range c.Tables {
		if tc == nil {
			return b[:start], fmt.Errorf("%w: nil table capture", ErrCorrupt)
		}
		at := len(b)
		b = append(b, 0, 0, 0, 0)
		var err error
		if b, err = tc.AppendBinary(b); err != nil {
			return b[:start], err
		}
		binary.LittleEndian.PutUint32(b[at:], uint32(len(b)-at-4))
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b[start:], castagnoli)), nil
}

// MarshalBinary encodes c.
func (c *SetCapture) MarshalBinary() ([]byte, error) {
	n := 16
	for _, tc := range c.Tables {
		if tc != nil {
			n += 4 + tc.EncodedLen()
		}
	}
	return c.AppendBinary(make([]byte, 0, n))
}

// UnmarshalBinary decodes and validates an encoded set capture into c. Full
// and Hash are derived from the table captures (a set's hash is the sum of
// its tables' hashes). Every malformed input yields an error wrapping
// ErrCorrupt.
func (c *SetCapture) UnmarshalBinary(b []byte) error {
	if len(b) < 12+4 {
		return fmt.Errorf("%w: set capture of %d bytes is too short", ErrCorrupt, len(b))
	}
	body, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return fmt.Errorf("%w: set checksum %#x, want %#x", ErrCorrupt, got, sum)
	}
	if string(body[:4]) != setCaptureMagic || body[4] != codecVersion || body[5] != 0 || body[6] != 0 || body[7] != 0 {
		return fmt.Errorf("%w: bad set header", ErrCorrupt)
	}
	count := binary.LittleEndian.Uint32(body[8:])
	rest := body[12:]
	// Each table capture takes at least its header: bound the count by
	// the input before allocating.
	if count > MaxSetTables || uint64(count)*(4+captureHeaderLen+8) > uint64(len(rest)) {
		return fmt.Errorf("%w: %d tables in %d bytes", ErrCorrupt, count, len(rest))
	}
	d := SetCapture{Full: true, Tables: make([]*Capture, count)}
	for k := range d.Tables {
		if len(rest) < 4 {
			return fmt.Errorf("%w: truncated table %d", ErrCorrupt, k)
		}
		n := binary.LittleEndian.Uint32(rest)
		rest = rest[4:]
		if uint64(n) > uint64(len(rest)) {
			return fmt.Errorf("%w: table %d length %d beyond input", ErrCorrupt, k, n)
		}
		tc := new(Capture)
		if err := tc.UnmarshalBinary(rest[:n]); err != nil {
			return fmt.Errorf("set table %d: %w", k, err)
		}
		rest = rest[n:]
		for _, prev := range d.Tables[:k] {
			if prev.TableID == tc.TableID {
				return fmt.Errorf("%w: table %d appears twice", ErrCorrupt, tc.TableID)
			}
		}
		d.Tables[k] = tc
		d.Full = d.Full && tc.Full
		d.Hash += tc.Hash
	}
	if len(rest) != 0 {
		return fmt.Errorf("%w: %d trailing bytes", ErrCorrupt, len(rest))
	}
	*c = d
	return nil
}
