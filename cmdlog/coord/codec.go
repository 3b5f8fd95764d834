package coord

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"

	"github.com/anoptic/broadside/cmdlog/msg"
)

// ErrBadRecord is wrapped by DecodeViewRecord's errors: the bytes are not a
// valid encoded ViewRecord.
var ErrBadRecord = errors.New("coord: malformed view record")

// MaxRecordBytes is the largest encoded view record a coordinator stores:
// under NATS's default 1 MiB payload limit, with room for headers. The
// replicas keep records far below it (dedup.MaxExportBytes).
const MaxRecordBytes = 1<<20 - 16<<10

// viewRecordVersion is the first byte of an encoded ViewRecord. Version 2
// adds each ClientMark's View (its lease) after its Above; version 1
// records (written before dedup leases) still decode, their marks with
// View 0 (leases that expire at the next view change).
const (
	viewRecordVersion   = 2
	viewRecordVersionV1 = 1
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// EncodeViewRecord returns the stored form of rec (the value of the NATS KV
// key): a version byte, the fields as minimal uvarints in declaration order,
// slices as a count followed by their elements (a ClientMark's Above as
// zigzag deltas from the previous value, starting at Mark, so the usual
// ascending list costs a byte per id, then its View), a 0/1 byte for Change, and a
// little-endian CRC32C of everything before it.
//
// Nil and empty slices encode alike and decode as nil.
func EncodeViewRecord(rec msg.ViewRecord) []byte {
	b := make([]byte, 0, 64)
	b = append(b, viewRecordVersion)
	b = binary.AppendUvarint(b, rec.Number)
	b = appendNodes(b, rec.Members)
	b = binary.AppendUvarint(b, uint64(rec.Leader))
	b = binary.AppendUvarint(b, rec.StartGP)
	b = binary.AppendUvarint(b, uint64(len(rec.Dedup)))
	for _, d := range rec.Dedup {
		b = binary.AppendUvarint(b, d.Client)
		b = binary.AppendUvarint(b, d.Mark)
		b = binary.AppendUvarint(b, uint64(len(d.Above)))
		prev := d.Mark
		for _, a := range d.Above {
			b = binary.AppendVarint(b, int64(a-prev)) // wrapping difference; zigzag
			prev = a
		}
		b = binary.AppendUvarint(b, d.View)
	}
	if rec.Change == nil {
		b = append(b, 0)
	} else {
		b = append(b, 1)
		b = binary.AppendUvarint(b, rec.Change.Epoch)
		b = binary.AppendUvarint(b, uint64(rec.Change.Flusher))
		b = appendNodes(b, rec.Change.NewMembers)
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

func appendNodes(b []byte, ids []msg.NodeID) []byte {
	b = binary.AppendUvarint(b, uint64(len(ids)))
	for _, id := range ids {
		b = binary.AppendUvarint(b, uint64(id))
	}
	return b
}

// DecodeViewRecord decodes bytes made by EncodeViewRecord. It accepts exactly
// the encodings EncodeViewRecord produces (checksum, version, minimal
// varints, node ids within uint32, no trailing bytes), allocates no more than
// the input's size justifies, and never panics; failures wrap ErrBadRecord.
func DecodeViewRecord(b []byte) (msg.ViewRecord, error) {
	const crcLen = 4
	if len(b) < 1+crcLen {
		return msg.ViewRecord{}, fmt.Errorf("%w: %d bytes", ErrBadRecord, len(b))
	}
	body, sum := b[:len(b)-crcLen], binary.LittleEndian.Uint32(b[len(b)-crcLen:])
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return msg.ViewRecord{}, fmt.Errorf("%w: checksum %08x, stored %08x", ErrBadRecord, got, sum)
	}
	version := body[0]
	if version != viewRecordVersion && version != viewRecordVersionV1 {
		return msg.ViewRecord{}, fmt.Errorf("%w: version %d", ErrBadRecord, body[0])
	}
	d := decoder{b: body[1:]}
	var rec msg.ViewRecord
	rec.Number = d.uvarint("number")
	rec.Members = d.nodes("members")
	rec.Leader = d.node("leader")
	rec.StartGP = d.uvarint("start gp")
	if n := d.count("dedup", 3+int(version-1)); n > 0 {
		rec.Dedup = make([]msg.ClientMark, n)
		for i := range rec.Dedup {
			m := &rec.Dedup[i]
			m.Client = d.uvarint("dedup client")
			m.Mark = d.uvarint("dedup mark")
			if n := d.count("dedup above", 1); n > 0 {
				m.Above = make([]uint64, n)
				prev := m.Mark
				for j := range m.Above {
					prev += uint64(d.varint("dedup above"))
					m.Above[j] = prev
				}
			}
			if version >= 2 {
				m.View = d.uvarint("dedup view")
			}
		}
	}
	switch flag := d.byte("change flag"); flag {
	case 0:
	case 1:
		rec.Change = &msg.ViewChange{
			Epoch:      d.uvarint("change epoch"),
			Flusher:    d.node("change flusher"),
			NewMembers: d.nodes("change members"),
		}
	default:
		if d.err == nil {
			d.fail(fmt.Sprintf("change flag %d", flag))
		}
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail(fmt.Sprintf("%d trailing bytes", len(d.b)))
	}
	if d.err != nil {
		return msg.ViewRecord{}, d.err
	}
	return rec, nil
}

// decoder reads fields from b; after the first failure it records err and
// every read returns zero.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string) {
	d.err = fmt.Errorf("%w: %s", ErrBadRecord, what)
	d.b = nil
}

func (d *decoder) uvarint(field string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 || (n > 1 && d.b[n-1] == 0) { // malformed, or overlong (not minimal)
		d.fail("bad " + field)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint(field string) int64 {
	u := d.uvarint(field) // zigzag, as binary.AppendVarint writes it
	return int64(u>>1) ^ -int64(u&1)
}

func (d *decoder) byte(field string) byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) == 0 {
		d.fail("missing " + field)
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

// count reads a slice length and checks that the remaining input can hold
// that many elements of at least minSize bytes each.
func (d *decoder) count(field string, minSize int) int {
	n := d.uvarint(field + " count")
	if d.err == nil && n > uint64(len(d.b)/minSize) {
		d.fail(fmt.Sprintf("%s count %d exceeds the input", field, n))
		return 0
	}
	return int(n)
}

func (d *decoder) node(field string) msg.NodeID {
	v := d.uvarint(field)
	if v > math.MaxUint32 {
		d.fail(fmt.Sprintf("%s %d is not a node id", field, v))
		return 0
	}
	return msg.NodeID(v)
}

func (d *decoder) nodes(field string) []msg.NodeID {
	n := d.count(field, 1)
	if n == 0 {
		return nil
	}
	ids := make([]msg.NodeID, n)
	for i := range ids {
		ids[i] = d.node(field)
	}
	return ids
}

// maxListItems is the longest list cmdlog/codec decodes (codec.MaxItems):
// a view record goes over the mesh in StartView and CoordResp too.
const maxListItems = 1 << 16

// CheckViewRecord reports whether rec can be stored and sent: it encodes
// within MaxRecordBytes (NATS's payload limit) and each of its lists has
// at most 65,536 items (the mesh codec's limit). The replicas keep their
// records far below both (dedup.Fit); a coordinator refuses a record that
// fails.
func CheckViewRecord(rec msg.ViewRecord) error {
	if len(rec.Dedup) > maxListItems || len(rec.Members) > maxListItems ||
		(rec.Change != nil && len(rec.Change.NewMembers) > maxListItems) {
		return fmt.Errorf("%w: a list over %d items", ErrBadRecord, maxListItems)
	}
	for _, d := range rec.Dedup {
		if len(d.Above) > maxListItems {
			return fmt.Errorf("%w: client %d has %d ids above its mark, over %d", ErrBadRecord, d.Client, len(d.Above), maxListItems)
		}
	}
	if n := len(EncodeViewRecord(rec)); n > MaxRecordBytes {
		return fmt.Errorf("%w: %d bytes encoded, over %d", ErrBadRecord, n, MaxRecordBytes)
	}
	return nil
}
