package shardstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/cmdlog/shard"
)

// ErrCorrupt is wrapped by every error that reports stored bytes which fail
// validation (bad checksum, malformed varint, bad key). Callers branch on it
// with errors.Is; the store never panics on such bytes.
var ErrCorrupt = errors.New("shardstore: corrupt data")

// Key layout. Every key starts with a one-byte prefix so the kinds of record
// never interleave; entry keys are the prefix followed by the big-endian
// position, so byte order is position order.
//
// The Meta key sorts after every entry. It is rewritten with nearly every
// batch, so every memtable Pebble flushes holds it beside that memtable's
// entries, and a table's key range runs from its first entry to the Meta
// key. Were the Meta key below the entries (as in format 1), each new table's
// range would cover every entry stored before it, and each compaction into
// the next level would rewrite that whole level: write amplification that
// grows with the store (a quarter of the CPU of `bench log` at 4 KiB). Above
// the entries, a new table overlaps only the newest table of the level below.
const (
	prefixFormat byte = 0x00 // the format marker (one key)
	prefixMetaV1 byte = 0x01 // shard.Meta in format 1 (moved by Open)
	prefixEntry  byte = 0x02 // entries: prefixEntry + uint64 big-endian position
	prefixEnd    byte = 0x03 // exclusive upper bound of the entry key space
	prefixMeta   byte = 0x04 // shard.Meta (one key)

	entryKeyLen = 1 + 8
	crcLen      = 4
)

// formatVersion is stored under the format key when a store is created.
// Open moves a store of formatV1 to it and refuses any other.
const (
	formatVersion = "broadside-shardstore/2"
	formatV1      = "broadside-shardstore/1"
)

var (
	keyFormat     = []byte{prefixFormat}
	keyMeta       = []byte{prefixMeta}
	keyMetaV1     = []byte{prefixMetaV1}
	keyEntriesEnd = []byte{prefixEnd}
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// entryKey returns the key of position pos.
func entryKey(pos uint64) []byte {
	var k [entryKeyLen]byte
	k[0] = prefixEntry
	binary.BigEndian.PutUint64(k[1:], pos)
	return k[:]
}

// entryUpperBound returns the exclusive upper bound of the keys of positions
// <= pos.
func entryUpperBound(pos uint64) []byte {
	if pos == math.MaxUint64 {
		return keyEntriesEnd
	}
	return entryKey(pos + 1)
}

// decodeEntryKey returns the position stored in an entry key.
func decodeEntryKey(key []byte) (uint64, error) {
	if len(key) != entryKeyLen || key[0] != prefixEntry {
		return 0, fmt.Errorf("%w: entry key %x", ErrCorrupt, key)
	}
	return binary.BigEndian.Uint64(key[1:]), nil
}

// entryChecksum is the CRC32C of the position (big-endian) followed by the
// body of the value. Covering the position means a value that ends up under
// another key is detected too.
//
// It equals crc32.Checksum(bigEndian(pos) || body, castagnoli), but folds the
// position in byte by byte with the table: passing a stack array to crc32
// would move it to the heap (one allocation per entry read).
func entryChecksum(pos uint64, body []byte) uint32 {
	crc := ^uint32(0)
	for shift := 56; shift >= 0; shift -= 8 {
		crc = castagnoli[byte(crc)^byte(pos>>shift)] ^ crc>>8
	}
	return crc32.Update(^crc, castagnoli, body)
}

// appendEntryValue appends the stored form of e to dst:
//
//	crc32c (4 bytes, little-endian) | uvarint client | uvarint seq | data
//
// The checksum covers the position and everything after it.
func appendEntryValue(dst []byte, e msg.Entry) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst = binary.AppendUvarint(dst, e.Record.ID.Client)
	dst = binary.AppendUvarint(dst, e.Record.ID.Seq)
	dst = append(dst, e.Record.Data...)
	binary.LittleEndian.PutUint32(dst[start:], entryChecksum(e.Pos, dst[start+crcLen:]))
	return dst
}

// decodeEntry decodes the value stored for position pos. It verifies the
// checksum, accepts only minimal varints (so every valid value has exactly
// one encoding), and copies the data: value may be a buffer the caller
// reuses. Empty data decodes as nil.
func decodeEntry(pos uint64, value []byte) (msg.Entry, error) {
	if len(value) < crcLen {
		return msg.Entry{}, fmt.Errorf("%w: entry %d: value of %d bytes", ErrCorrupt, pos, len(value))
	}
	body := value[crcLen:]
	if got, want := entryChecksum(pos, body), binary.LittleEndian.Uint32(value); got != want {
		return msg.Entry{}, fmt.Errorf("%w: entry %d: checksum %08x, stored %08x", ErrCorrupt, pos, got, want)
	}
	client, n := readUvarint(body)
	if n <= 0 {
		return msg.Entry{}, fmt.Errorf("%w: entry %d: bad client id", ErrCorrupt, pos)
	}
	body = body[n:]
	seq, n := readUvarint(body)
	if n <= 0 {
		return msg.Entry{}, fmt.Errorf("%w: entry %d: bad request seq", ErrCorrupt, pos)
	}
	body = body[n:]
	e := msg.Entry{Pos: pos, Record: msg.Record{ID: msg.RecordID{Client: client, Seq: seq}}}
	if len(body) > 0 {
		e.Record.Data = append([]byte(nil), body...)
	}
	return e, nil
}

// encodeMeta returns the stored form of m:
//
//	crc32c (4 bytes, little-endian) | uvarint epoch | uvarint stable-gp | uvarint trimmed
func encodeMeta(m shard.Meta) []byte {
	b := make([]byte, crcLen, crcLen+3*binary.MaxVarintLen64)
	b = binary.AppendUvarint(b, m.Epoch)
	b = binary.AppendUvarint(b, m.StableGP)
	b = binary.AppendUvarint(b, m.Trimmed)
	binary.LittleEndian.PutUint32(b, crc32.Checksum(b[crcLen:], castagnoli))
	return b
}

// decodeMeta decodes a value written by encodeMeta.
func decodeMeta(value []byte) (shard.Meta, error) {
	if len(value) < crcLen {
		return shard.Meta{}, fmt.Errorf("%w: meta: value of %d bytes", ErrCorrupt, len(value))
	}
	body := value[crcLen:]
	if got, want := crc32.Checksum(body, castagnoli), binary.LittleEndian.Uint32(value); got != want {
		return shard.Meta{}, fmt.Errorf("%w: meta: checksum %08x, stored %08x", ErrCorrupt, got, want)
	}
	var fields [3]uint64
	for i := range fields {
		v, n := readUvarint(body)
		if n <= 0 {
			return shard.Meta{}, fmt.Errorf("%w: meta: bad field %d", ErrCorrupt, i)
		}
		fields[i] = v
		body = body[n:]
	}
	if len(body) != 0 {
		return shard.Meta{}, fmt.Errorf("%w: meta: %d trailing bytes", ErrCorrupt, len(body))
	}
	return shard.Meta{Epoch: fields[0], StableGP: fields[1], Trimmed: fields[2]}, nil
}

// readUvarint is binary.Uvarint that also rejects non-minimal encodings
// (n <= 0 on any error).
func readUvarint(b []byte) (uint64, int) {
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, -1
	}
	if n > 1 && b[n-1] == 0 { // a trailing zero group adds nothing: overlong
		return 0, -1
	}
	return v, n
}
