package bsr

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"github.com/anoptic/broadside/cmdlog/msg"
)

// TickRecord is what a recording holds about one tick.
type TickRecord struct {
	Tick uint64
	// Pos is the log position of the TICK marker that stepped the tick
	// (for a gap tick, the marker of the next tick the log did mark).
	Pos uint64
	// Gap is true for a tick the log skipped: it was stepped with no
	// input when a later marker arrived.
	Gap bool
	// Hashes holds every shard's state hash after the tick.
	Hashes []uint64
}

// ticksChunk is a decoded KindTicks payload.
type ticksChunk struct {
	first  uint64
	pos    []uint64
	gap    []bool
	hashes []uint64 // len(pos) × shards, tick-major
	shards int
}

func (t *ticksChunk) last() uint64 { return t.first + uint64(len(t.pos)) - 1 }

func (t *ticksChunk) record(tick uint64) TickRecord {
	i := int(tick - t.first)
	return TickRecord{Tick: tick, Pos: t.pos[i], Gap: t.gap[i], Hashes: t.hashes[i*t.shards : (i+1)*t.shards : (i+1)*t.shards]}
}

func (t *ticksChunk) hash(shard uint32, tick uint64) uint64 {
	return t.hashes[int(tick-t.first)*t.shards+int(shard)]
}

// appendTicks encodes ticks (consecutive, all with len(Hashes) == shards)
// after the marker at prevPos.
func appendTicks(b []byte, prevPos uint64, ticks []TickRecord) []byte {
	for _, t := range ticks {
		b = binary.AppendUvarint(b, t.Pos-prevPos)
		prevPos = t.Pos
		var flags byte
		if t.Gap {
			flags = 1
		}
		b = append(b, flags)
		for _, h := range t.Hashes {
			b = binary.LittleEndian.AppendUint64(b, h)
		}
	}
	return b
}

// decodeTicks decodes the payload of ticks chunk c.
func decodeTicks(raw []byte, c *chunkRef, shards int) (*ticksChunk, error) {
	n := int(c.Last - c.First + 1)
	per := 1 + 1 + 8*shards // smallest encoding of one tick
	if len(raw) < n*per || shards <= 0 {
		return nil, fmt.Errorf("%w: %s: %d bytes for %d ticks of %d shards", ErrCorrupt, c.describe(), len(raw), n, shards)
	}
	t := &ticksChunk{first: c.First, pos: make([]uint64, n), gap: make([]bool, n), hashes: make([]uint64, n*shards), shards: shards}
	pos := c.Aux1
	prevGap := false
	for i := range n {
		d, k := binary.Uvarint(raw)
		if k <= 0 || len(raw)-k < 1+8*shards || d > c.Aux2-pos {
			return nil, fmt.Errorf("%w: %s: tick %d malformed", ErrCorrupt, c.describe(), c.First+uint64(i))
		}
		raw = raw[k:]
		pos += d
		// A tick has a marker of its own unless the tick before it was a
		// gap: gap ticks share the marker of the next tick the log marked.
		if raw[0]&^1 != 0 || prevGap != (d == 0) {
			return nil, fmt.Errorf("%w: %s: tick %d flags %d, marker delta %d", ErrCorrupt, c.describe(), c.First+uint64(i), raw[0], d)
		}
		prevGap = raw[0] == 1
		t.pos[i], t.gap[i] = pos, prevGap
		raw = raw[1:]
		for s := range shards {
			t.hashes[i*shards+s] = binary.LittleEndian.Uint64(raw[8*s:])
		}
		raw = raw[8*shards:]
	}
	if len(raw) != 0 || pos != c.Aux2 || t.gap[n-1] {
		return nil, fmt.Errorf("%w: %s: ends at position %d (recorded %d), %d trailing bytes", ErrCorrupt, c.describe(), pos, c.Aux2, len(raw))
	}
	return t, nil
}

// appendEntries encodes log entries (strictly increasing positions above
// prevPos).
func appendEntries(b []byte, prevPos uint64, entries []msg.Entry) []byte {
	b = binary.AppendUvarint(b, uint64(len(entries)))
	for _, e := range entries {
		b = binary.AppendUvarint(b, e.Pos-prevPos)
		prevPos = e.Pos
		b = binary.AppendUvarint(b, e.Record.ID.Client)
		b = binary.AppendUvarint(b, e.Record.ID.Seq)
		b = binary.AppendUvarint(b, uint64(len(e.Record.Data)))
		b = append(b, e.Record.Data...)
	}
	return b
}

// decodeEntries decodes the payload of commands chunk c. The entries'
// data alias raw.
// entriesDecodedSize estimates the memory of n decoded entries of a
// payload of raw bytes (their data aliases the payload).
func entriesDecodedSize(n, raw int) int {
	return n*int(unsafe.Sizeof(msg.Entry{})) + raw
}

