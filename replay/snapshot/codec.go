// Package snapshot stores incremental snapshots of simulation shards: the
// state tables' captures (replay/table), zstd-compressed and checksummed
// (CRC32C), as chains of deltas on a periodic full base, each with the tick,
// the log position and the state hash it was taken at.
//
// The tick loop only copies dirty pages (table.Set.CaptureInto); a Writer
// compresses and stores them in the background; a Policy decides when to
// capture from the dirty rate and a recovery-time target; Latest finds and
// restores the newest complete chain. A Store keeps the bytes: Pebble by
// default, memory for tests.
package snapshot

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"reflect"
	"sync"

	"github.com/anoptic/broadside/replay/table"
	"github.com/klauspost/compress/zstd"
)

// ErrCorrupt is wrapped by every error about stored snapshot bytes that are
// malformed, fail their checksum or are inconsistent with their metadata.
var ErrCorrupt = errors.New("snapshot: corrupt")

// Limits on decoded snapshots, so that bytes from storage can never make a
// decoder allocate without bound.
const (
	// MaxRawBytes bounds the uncompressed size of one snapshot's table
	// captures.
	MaxRawBytes = 1 << 30
	// MaxChainLen bounds the number of snapshots in a chain (base
	// included).
	MaxChainLen = 1 << 16
)

// Meta describes one stored snapshot of one shard.
type Meta struct {
	// Shard is the simulation shard.
	Shard uint32
	// Tick is the tick after whose Step the state was captured; it keys the
	// snapshot within the shard.
	Tick uint64
	// Pos is the log position of the TICK(Tick) marker: replay resumes
	// after it.
	Pos uint64
	// Hash is the sim's state hash after Step(Tick) (Sim.Hash).
	Hash uint64
	// SetHash is the table set's hash recorded by the capture.
	SetHash uint64
	// Full is true for a base (every page); false for a delta.
	Full bool
	// Base is the tick of the chain's full snapshot (Tick when Full).
	Base uint64
	// Prev is the tick of the previous snapshot of the chain (0 when
	// Full).
	Prev uint64
	// Epoch is the table capture epoch (the same for every table of the
	// set); a delta's epoch follows its predecessor's.
	Epoch uint64
	// OutputSeq is the number of outputs the shard had produced through
	// Tick: the runner's next output record id follows it.
	OutputSeq uint64
	// RawBytes is the length of the encoded table captures; StoredBytes of
	// their compressed form.
	RawBytes, StoredBytes uint64
	// ChainLen counts the snapshots of the chain from the base to this one
	// (1 for a base); ChainRawBytes sums their RawBytes (the restore work).
	ChainLen      uint32
	ChainRawBytes uint64
	// Fences is the shard's fencing state at Tick (replay.Runner's: the
	// lease epoch current for each source shard whose outputs carry one,
	// sorted by shard); empty in a world without leases.
	Fences []Fence
}

// Equal reports whether m and o are the same metadata.
func (m Meta) Equal(o Meta) bool {
	return reflect.DeepEqual(m, o)
}

// Fence is the fencing state of one source shard's outputs at a log
// position: the epoch of its newest lease claim, and Base, the number of
// its valid outputs before that claim (the new owner's first output is
// Base+1); for the snapshot's own shard, Seen is the newest of its valid
// outputs at or before Pos (a restored runner re-appends those after it).
type Fence struct {
	Shard             uint32
	Epoch, Base, Seen uint64
}

// MaxFences bounds the fence entries of one snapshot.
const MaxFences = 1 << 16

// Encoded snapshot (all integers little-endian):
//
//	magic "BSSN" | version u8 = 1 | flags u8 (bit 0: full) | reserved u16 = 0
//	shard u32 | chain length u32
//	tick u64 | pos u64 | hash u64 | set hash u64 | base u64 | prev u64
//	epoch u64 | output seq u64 | raw bytes u64 | stored bytes u64
//	chain raw bytes u64
//	payload: stored-bytes bytes (zstd frame of a table.SetCapture encoding)
//	crc32c u32 of everything before it
//
// Version 2 (written only when Fences is not empty) follows the header
// with the fences: count u32, then per fence shard u32 | epoch u64 | base
// u64 | seen u64, in increasing shard order.
//
// The metadata alone (what Store.List returns) is the same header with an
// empty payload (stored bytes as recorded) and its own checksum.
const (
	magic     = "BSSN"
	version   = 1
	flagFull  = 1
	headerLen = 8 + 8 + 11*8
	// MetaLen is the length of an encoded Meta without fences
	// (EncodeMeta).
	MetaLen       = headerLen + 4
	versionFenced = 2
	fenceLen      = 4 + 8 + 8 + 8
)

