package lineage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// ShardID names a simulation shard (a sector of a world). Lineage is
// recorded per shard and followed across shards: entity ids are stable when
// an entity migrates.
type ShardID uint32

// EventKind says what an Event records.
type EventKind uint8

// Event kinds.
const (
	// EventCommand: the command at log position Arg was applied to Entity.
	EventCommand EventKind = 1
	// EventDerived: Entity's state was derived from entity Arg's state.
	EventDerived EventKind = 2
)

// String names k.
func (k EventKind) String() string {
	switch k {
	case EventCommand:
		return "command"
	case EventDerived:
		return "derived"
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Event is one lineage event of a tick, as reported to a Recorder.
type Event struct {
	// Entity is the entity whose state the event is about.
	Entity EntityID
	// Arg is the command's log position (EventCommand) or the source
	// entity (EventDerived).
	Arg uint64
	// Kind says which.
	Kind EventKind
}

// CommandEvent returns the event of command pos applied to e.
func CommandEvent(e EntityID, pos uint64) Event {
	return Event{Entity: e, Arg: pos, Kind: EventCommand}
}

// DerivedEvent returns the event of e derived from from.
func DerivedEvent(e, from EntityID) Event {
	return Event{Entity: e, Arg: uint64(from), Kind: EventDerived}
}

// CommandInfo describes one log record that was input to a tick of a
// shard: what queries report about a command. Kind is game-defined (0 is
// conventionally an engine record such as a migration); names for kinds
// are kept in the Store (see KindNames).
type CommandInfo struct {
	Pos    uint64
	Player uint32
	Tick   uint64
	Kind   uint8
}

// Range is the lineage of one shard over consecutive ticks FirstTick,
// FirstTick+1, …: per tick, the records input to it (in log order) and the
// events the sim reported (in the order it reported them). Ticks are
// delimited by cumulative end offsets: tick FirstTick+i has inputs
// Inputs[InputEnds[i-1]:InputEnds[i]] (InputEnds[-1] = 0) and likewise for
// events. A Range is the unit of encoding and storage.
type Range struct {
	Shard     ShardID
	FirstTick uint64
	InputEnds []int
	EventEnds []int
	// Inputs' Tick fields equal the tick they are input to.
	Inputs []CommandInfo
	Events []Event
}

// Ticks returns the number of ticks in r.
func (r *Range) Ticks() int { return len(r.EventEnds) }

// LastTick returns r's last tick (FirstTick-1 if r has no ticks).
func (r *Range) LastTick() uint64 { return r.FirstTick + uint64(len(r.EventEnds)) - 1 }

// TickInputs returns the inputs of tick FirstTick+i.
func (r *Range) TickInputs(i int) []CommandInfo {
	lo := 0
	if i > 0 {
		lo = r.InputEnds[i-1]
	}
	return r.Inputs[lo:r.InputEnds[i]]
}

// TickEvents returns the events of tick FirstTick+i.
func (r *Range) TickEvents(i int) []Event {
	lo := 0
	if i > 0 {
		lo = r.EventEnds[i-1]
	}
	return r.Events[lo:r.EventEnds[i]]
}

// Reset empties r, keeping its buffers.
func (r *Range) Reset(shard ShardID, firstTick uint64) {
	r.Shard, r.FirstTick = shard, firstTick
	r.InputEnds, r.EventEnds = r.InputEnds[:0], r.EventEnds[:0]
	r.Inputs, r.Events = r.Inputs[:0], r.Events[:0]
}

// Limits of the encoding. A decoder refuses anything larger, so a corrupt
// or hostile header cannot make it allocate much more than the bytes it
// was given justify.
const (
	// MaxRangeTicks bounds the ticks of one Range.
	MaxRangeTicks = 1 << 16
	// MaxRangeRawBytes bounds the uncompressed body of one encoded Range.
	MaxRangeRawBytes = 64 << 20
	// maxCompressionRatio bounds raw length / compressed length: lineage
	// columns compress by a few times, a decompression bomb by thousands.
	maxCompressionRatio = 256
)

// ErrCorrupt is wrapped by every error DecodeRange returns for bytes that
// are not a valid encoded Range (bad checksum, bad structure, limits).
var ErrCorrupt = errors.New("lineage: corrupt range")

// ErrInvalidRange is wrapped by the errors of AppendRange for a Range that
// cannot be encoded (inconsistent offsets, entity 0, inputs out of order).
var ErrInvalidRange = errors.New("lineage: invalid range")

// Encoded Range (integers little-endian unless varint):
//
//	magic "BSLR" | version u8 = 1 | header: uvarint shard, first tick,
//	ticks, inputs, events, raw length | zstd frame of the raw body |
//	crc32c u32 of everything before it
//
// The raw body is columnar, each column a run of varints (u: unsigned, z:
// zigzag-signed delta):
//
//	per tick: input count u                 (ticks)
//	per tick: event count u                 (ticks)
//	input positions: first u, then delta-1 u (strictly increasing)
//	input players u, input kinds (1 byte each)
//	event kinds (1 byte each: 1 command, 2 derived)
//	event entity tags (1 byte each: the entity id's top byte)
//	event entities: z delta from the previous event's entity of that tag
//	command positions: z delta from the previous command's position
//	derived source tags (1 byte each: the source id's top byte)
//	derived sources: z delta from the previous derived source of that tag
//
// Deltas start from 0. Games keep an entity's kind in its id's top byte
// (a ship, a cannonball), so deltas are taken within a kind: consecutive
// cannonballs of a broadside, one ship's repeated source, and commands in
// log order all encode in a byte, however the kinds alternate. Version 1
// (one delta chain for all entities) is still decoded.
const (
	rangeMagic   = "BSLR"
	rangeVersion = 2
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

var (
	zstdOnce sync.Once
	zstdEnc  *zstd.Encoder
	zstdDec  *zstd.Decoder
	zstdErr  error
)

func codecs() (*zstd.Encoder, *zstd.Decoder, error) {
	zstdOnce.Do(func() {
		zstdEnc, zstdErr = zstd.NewWriter(nil,
			zstd.WithEncoderLevel(zstd.SpeedFastest),
			zstd.WithEncoderConcurrency(2),
			zstd.WithEncoderCRC(false), // the whole encoding has a CRC32C
			zstd.WithZeroFrames(true))
		if zstdErr != nil {
			return
		}
		zstdDec, zstdErr = zstd.NewReader(nil,
			zstd.WithDecoderConcurrency(2),
			zstd.WithDecoderMaxMemory(MaxRangeRawBytes),
			zstd.WithDecoderMaxWindow(MaxRangeRawBytes),
			zstd.WithDecodeAllCapLimit(true))
	})
	return zstdEnc, zstdDec, zstdErr
}

// Encoder encodes Ranges reusing its buffers; the zero value is ready. An
// Encoder is not safe for concurrent use.
type Encoder struct {
	raw []byte
}

// AppendRange appends r's encoding to dst. It fails, wrapping
// ErrInvalidRange, if r is inconsistent.
func (enc *Encoder) AppendRange(dst []byte, r *Range) ([]byte, error) {
	if err := r.validate(); err != nil {
		return dst, err
	}
	ze, _, err := codecs()
	if err != nil {
		return dst, fmt.Errorf("lineage: zstd: %w", err)
	}
	// Worst case: 10 bytes per varint.
	bound := 2*10*len(r.EventEnds) + (10+10+1)*len(r.Inputs) + (1+1+10+1+10)*len(r.Events)
	if cap(enc.raw) < bound {
		enc.raw = make([]byte, bound)
	}
	b := enc.raw[:bound]
	n := putEnds(b, 0, r.InputEnds)
	n = putEnds(b, n, r.EventEnds)
	var prev uint64
	for i := range r.Inputs {
		if i == 0 {
			n = putUvarint(b, n, r.Inputs[i].Pos)
		} else {
			n = putUvarint(b, n, r.Inputs[i].Pos-prev-1)
		}
		prev = r.Inputs[i].Pos
	}
	for i := range r.Inputs {
		n = putUvarint(b, n, uint64(r.Inputs[i].Player))
	}
	for i := range r.Inputs {
		b[n] = r.Inputs[i].Kind
		n++
	}
	for i := range r.Events {
		b[n] = byte(r.Events[i].Kind)
		n++
	}
	var prevOf [256]uint64 // per tag
	for i := range r.Events {
		b[n] = byte(uint64(r.Events[i].Entity) >> 56)
		n++
	}
	for i := range r.Events {
		e := uint64(r.Events[i].Entity)
		n = putVarint(b, n, int64(e-prevOf[e>>56]))
		prevOf[e>>56] = e
	}
	var prevPos uint64
	for i := range r.Events {
		if ev := &r.Events[i]; ev.Kind == EventCommand {
			n = putVarint(b, n, int64(ev.Arg-prevPos))
			prevPos = ev.Arg
		}
	}
	for i := range r.Events {
		if ev := &r.Events[i]; ev.Kind == EventDerived {
			b[n] = byte(ev.Arg >> 56)
			n++
		}
	}
	prevOf = [256]uint64{}
	for i := range r.Events {
		if ev := &r.Events[i]; ev.Kind == EventDerived {
			n = putVarint(b, n, int64(ev.Arg-prevOf[ev.Arg>>56]))
			prevOf[ev.Arg>>56] = ev.Arg
		}
	}
	raw := b[:n]
	if len(raw) > MaxRangeRawBytes {
		return dst, fmt.Errorf("%w: %d raw bytes (max %d): use shorter ranges", ErrInvalidRange, len(raw), MaxRangeRawBytes)
	}

	start := len(dst)
	dst = append(dst, rangeMagic...)
	dst = append(dst, rangeVersion)
	dst = binary.AppendUvarint(dst, uint64(r.Shard))
	dst = binary.AppendUvarint(dst, r.FirstTick)
	dst = binary.AppendUvarint(dst, uint64(r.Ticks()))
	dst = binary.AppendUvarint(dst, uint64(len(r.Inputs)))
	dst = binary.AppendUvarint(dst, uint64(len(r.Events)))
	dst = binary.AppendUvarint(dst, uint64(len(raw)))
	dst = ze.EncodeAll(raw, dst)
	return binary.LittleEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli)), nil
}

func putEnds(b []byte, n int, ends []int) int {
	prev := 0
	for _, e := range ends {
		n = putUvarint(b, n, uint64(e-prev))
		prev = e
	}
	return n
}

// putUvarint writes v at b[n:] and returns the new end; most values fit
// in a byte, and that path inlines.
func putUvarint(b []byte, n int, v uint64) int {
	if v < 0x80 {
		b[n] = byte(v)
		return n + 1
	}
	return n + binary.PutUvarint(b[n:], v)
}

// putVarint writes v zigzag-encoded, as binary.PutVarint does.
func putVarint(b []byte, n int, v int64) int {
	return putUvarint(b, n, uint64(v)<<1^uint64(v>>63))
}

// EncodeRange returns r's encoding.
func EncodeRange(r *Range) ([]byte, error) {
	var enc Encoder
	return enc.AppendRange(nil, r)
}

// validate checks what the encoding relies on.
func (r *Range) validate() error {
	n := len(r.EventEnds)
	switch {
	case len(r.InputEnds) != n:
		return fmt.Errorf("%w: %d input ends for %d ticks", ErrInvalidRange, len(r.InputEnds), n)
	case n > MaxRangeTicks:
		return fmt.Errorf("%w: %d ticks (max %d)", ErrInvalidRange, n, MaxRangeTicks)
	case n > 0 && r.FirstTick > math.MaxUint64-uint64(n-1):
		return fmt.Errorf("%w: ticks overflow from %d", ErrInvalidRange, r.FirstTick)
	}
	if err := checkEnds(r.InputEnds, len(r.Inputs)); err != nil {
		return fmt.Errorf("%w: inputs: %v", ErrInvalidRange, err)
	}
	if err := checkEnds(r.EventEnds, len(r.Events)); err != nil {
		return fmt.Errorf("%w: events: %v", ErrInvalidRange, err)
	}
	tick, lo := r.FirstTick, 0
	for _, end := range r.InputEnds {
		for i := lo; i < end; i++ {
			in := &r.Inputs[i]
			if in.Tick != tick {
				return fmt.Errorf("%w: input %d (position %d) has tick %d, in tick %d", ErrInvalidRange, i, in.Pos, in.Tick, tick)
			}
			if i > 0 && in.Pos <= r.Inputs[i-1].Pos {
				return fmt.Errorf("%w: input positions %d then %d", ErrInvalidRange, r.Inputs[i-1].Pos, in.Pos)
			}
		}
		lo = end
		tick++
	}
	for i := range r.Events {
		ev := &r.Events[i]
		switch {
		case ev.Entity == 0:
			return fmt.Errorf("%w: event %d is about entity 0", ErrInvalidRange, i)
		case ev.Kind == EventDerived && ev.Arg == 0:
			return fmt.Errorf("%w: event %d is derived from entity 0", ErrInvalidRange, i)
		case ev.Kind != EventCommand && ev.Kind != EventDerived:
			return fmt.Errorf("%w: event %d has kind %d", ErrInvalidRange, i, ev.Kind)
		}
	}
	return nil
}

func checkEnds(ends []int, total int) error {
	prev := 0
	for i, e := range ends {
		if e < prev {
			return fmt.Errorf("tick %d ends at %d before %d", i, e, prev)
		}
		prev = e
	}
	if prev != total {
		return fmt.Errorf("ticks end at %d but there are %d", prev, total)
	}
	return nil
}

// RangeHeader is the part of an encoded Range readable without
// decompressing it.
type RangeHeader struct {
	Shard     ShardID
	FirstTick uint64
	Ticks     int
	Inputs    int
	Events    int
	RawBytes  int
	version   byte
}

// DecodeRange decodes and validates an encoded Range into r, reusing r's
// buffers. It never panics; every error wraps ErrCorrupt.
func DecodeRange(b []byte, r *Range) error {
	h, body, err := decodeHeader(b)
	if err != nil {
		return err
	}
	_, zd, err := codecs()
	if err != nil {
		return fmt.Errorf("lineage: zstd: %w", err)
	}
	raw, err := zd.DecodeAll(body, make([]byte, 0, h.RawBytes))
	if err != nil {
		return fmt.Errorf("%w: body: %v", ErrCorrupt, err)
	}
	if len(raw) != h.RawBytes {
		return fmt.Errorf("%w: body of %d bytes, header says %d", ErrCorrupt, len(raw), h.RawBytes)
	}
	if err := decodeBody(raw, &h, r); err != nil {
		return fmt.Errorf("%w: shard %d ticks %d+%d: %v", ErrCorrupt, h.Shard, h.FirstTick, h.Ticks, err)
	}
	return nil
}

// DecodeRangeHeader returns the header of an encoded Range after checking
// its checksum and limits.
func DecodeRangeHeader(b []byte) (RangeHeader, error) {
	h, _, err := decodeHeader(b)
	return h, err
}

func decodeHeader(b []byte) (RangeHeader, []byte, error) {
	var h RangeHeader
	if len(b) < len(rangeMagic)+1+4 || string(b[:4]) != rangeMagic {
		return h, nil, fmt.Errorf("%w: not an encoded range", ErrCorrupt)
	}
	if b[4] != rangeVersion && b[4] != 1 {
		return h, nil, fmt.Errorf("%w: version %d", ErrCorrupt, b[4])
	}
	h.version = b[4]
	end := len(b) - 4
	if got, want := crc32.Checksum(b[:end], castagnoli), binary.LittleEndian.Uint32(b[end:]); got != want {
		return h, nil, fmt.Errorf("%w: checksum %#08x, want %#08x", ErrCorrupt, got, want)
	}
	c := cursor{b: b[5:end]}
	shard := c.uvarint()
	h.FirstTick = c.uvarint()
	ticks, inputs, events, raw := c.uvarint(), c.uvarint(), c.uvarint(), c.uvarint()
	if c.err != nil {
		return h, nil, fmt.Errorf("%w: header: %v", ErrCorrupt, c.err)
	}
	body := c.b
	switch {
	case shard > math.MaxUint32:
		return h, nil, fmt.Errorf("%w: shard %d", ErrCorrupt, shard)
	case ticks > MaxRangeTicks:
		return h, nil, fmt.Errorf("%w: %d ticks", ErrCorrupt, ticks)
	case ticks > 0 && h.FirstTick > math.MaxUint64-(ticks-1):
		return h, nil, fmt.Errorf("%w: ticks overflow from %d", ErrCorrupt, h.FirstTick)
	case raw > MaxRangeRawBytes || raw > maxCompressionRatio*uint64(len(body))+1024:
		return h, nil, fmt.Errorf("%w: %d raw bytes from %d", ErrCorrupt, raw, len(body))
	// Every tick takes two count varints, every input three bytes, every
	// event two: counts the raw length cannot hold are lies.
	case 2*ticks+3*inputs+2*events > raw:
		return h, nil, fmt.Errorf("%w: %d ticks, %d inputs, %d events in %d raw bytes", ErrCorrupt, ticks, inputs, events, raw)
	}
	h.Shard, h.Ticks, h.Inputs, h.Events, h.RawBytes = ShardID(shard), int(ticks), int(inputs), int(events), int(raw)
	return h, body, nil
}

func decodeBody(raw []byte, h *RangeHeader, r *Range) error {
	c := cursor{b: raw}
	r.Reset(h.Shard, h.FirstTick)
	var err error
	if r.InputEnds, err = c.ends(r.InputEnds, h.Ticks, h.Inputs); err != nil {
		return fmt.Errorf("input counts: %w", err)
	}
	if r.EventEnds, err = c.ends(r.EventEnds, h.Ticks, h.Events); err != nil {
		return fmt.Errorf("event counts: %w", err)
	}
	r.Inputs = grow(r.Inputs, h.Inputs)
	tick, t := h.FirstTick, 0
	var pos uint64
	for i := range r.Inputs {
		for t < h.Ticks && r.InputEnds[t] <= i {
			t++
			tick++
		}
		d := c.uvarint()
		if i == 0 {
			pos = d
		} else {
			if d >= math.MaxUint64-pos {
				return fmt.Errorf("input %d: position overflows", i)
			}
			pos += d + 1
		}
		r.Inputs[i] = CommandInfo{Pos: pos, Tick: tick}
	}
	for i := range r.Inputs {
		p := c.uvarint()
		if p > math.MaxUint32 {
			return fmt.Errorf("input %d: player %d", i, p)
		}
		r.Inputs[i].Player = uint32(p)
	}
	kinds := c.bytes(h.Inputs)
	for i := range r.Inputs {
		if kinds != nil {
			r.Inputs[i].Kind = kinds[i]
		}
	}
	evKinds := c.bytes(h.Events)
	if c.err != nil {
		return fmt.Errorf("inputs: %w", c.err)
	}
	r.Events = grow(r.Events, h.Events)
	tagged := h.version >= 2
	var tags []byte
	if tagged {
		if tags = c.bytes(h.Events); c.err != nil {
			return fmt.Errorf("entity tags: %w", c.err)
		}
	}
	var prevOf [256]uint64
	for i := range r.Events {
		k := EventKind(evKinds[i])
		if k != EventCommand && k != EventDerived {
			return fmt.Errorf("event %d: kind %d", i, k)
		}
		var tag byte
		if tagged {
			tag = tags[i]
		}
		entity := prevOf[tag] + uint64(c.varint())
		if entity == 0 {
			return fmt.Errorf("event %d: entity 0", i)
		}
		if tagged && byte(entity>>56) != tag {
			return fmt.Errorf("event %d: entity %#x under tag %d", i, entity, tag)
		}
		prevOf[tag] = entity
		r.Events[i] = Event{Entity: EntityID(entity), Kind: k}
	}
	var cmdPos uint64
	for i := range r.Events {
		if r.Events[i].Kind == EventCommand {
			cmdPos += uint64(c.varint())
			r.Events[i].Arg = cmdPos
		}
	}
	derived := 0
	for i := range r.Events {
		if r.Events[i].Kind == EventDerived {
			derived++
		}
	}
	tags = nil
	if tagged {
		if tags = c.bytes(derived); c.err != nil {
			return fmt.Errorf("source tags: %w", c.err)
		}
	}
	prevOf = [256]uint64{}
	d := 0
	for i := range r.Events {
		if r.Events[i].Kind == EventDerived {
			var tag byte
			if tagged {
				tag = tags[d]
			}
			d++
			from := prevOf[tag] + uint64(c.varint())
			if from == 0 {
				return fmt.Errorf("event %d: derived from entity 0", i)
			}
			if tagged && byte(from>>56) != tag {
				return fmt.Errorf("event %d: source %#x under tag %d", i, from, tag)
			}
			prevOf[tag] = from
			r.Events[i].Arg = from
		}
	}
	if c.err != nil {
		return fmt.Errorf("events: %w", c.err)
	}
	if len(c.b) != 0 {
		return fmt.Errorf("%d trailing bytes", len(c.b))
	}
	return nil
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// cursor reads varints from b, remembering the first error.
type cursor struct {
	b   []byte
	err error
}

func (c *cursor) uvarint() uint64 {
	if c.err != nil {
		return 0
	}
	v, n := binary.Uvarint(c.b)
	if n <= 0 {
		c.err = errors.New("truncated or overlong varint")
		c.b = nil
		return 0
	}
	c.b = c.b[n:]
	return v
}

func (c *cursor) varint() int64 {
	if c.err != nil {
		return 0
	}
	v, n := binary.Varint(c.b)
	if n <= 0 {
		c.err = errors.New("truncated or overlong varint")
		c.b = nil
		return 0
	}
	c.b = c.b[n:]
	return v
}

func (c *cursor) bytes(n int) []byte {
	if c.err != nil {
		return nil
	}
	if len(c.b) < n {
		c.err = fmt.Errorf("%d bytes wanted, %d left", n, len(c.b))
		c.b = nil
		return nil
	}
	v := c.b[:n]
	c.b = c.b[n:]
	return v
}

// ends reads n counts into cumulative end offsets that must add up to
// total.
func (c *cursor) ends(dst []int, n, total int) ([]int, error) {
	dst = grow(dst, n)
	sum := uint64(0)
	for i := range dst {
		sum += c.uvarint()
		if sum > uint64(total) {
			return dst, fmt.Errorf("tick %d: counts exceed %d", i, total)
		}
		dst[i] = int(sum)
	}
	if c.err != nil {
		return dst, c.err
	}
	if sum != uint64(total) {
		return dst, fmt.Errorf("counts add up to %d, header says %d", sum, total)
	}
	return dst, nil
}
