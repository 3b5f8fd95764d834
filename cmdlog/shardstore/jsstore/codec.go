package jsstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/cmdlog/shard"
)

// ErrCorrupt is wrapped by errors about stream messages that cannot be
// decoded (a checksum mismatch, a truncated or unknown record).
var ErrCorrupt = errors.New("jsstore: corrupt stream message")

// A stream message is one chunk of a group (one Apply, ApplyAll, or the
// lazy writes flushed with them):
//
//	version u8 | flags u8 | group u64 (big endian) | crc32c u32 | chunk
//
// group is the stream sequence of the group's first message; flags bit 0
// marks the group's last chunk; the CRC32C covers version, flags, group and
// chunk. The chunks of a group, concatenated, are the group's body:
//
//	uvarint count | count × writes
//	writes = u8 flags (1 DeleteAbove, 2 TrimTo, 4 Meta)
//	         [uvarint DeleteAbove] [uvarint TrimTo] [3 × uvarint Meta]
//	         uvarint puts | puts × (uvarint pos | uvarint client | uvarint seq | uvarint len | data)
const (
	formatVersion = 1
	headerLen     = 1 + 1 + 8 + 4
	flagLast      = 1

	wDeleteAbove = 1
	wTrimTo      = 2
	wMeta        = 4
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// appendBody appends the encoding of ws to b.
func appendBody(b []byte, ws []shard.Writes) []byte {
	b = binary.AppendUvarint(b, uint64(len(ws)))
	for i := range ws {
		w := &ws[i]
		var f byte
		if w.HasDeleteAbove {
			f |= wDeleteAbove
		}
		if w.TrimTo > 0 {
			f |= wTrimTo
		}
		if w.Meta != nil {
			f |= wMeta
		}
		b = append(b, f)
		if w.HasDeleteAbove {
			b = binary.AppendUvarint(b, w.DeleteAbove)
		}
		if w.TrimTo > 0 {
			b = binary.AppendUvarint(b, w.TrimTo)
		}
		if w.Meta != nil {
			b = binary.AppendUvarint(b, w.Meta.Epoch)
			b = binary.AppendUvarint(b, w.Meta.StableGP)
			b = binary.AppendUvarint(b, w.Meta.Trimmed)
		}
		b = binary.AppendUvarint(b, uint64(len(w.Puts)))
		for _, e := range w.Puts {
			b = binary.AppendUvarint(b, e.Pos)
			b = binary.AppendUvarint(b, e.Record.ID.Client)
			b = binary.AppendUvarint(b, e.Record.ID.Seq)
			b = binary.AppendUvarint(b, uint64(len(e.Record.Data)))
			b = append(b, e.Record.Data...)
		}
	}
	return b
}

// bodyReader decodes a body.
type bodyReader struct {
	b   []byte
	err error
}

func (r *bodyReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = fmt.Errorf("%w: bad varint", ErrCorrupt)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *bodyReader) byte() byte {
	if r.err != nil {
		return 0
	}
	if len(r.b) == 0 {
		r.err = fmt.Errorf("%w: truncated", ErrCorrupt)
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

// decodeBody decodes a group's body. Record data of the result is copied
// out of body (nil when empty).
func decodeBody(body []byte) ([]shard.Writes, error) {
	r := &bodyReader{b: body}
	n := r.uvarint()
	// Every Writes takes at least 2 bytes: bound the allocation by the input.
	if r.err == nil && n > uint64(len(r.b))/2 {
		return nil, fmt.Errorf("%w: %d writes in %d bytes", ErrCorrupt, n, len(r.b))
	}
	ws := make([]shard.Writes, 0, n)
	for range n {
		var w shard.Writes
		f := r.byte()
		if f&^(wDeleteAbove|wTrimTo|wMeta) != 0 {
			return nil, fmt.Errorf("%w: unknown writes flags %#x", ErrCorrupt, f)
		}
		if f&wDeleteAbove != 0 {
			w.HasDeleteAbove, w.DeleteAbove = true, r.uvarint()
		}
		if f&wTrimTo != 0 {
			w.TrimTo = r.uvarint()
			if r.err == nil && w.TrimTo == 0 {
				return nil, fmt.Errorf("%w: trim to 0", ErrCorrupt)
			}
		}
		if f&wMeta != 0 {
			w.Meta = &shard.Meta{Epoch: r.uvarint(), StableGP: r.uvarint(), Trimmed: r.uvarint()}
		}
		np := r.uvarint()
		if r.err == nil && np > uint64(len(r.b))/4 { // a put takes at least 4 bytes
			return nil, fmt.Errorf("%w: %d puts in %d bytes", ErrCorrupt, np, len(r.b))
		}
		if np > 0 {
			w.Puts = make([]msg.Entry, 0, np)
		}
		for range np {
			e := msg.Entry{Pos: r.uvarint()}
			e.Record.ID.Client = r.uvarint()
			e.Record.ID.Seq = r.uvarint()
			l := r.uvarint()
			if r.err != nil {
				break
			}
			if l > uint64(len(r.b)) {
				return nil, fmt.Errorf("%w: record of %d bytes, %d left", ErrCorrupt, l, len(r.b))
			}
			if l > 0 {
				e.Record.Data = append([]byte(nil), r.b[:l]...)
			}
			r.b = r.b[l:]
			w.Puts = append(w.Puts, e)
		}
		if r.err != nil {
			return nil, r.err
		}
		ws = append(ws, w)
	}
	if r.err != nil {
		return nil, r.err
	}
	if len(r.b) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrCorrupt, len(r.b))
	}
	return ws, nil
}

// encodeChunk returns one stream message holding chunk of group.
func encodeChunk(group uint64, last bool, chunk []byte) []byte {
	b := make([]byte, headerLen, headerLen+len(chunk))
	b[0] = formatVersion
	if last {
		b[1] = flagLast
	}
	binary.BigEndian.PutUint64(b[2:10], group)
	b = append(b, chunk...)
	crc := crc32.Update(crc32.Checksum(b[:10], castagnoli), castagnoli, chunk)
	binary.BigEndian.PutUint32(b[10:14], crc)
	return b
}

// decodeChunk checks and splits one stream message. The chunk aliases m.
func decodeChunk(m []byte) (group uint64, last bool, chunk []byte, err error) {
	if len(m) < headerLen {
		return 0, false, nil, fmt.Errorf("%w: %d-byte message", ErrCorrupt, len(m))
	}
	if m[0] != formatVersion {
		return 0, false, nil, fmt.Errorf("%w: format version %d, want %d", ErrCorrupt, m[0], formatVersion)
	}
	if m[1]&^flagLast != 0 {
		return 0, false, nil, fmt.Errorf("%w: unknown flags %#x", ErrCorrupt, m[1])
	}
	crc := crc32.Update(crc32.Checksum(m[:10], castagnoli), castagnoli, m[headerLen:])
	if crc != binary.BigEndian.Uint32(m[10:14]) {
		return 0, false, nil, fmt.Errorf("%w: checksum mismatch", ErrCorrupt)
	}
	return binary.BigEndian.Uint64(m[2:10]), m[1]&flagLast != 0, m[headerLen:], nil
}