// encodedHeaderLen returns the length of m's header, fences included.
func encodedHeaderLen(m *Meta) int {
	if len(m.Fences) == 0 {
		return headerLen
	}
	return headerLen + 4 + fenceLen*len(m.Fences)
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func appendHeader(b []byte, m *Meta) []byte {
	le := binary.LittleEndian
	var flags byte
	if m.Full {
		flags |= flagFull
	}
	b = append(b, magic...)
	v := byte(version)
	if len(m.Fences) > 0 {
		v = versionFenced
	}
	b = append(b, v, flags, 0, 0)
	b = le.AppendUint32(b, m.Shard)
	b = le.AppendUint32(b, m.ChainLen)
	for _, v := range [...]uint64{m.Tick, m.Pos, m.Hash, m.SetHash, m.Base, m.Prev, m.Epoch, m.OutputSeq, m.RawBytes, m.StoredBytes, m.ChainRawBytes} {
		b = le.AppendUint64(b, v)
	}
	if len(m.Fences) > 0 {
		b = le.AppendUint32(b, uint32(len(m.Fences)))
		for _, f := range m.Fences {
			b = le.AppendUint32(b, f.Shard)
			b = le.AppendUint64(b, f.Epoch)
			b = le.AppendUint64(b, f.Base)
			b = le.AppendUint64(b, f.Seen)
		}
	}
	return b
}

// Validate checks the metadata's internal consistency.
func (m *Meta) Validate() error {
	switch {
	case m.Tick == 0 || m.Pos == 0:
		return fmt.Errorf("%w: shard %d: snapshot at tick %d position %d", ErrCorrupt, m.Shard, m.Tick, m.Pos)
	case m.Epoch == 0:
		return fmt.Errorf("%w: shard %d tick %d: epoch 0", ErrCorrupt, m.Shard, m.Tick)
	case m.RawBytes > MaxRawBytes || m.StoredBytes > MaxRawBytes:
		return fmt.Errorf("%w: shard %d tick %d: %d raw, %d stored bytes", ErrCorrupt, m.Shard, m.Tick, m.RawBytes, m.StoredBytes)
	case m.ChainLen == 0 || m.ChainLen > MaxChainLen || m.ChainRawBytes < m.RawBytes:
		return fmt.Errorf("%w: shard %d tick %d: chain of %d (%d raw bytes)", ErrCorrupt, m.Shard, m.Tick, m.ChainLen, m.ChainRawBytes)
	}
	if len(m.Fences) > MaxFences {
		return fmt.Errorf("%w: shard %d tick %d: %d fences", ErrCorrupt, m.Shard, m.Tick, len(m.Fences))
	}
	for i, f := range m.Fences {
		if f.Epoch == 0 || (i > 0 && f.Shard <= m.Fences[i-1].Shard) {
			return fmt.Errorf("%w: shard %d tick %d: fence %d (shard %d epoch %d) out of order or empty", ErrCorrupt, m.Shard, m.Tick, i, f.Shard, f.Epoch)
		}
	}
	if m.Full {
		if m.Base != m.Tick || m.Prev != 0 || m.ChainLen != 1 || m.ChainRawBytes != m.RawBytes {
			return fmt.Errorf("%w: shard %d tick %d: full snapshot with base %d prev %d chain %d", ErrCorrupt, m.Shard, m.Tick, m.Base, m.Prev, m.ChainLen)
		}
		return nil
	}
	if m.Prev >= m.Tick || m.Base > m.Prev || m.ChainLen < 2 || m.Epoch < 2 {
		return fmt.Errorf("%w: shard %d tick %d: delta with base %d prev %d chain %d epoch %d", ErrCorrupt, m.Shard, m.Tick, m.Base, m.Prev, m.ChainLen, m.Epoch)
	}
	return nil
}

// EncodeMeta returns m's encoding (MetaLen bytes without fences), as
// stores keep it for listing.
func EncodeMeta(m Meta) []byte {
	b := appendHeader(make([]byte, 0, encodedHeaderLen(&m)+4), &m)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// DecodeMeta decodes and validates an encoded Meta. It never panics.
func DecodeMeta(b []byte) (Meta, error) {
	if len(b) < MetaLen {
		return Meta{}, fmt.Errorf("%w: metadata of %d bytes, want %d or more", ErrCorrupt, len(b), MetaLen)
	}
	n := len(b) - 4
	if got, want := crc32.Checksum(b[:n], castagnoli), binary.LittleEndian.Uint32(b[n:]); got != want {
		return Meta{}, fmt.Errorf("%w: metadata checksum %#x, want %#x", ErrCorrupt, got, want)
	}
	m, hl, err := decodeHeader(b[:n])
	if err == nil && hl != n {
		return Meta{}, fmt.Errorf("%w: metadata of %d bytes, header of %d", ErrCorrupt, n, hl)
	}
	return m, err
}

// decodeHeader decodes the header at the start of b and returns its length.
func decodeHeader(b []byte) (Meta, int, error) {
	m, n, err := decodeHeaderOnly(b)
	if err != nil {
		return Meta{}, 0, err
	}
	if err := m.Validate(); err != nil {
		return Meta{}, 0, err
	}
	return m, n, nil
}

func decodeHeaderOnly(b []byte) (Meta, int, error) {
	if len(b) < headerLen {
		return Meta{}, 0, fmt.Errorf("%w: %d bytes", ErrCorrupt, len(b))
	}
	if string(b[:4]) != magic || (b[4] != version && b[4] != versionFenced) || b[5]&^flagFull != 0 || b[6] != 0 || b[7] != 0 {
		return Meta{}, 0, fmt.Errorf("%w: bad header", ErrCorrupt)
	}
	le := binary.LittleEndian
	m := Meta{Full: b[5]&flagFull != 0, Shard: le.Uint32(b[8:]), ChainLen: le.Uint32(b[12:])}
	vals := [...]*uint64{&m.Tick, &m.Pos, &m.Hash, &m.SetHash, &m.Base, &m.Prev, &m.Epoch, &m.OutputSeq, &m.RawBytes, &m.StoredBytes, &m.ChainRawBytes}
	for k, p := range vals {
		*p = le.Uint64(b[16+8*k:])
	}
	if b[4] == version {
		return m, headerLen, nil
	}
	if len(b) < headerLen+4 {
		return Meta{}, 0, fmt.Errorf("%w: fenced header of %d bytes", ErrCorrupt, len(b))
	}
	count := le.Uint32(b[headerLen:])
	if count == 0 || count > MaxFences || uint64(len(b)-headerLen-4) < uint64(count)*fenceLen {
		return Meta{}, 0, fmt.Errorf("%w: %d fences in %d bytes", ErrCorrupt, count, len(b)-headerLen-4)
	}
	m.Fences = make([]Fence, count)
	off := headerLen + 4
	for i := range m.Fences {
		m.Fences[i] = Fence{Shard: le.Uint32(b[off:]), Epoch: le.Uint64(b[off+4:]), Base: le.Uint64(b[off+12:]), Seen: le.Uint64(b[off+20:])}
		off += fenceLen
	}
	return m, off, nil
}

// Codec compresses and decompresses snapshot payloads. It holds one zstd
// encoder and one decoder, reused for every snapshot; it is safe for
// concurrent use.
type Codec struct {
	enc *zstd.Encoder
	dec *zstd.Decoder
}

// NewCodec returns a codec compressing at level (zstd.SpeedFastest is a
// good default for snapshots: they are written often and read rarely).
func NewCodec(level zstd.EncoderLevel) (*Codec, error) {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(level), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return nil, fmt.Errorf("snapshot: zstd encoder: %w", err)
	}
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1),
		zstd.WithDecoderMaxMemory(MaxRawBytes), zstd.WithDecoderMaxWindow(1<<26))
	if err != nil {
		return nil, fmt.Errorf("snapshot: zstd decoder: %w", err)
	}
	return &Codec{enc: enc, dec: dec}, nil
}