func decodeEntries(raw []byte, c *chunkRef) ([]msg.Entry, error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: "+format, append([]any{ErrCorrupt, c.describe()}, args...)...)
	}
	n, k := binary.Uvarint(raw)
	if k <= 0 {
		return nil, fail("no entry count")
	}
	raw = raw[k:]
	// Every entry takes at least 4 bytes: bound the count by the input.
	if n == 0 || n > uint64(len(raw))/4 {
		return nil, fail("%d entries in %d bytes", n, len(raw))
	}
	if dec := entriesDecodedSize(int(n), len(raw)); dec > MaxChunkDecoded {
		return nil, fail("%d entries would take %d bytes decoded, over the budget of %d", n, dec, MaxChunkDecoded)
	}
	entries := make([]msg.Entry, n)
	pos := c.Aux1
	for i := range entries {
		var v [4]uint64
		for f := range v {
			x, k := binary.Uvarint(raw)
			if k <= 0 {
				return nil, fail("entry %d malformed", i)
			}
			v[f], raw = x, raw[k:]
		}
		if v[0] == 0 || v[0] > c.Aux2-pos {
			return nil, fail("entry %d at position %d + %d beyond %d", i, pos, v[0], c.Aux2)
		}
		if v[3] > uint64(len(raw)) {
			return nil, fail("entry %d of %d bytes beyond the chunk", i, v[3])
		}
		pos += v[0]
		data := raw[:v[3]:v[3]]
		raw = raw[v[3]:]
		entries[i] = msg.Entry{Pos: pos, Record: msg.Record{ID: msg.RecordID{Client: v[1], Seq: v[2]}, Data: data}}
	}
	if len(raw) != 0 || pos != c.Aux2 {
		return nil, fail("ends at position %d (recorded %d), %d trailing bytes", pos, c.Aux2, len(raw))
	}
	return entries, nil
}

func appendMeta(b []byte, name string, value []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(name)))
	b = append(b, name...)
	return append(b, value...)
}

func decodeMeta(raw []byte, c *chunkRef) (string, []byte, error) {
	n, k := binary.Uvarint(raw)
	if k <= 0 || n > uint64(len(raw)-k) || n > 255 {
		return "", nil, fmt.Errorf("%w: %s: malformed name", ErrCorrupt, c.describe())
	}
	return string(raw[k : k+int(n)]), raw[k+int(n):], nil
}

// appendIndex encodes an index of refs.
func appendIndex(b []byte, refs []chunkRef) []byte {
	b = binary.AppendUvarint(b, uint64(len(refs)))
	for i := range refs {
		c := &refs[i]
		b = binary.AppendUvarint(b, uint64(c.Off))
		b = append(b, byte(c.Kind), c.Flags)
		for _, v := range [...]uint64{uint64(c.Shard), uint64(c.Raw), uint64(c.Stored), c.First, c.Last, c.Aux1, c.Aux2} {
			b = binary.AppendUvarint(b, v)
		}
	}
	return b
}

// decodeIndex decodes an index payload and checks every entry's header
// fields and that the chunks lie, in order and without overlap, between
// dataStart and end.
func decodeIndex(raw []byte, shards uint32, dataStart, end int64) ([]chunkRef, error) {
	n, k := binary.Uvarint(raw)
	// An entry takes at least 10 bytes here and its chunk at least
	// chunkOverhead+1 bytes of the file: bound the count before allocating.
	if k <= 0 || n > MaxIndexEntries || n > uint64(len(raw)-k)/10 || n > uint64(max(0, end-dataStart))/(chunkOverhead+1) {
		return nil, fmt.Errorf("%w: index of %d entries in %d bytes", ErrCorrupt, n, len(raw))
	}
	raw = raw[k:]
	refs := make([]chunkRef, n)
	next := dataStart
	for i := range refs {
		var v [8]uint64
		off, k := binary.Uvarint(raw)
		if k <= 0 || len(raw)-k < 2 {
			return nil, fmt.Errorf("%w: index entry %d malformed", ErrCorrupt, i)
		}
		kind, flags := raw[k], raw[k+1]
		raw = raw[k+2:]
		for f := range 7 {
			x, k := binary.Uvarint(raw)
			if k <= 0 {
				return nil, fmt.Errorf("%w: index entry %d malformed", ErrCorrupt, i)
			}
			v[f], raw = x, raw[k:]
		}
		if v[0] > uint64(^uint32(0)) || v[1] > uint64(^uint32(0)) || v[2] > uint64(^uint32(0)) || off > 1<<62 {
			return nil, fmt.Errorf("%w: index entry %d out of range", ErrCorrupt, i)
		}
		c := chunkRef{Kind: ChunkKind(kind), Flags: flags, Shard: uint32(v[0]), Raw: uint32(v[1]), Stored: uint32(v[2]),
			First: v[3], Last: v[4], Aux1: v[5], Aux2: v[6], Off: int64(off)}
		if err := c.check(shards); err != nil {
			return nil, fmt.Errorf("index entry %d: %w", i, err)
		}
		if c.Kind == KindIndex || c.Off < next || c.Off > end-c.size() {
			return nil, fmt.Errorf("%w: index entry %d: %s out of place", ErrCorrupt, i, c.describe())
		}
		next = c.Off + c.size()
		refs[i] = c
	}
	if len(raw) != 0 {
		return nil, fmt.Errorf("%w: index has %d trailing bytes", ErrCorrupt, len(raw))
	}
	return refs, nil
}