var (
	defaultCodecOnce sync.Once
	defaultCodec     *Codec
	defaultCodecErr  error
)

// DefaultCodec returns a shared codec at zstd.SpeedFastest.
func DefaultCodec() (*Codec, error) {
	defaultCodecOnce.Do(func() { defaultCodec, defaultCodecErr = NewCodec(zstd.SpeedFastest) })
	return defaultCodec, defaultCodecErr
}

// Encode appends the encoded snapshot of meta and the raw table-capture
// encoding raw to dst. It sets meta.RawBytes and meta.StoredBytes (and, for
// a base, ChainRawBytes) and returns the updated meta. scratch, if large
// enough, holds the compressed payload on the way.
func (c *Codec) Encode(dst []byte, meta Meta, raw, scratch []byte) ([]byte, Meta, []byte, error) {
	scratch = c.enc.EncodeAll(raw, scratch[:0])
	meta.RawBytes, meta.StoredBytes = uint64(len(raw)), uint64(len(scratch))
	if meta.Full {
		meta.ChainRawBytes = meta.RawBytes
	}
	if err := meta.Validate(); err != nil {
		return dst, meta, scratch, fmt.Errorf("snapshot: encode: %w", err)
	}
	start := len(dst)
	dst = appendHeader(dst, &meta)
	dst = append(dst, scratch...)
	dst = binary.LittleEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
	return dst, meta, scratch, nil
}

// Decode verifies an encoded snapshot and returns its metadata and table
// captures. It never panics and bounds its allocations by the recorded
// sizes, themselves bounded by MaxRawBytes. Every malformed input yields an
// error wrapping ErrCorrupt.
func (c *Codec) Decode(b []byte) (Meta, *table.SetCapture, error) {
	if len(b) < headerLen+4 {
		return Meta{}, nil, fmt.Errorf("%w: snapshot of %d bytes", ErrCorrupt, len(b))
	}
	body := b[:len(b)-4]
	if got, want := crc32.Checksum(body, castagnoli), binary.LittleEndian.Uint32(b[len(b)-4:]); got != want {
		return Meta{}, nil, fmt.Errorf("%w: checksum %#x, want %#x", ErrCorrupt, got, want)
	}
	m, hl, err := decodeHeader(body)
	if err != nil {
		return Meta{}, nil, err
	}
	payload := body[hl:]
	if uint64(len(payload)) != m.StoredBytes {
		return Meta{}, nil, fmt.Errorf("%w: shard %d tick %d: payload of %d bytes, recorded %d", ErrCorrupt, m.Shard, m.Tick, len(payload), m.StoredBytes)
	}
	raw, err := c.dec.DecodeAll(payload, make([]byte, 0, m.RawBytes))
	if err != nil {
		return Meta{}, nil, fmt.Errorf("%w: shard %d tick %d: decompress: %v", ErrCorrupt, m.Shard, m.Tick, err)
	}
	if uint64(len(raw)) != m.RawBytes {
		return Meta{}, nil, fmt.Errorf("%w: shard %d tick %d: %d raw bytes, recorded %d", ErrCorrupt, m.Shard, m.Tick, len(raw), m.RawBytes)
	}
	sc := new(table.SetCapture)
	if err := sc.UnmarshalBinary(raw); err != nil {
		return Meta{}, nil, fmt.Errorf("%w: shard %d tick %d: %v", ErrCorrupt, m.Shard, m.Tick, err)
	}
	if err := checkCapture(&m, sc); err != nil {
		return Meta{}, nil, err
	}
	return m, sc, nil
}

// checkCapture checks that a decoded capture agrees with its metadata.
func checkCapture(m *Meta, sc *table.SetCapture) error {
	if sc.Full != m.Full || sc.Hash != m.SetHash {
		return fmt.Errorf("%w: shard %d tick %d: capture full=%v hash %#x, recorded full=%v hash %#x",
			ErrCorrupt, m.Shard, m.Tick, sc.Full, sc.Hash, m.Full, m.SetHash)
	}
	for _, tc := range sc.Tables {
		if tc.Epoch != m.Epoch {
			return fmt.Errorf("%w: shard %d tick %d: table %d epoch %d, recorded %d", ErrCorrupt, m.Shard, m.Tick, tc.TableID, tc.Epoch, m.Epoch)
		}
	}
	return nil
}

// CaptureEpoch returns the epoch shared by every table capture of sc, or an
// error if they differ (the set was not captured as a whole).
func CaptureEpoch(sc *table.SetCapture) (uint64, error) {
	if len(sc.Tables) == 0 {
		return 0, fmt.Errorf("snapshot: capture of no tables")
	}
	e := sc.Tables[0].Epoch
	for _, tc := range sc.Tables[1:] {
		if tc.Epoch != e {
			return 0, fmt.Errorf("snapshot: tables captured at epochs %d and %d", e, tc.Epoch)
		}
	}
	return e, nil
}
