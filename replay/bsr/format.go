// Package bsr reads and writes Broadside replay archives (.bsr): a match's
// command log, per-tick state hashes, incremental snapshots and lineage in
// one self-contained, checksummed file that can be verified tick by tick and
// seeked to any tick in milliseconds.
//
// The package is game-agnostic: a recording names its game, schema version
// and opaque game-config bytes in its Header, and every operation that runs
// the game takes a NewSim function. Re-simulation is always a replay.Runner
// over the recorded log entries, the same code that runs a shard live, so a
// recording verifies and seeks exactly as the match ran.
//
// # File layout
//
// All integers are little-endian.
//
//	file header: magic "BSREPLAY" | format version u16 | reserved u16 |
//	             body length u32 | body | crc32c u32 (of everything before it)
//	body:        schema version u16 | tick rate u16 | world u32 | shards u32 |
//	             seed u64 | created (unix ns) i64 | game (u16 length, bytes) |
//	             game config (u32 length, bytes)
//	chunks:      one after the other, each
//	             magic "BSCK" | kind u8 | flags u8 | reserved u16 | shard u32 |
//	             raw length u32 | stored length u32 | reserved u32 |
//	             first tick u64 | last tick u64 | aux1 u64 | aux2 u64 |
//	             payload (stored length bytes, a zstd frame of raw length bytes) |
//	             crc32c u32 (of the chunk header and payload)
//	trailer:     index chunk offset u64 | index chunk size u64 | crc32c u32 | "BSRX"
//
// Chunk kinds (see ChunkKind) hold a tick range's log entries (Commands),
// the same range's tick markers and per-shard state hashes (Ticks), one
// shard's table snapshot at a tick, full or a delta on the previous one
// (Snapshot), one shard's lineage range (Lineage), a named metadata value
// (Meta) and, last, the seek index: every chunk's header and offset (Index).
//
// A Writer appends chunks as the match runs, each with a single write, so a
// crash leaves a file whose chunks are complete up to the last one written;
// Close appends the index and the trailer. Open reads the index through the
// trailer or, when there is none (the writer did not close) or it is
// damaged, scans the chunks from the start, keeps every complete one and
// reports what was cut (Reader.Truncated).
package bsr

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"unicode/utf8"

	"github.com/anoptic/broadside/replay"
)

// Errors callers branch on.
var (
	// ErrNotRecording is returned by Open for a file that is not a .bsr
	// recording at all (wrong magic).
	ErrNotRecording = errors.New("bsr: not a Broadside recording")
	// ErrVersion is returned by Open for a recording of a format version
	// this package does not read.
	ErrVersion = errors.New("bsr: unsupported recording format version")
	// ErrCorrupt is wrapped by every error about recorded bytes that fail
	// their checksum, are malformed or are inconsistent with each other.
	ErrCorrupt = errors.New("bsr: corrupt recording")
	// ErrOutOfRange is returned for a tick the recording does not cover.
	ErrOutOfRange = errors.New("bsr: tick out of the recording's range")
	// ErrDiverged is wrapped by the error of a seek whose re-simulated
	// state hash differs from the recorded one (run Verify).
	ErrDiverged = errors.New("bsr: re-simulation diverged from the recording")
	// ErrClosed is returned by a Writer's or Reader's methods after Close.
	ErrClosed = errors.New("bsr: closed")
)

// FormatVersion is the version of the file layout this package writes.
const FormatVersion = 1

// Limits that keep any recording, however damaged or hostile, from making a
// reader allocate without bound.
const (
	// MaxGameName bounds Header.Game in bytes.
	MaxGameName = 255
	// MaxGameConfig bounds Header.GameConfig in bytes.
	MaxGameConfig = 1 << 20
	// MaxChunkRaw bounds a chunk's uncompressed payload.
	MaxChunkRaw = 64 << 20
	// MaxChunkTicks bounds the ticks of one Ticks or Commands chunk.
	MaxChunkTicks = 1 << 16
	// MaxIndexEntries bounds the chunks one index may list.
	MaxIndexEntries = 1 << 24
	// MaxCachedRaw bounds the uncompressed payload of the chunks a Reader
	// decodes into memory and caches (ticks, commands) and of the small
	// kinds (meta, tree, checkpoint): a few KB of zstd cannot declare
	// more. Snapshots, lineage and the index keep MaxChunkRaw.
	MaxCachedRaw = 32 << 20
	// MaxChunkDecoded bounds the memory one decoded chunk may take (its
	// payload and the structures decoded from it, estimated): a commands
	// chunk of many empty entries is refused before they are allocated.
	MaxChunkDecoded = 64 << 20
	// CacheBytes bounds the decoded chunks a Reader keeps in its cache.
	CacheBytes = 192 << 20
)

const (
	fileMagic      = "BSREPLAY"
	fileFixedLen   = 16 // magic, version, reserved, body length
	maxHeaderBody  = 2 + 2 + 4 + 4 + 8 + 8 + 2 + MaxGameName + 4 + MaxGameConfig
	chunkMagic     = "BSCK"
	chunkHeaderLen = 56
	chunkOverhead  = chunkHeaderLen + 4
	maxChunkStored = MaxChunkRaw + 1<<20 // zstd's worst-case expansion is far below this
	trailerMagic   = "BSRX"
	trailerLen     = 24
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Header describes a recording: which game and world it holds and how to
// rebuild the game's simulation (GameConfig is the game's own encoding of
// its world configuration, opaque to this package).
type Header struct {
	// Game names the game ("broadside"); readers check it before
	// decoding GameConfig.
	Game string
	// SchemaVersion is the game's version of its command and state
	// schema: a re-simulation with another version may diverge.
	SchemaVersion uint16
	// TickRate is the game's ticks per second.
	TickRate uint16
	// Seed is the world seed (also inside GameConfig for Broadside;
	// repeated here so tools can show it without the game).
	Seed uint64
	// World is the world id whose log was recorded.
	World uint32
	// Shards is the number of simulation shards (sectors).
	Shards uint32
	// GameConfig is the game's encoding of its world configuration.
	GameConfig []byte
	// Created is when the recording was started, in Unix nanoseconds
	// (informational; 0 if unknown).
	Created int64
}

// Validate reports whether h can be written.
func (h *Header) Validate() error {
	switch {
	case h.Game == "" || len(h.Game) > MaxGameName || !utf8.ValidString(h.Game):
		return fmt.Errorf("bsr: game name %q: want 1..%d bytes of UTF-8", h.Game, MaxGameName)
	case h.TickRate == 0:
		return fmt.Errorf("bsr: tick rate 0")
	case h.Shards == 0 || h.Shards > replay.MaxShards:
		return fmt.Errorf("bsr: %d shards out of range [1, %d]", h.Shards, replay.MaxShards)
	case len(h.GameConfig) > MaxGameConfig:
		return fmt.Errorf("bsr: game config of %d bytes exceeds %d", len(h.GameConfig), MaxGameConfig)
	}
	return nil
}

func appendFileHeader(b []byte, h *Header) []byte {
	le := binary.LittleEndian
	start := len(b)
	b = append(b, fileMagic...)
	b = le.AppendUint16(b, FormatVersion)
	b = le.AppendUint16(b, 0)
	lenAt := len(b)
	b = le.AppendUint32(b, 0)
	body := len(b)
	b = le.AppendUint16(b, h.SchemaVersion)
	b = le.AppendUint16(b, h.TickRate)
	b = le.AppendUint32(b, h.World)
	b = le.AppendUint32(b, h.Shards)
	b = le.AppendUint64(b, h.Seed)
	b = le.AppendUint64(b, uint64(h.Created))
	b = le.AppendUint16(b, uint16(len(h.Game)))
	b = append(b, h.Game...)
	b = le.AppendUint32(b, uint32(len(h.GameConfig)))
	b = append(b, h.GameConfig...)
	le.PutUint32(b[lenAt:], uint32(len(b)-body))
	return le.AppendUint32(b, crc32.Checksum(b[start:], castagnoli))
}

// decodeHeaderBody decodes and validates a header body.
func decodeHeaderBody(b []byte) (Header, error) {
	le := binary.LittleEndian
	if len(b) < 2+2+4+4+8+8+2 {
		return Header{}, fmt.Errorf("%w: header of %d bytes", ErrCorrupt, len(b))
	}
	h := Header{
		SchemaVersion: le.Uint16(b),
		TickRate:      le.Uint16(b[2:]),
		World:         le.Uint32(b[4:]),
		Shards:        le.Uint32(b[8:]),
		Seed:          le.Uint64(b[12:]),
		Created:       int64(le.Uint64(b[20:])),
	}
	rest := b[28:]
	n := int(le.Uint16(rest))
	rest = rest[2:]
	if n > len(rest) {
		return Header{}, fmt.Errorf("%w: header game name of %d bytes beyond the header", ErrCorrupt, n)
	}
	h.Game, rest = string(rest[:n]), rest[n:]
	if len(rest) < 4 {
		return Header{}, fmt.Errorf("%w: header truncated before the game config", ErrCorrupt)
	}
	m := uint64(le.Uint32(rest))
	rest = rest[4:]
	if m != uint64(len(rest)) {
		return Header{}, fmt.Errorf("%w: header game config of %d bytes, %d present", ErrCorrupt, m, len(rest))
	}
	if m > 0 {
		h.GameConfig = append([]byte(nil), rest...)
	}
	if err := h.Validate(); err != nil {
		return Header{}, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return h, nil
}

// ChunkKind says what a chunk holds.
type ChunkKind uint8

// Chunk kinds. The values are part of the file format.
const (
	// KindTicks holds, for ticks First..Last, the log position of the
	// tick marker that stepped each (Aux1: the one before First, Aux2:
	// Last's), whether it was a gap tick, and every shard's state hash.
	KindTicks ChunkKind = 1
	// KindCommands holds the log entries after the marker of tick
	// First-1 (position Aux1) through the marker of tick Last (Aux2).
	KindCommands ChunkKind = 2
	// KindSnapshot holds shard Shard's table capture after tick First
	// (= Last): full when FlagFull is set, otherwise a delta on the
	// shard's previous snapshot. Aux1 is the marker's position, Aux2 the
	// sim's state hash.
	KindSnapshot ChunkKind = 3
	// KindLineage holds shard Shard's lineage range of ticks First..Last
	// (a lineage.EncodeRange encoding).
	KindLineage ChunkKind = 4
	// KindMeta holds a named metadata value (for example lineage kind
	// names).
	KindMeta ChunkKind = 5
	// KindIndex is the seek index: every other chunk's header and offset.
	KindIndex ChunkKind = 6
	// KindTree opens a signed recording: the Merkle tree of the log
	// entries before the recording's first one (Aux2 of them; First is the
	// base tick, Aux1 its marker's position) as the hashes of its
	// complete subtrees, and consistency proofs from earlier segments'
	// checkpoints (see TreeBase).
	KindTree ChunkKind = 7
	// KindCheckpoint holds a signed checkpoint (a golang.org/x/mod/sumdb/note
	// signed note) of the log's Merkle tree after tick First (= Last):
	// Aux1 is the tick marker's position, Aux2 the tree size.
	KindCheckpoint ChunkKind = 8
	// KindFields holds, for ticks First..Last (positions Aux1, Aux2 as
	// in KindTicks), every shard's field sums (table.FieldSums): what
	// lets verify name the first diverging entity and field at the tick
	// itself.
	KindFields ChunkKind = 9
)

// FlagFull marks a full snapshot.
const FlagFull = 1

func (k ChunkKind) valid() bool { return k >= KindTicks && k <= KindFields }

// String names k.
func (k ChunkKind) String() string {
	switch k {
	case KindTicks:
		return "ticks"
	case KindCommands:
		return "commands"
	case KindSnapshot:
		return "snapshot"
	case KindLineage:
		return "lineage"
	case KindMeta:
		return "meta"
	case KindIndex:
		return "index"
	case KindTree:
		return "tree"
	case KindCheckpoint:
		return "checkpoint"
	case KindFields:
		return "fields"
	}
	return fmt.Sprintf("kind %d", uint8(k))
}

// chunkRef is a chunk's header and where it is: what the index lists.
type chunkRef struct {
	Kind        ChunkKind
	Flags       uint8
	Shard       uint32
	Raw, Stored uint32
	First, Last uint64
	Aux1, Aux2  uint64
	Off         int64
}

// size is the chunk's length in the file.
func (c *chunkRef) size() int64 { return chunkOverhead + int64(c.Stored) }

// describe names the chunk for error messages.
func (c *chunkRef) describe() string {
	switch c.Kind {
	case KindSnapshot:
		kind := "delta"
		if c.Flags&FlagFull != 0 {
			kind = "full"
		}
		return fmt.Sprintf("%s snapshot of shard %d at tick %d (offset %d)", kind, c.Shard, c.First, c.Off)
	case KindLineage:
		return fmt.Sprintf("lineage of shard %d ticks %d..%d (offset %d)", c.Shard, c.First, c.Last, c.Off)
	case KindMeta, KindIndex:
		return fmt.Sprintf("%s chunk (offset %d)", c.Kind, c.Off)
	case KindTree, KindCheckpoint:
		return fmt.Sprintf("%s chunk of tick %d, tree size %d (offset %d)", c.Kind, c.First, c.Aux2, c.Off)
	}
	return fmt.Sprintf("%s chunk of ticks %d..%d (offset %d)", c.Kind, c.First, c.Last, c.Off)
}

func appendChunkHeader(b []byte, c *chunkRef) []byte {
	le := binary.LittleEndian
	b = append(b, chunkMagic...)
	b = append(b, byte(c.Kind), c.Flags, 0, 0)
	b = le.AppendUint32(b, c.Shard)
	b = le.AppendUint32(b, c.Raw)
	b = le.AppendUint32(b, c.Stored)
	b = le.AppendUint32(b, 0)
	b = le.AppendUint64(b, c.First)
	b = le.AppendUint64(b, c.Last)
	b = le.AppendUint64(b, c.Aux1)
	return le.AppendUint64(b, c.Aux2)
}

// decodeChunkHeader decodes and checks a chunk header (without the
// payload's checksum), for a recording of shards shards.
func decodeChunkHeader(b []byte, off int64, shards uint32) (chunkRef, error) {
	if len(b) < chunkHeaderLen {
		return chunkRef{}, fmt.Errorf("%w: chunk header at offset %d: %d bytes", ErrCorrupt, off, len(b))
	}
	le := binary.LittleEndian
	if string(b[:4]) != chunkMagic {
		return chunkRef{}, fmt.Errorf("%w: no chunk at offset %d (bytes %x)", ErrCorrupt, off, b[:4])
	}
	c := chunkRef{
		Kind: ChunkKind(b[4]), Flags: b[5], Shard: le.Uint32(b[8:]),
		Raw: le.Uint32(b[12:]), Stored: le.Uint32(b[16:]),
		First: le.Uint64(b[24:]), Last: le.Uint64(b[32:]),
		Aux1: le.Uint64(b[40:]), Aux2: le.Uint64(b[48:]),
		Off: off,
	}
	if b[6] != 0 || b[7] != 0 || le.Uint32(b[20:]) != 0 {
		return chunkRef{}, fmt.Errorf("%w: chunk at offset %d: reserved bits set", ErrCorrupt, off)
	}
	if err := c.check(shards); err != nil {
		return chunkRef{}, err
	}
	return c, nil
}

// check validates a chunk header's fields against each other.
func (c *chunkRef) check(shards uint32) error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%w: chunk at offset %d: "+format, append([]any{ErrCorrupt, c.Off}, args...)...)
	}
	if !c.Kind.valid() {
		return fail("unknown kind %d", c.Kind)
	}
	if c.Raw > MaxChunkRaw || c.Stored > maxChunkStored || c.Stored == 0 {
		return fail("%d raw, %d stored bytes", c.Raw, c.Stored)
	}
	switch c.Kind {
	case KindTicks, KindCommands, KindMeta, KindTree, KindCheckpoint, KindFields:
		if c.Raw > MaxCachedRaw {
			return fail("%s of %d raw bytes exceeds the budget of %d", c.Kind, c.Raw, MaxCachedRaw)
		}
	}
	if c.Off < 0 {
		return fail("negative offset")
	}
	switch c.Kind {
	case KindTicks, KindCommands, KindFields:
		if c.First == 0 || c.Last < c.First || c.Last-c.First >= MaxChunkTicks || c.Aux2 < c.Aux1 || c.Flags != 0 || c.Shard != 0 {
			return fail("%s of ticks %d..%d, positions %d..%d", c.Kind, c.First, c.Last, c.Aux1, c.Aux2)
		}
	case KindSnapshot:
		if c.First == 0 || c.Last != c.First || c.Shard >= shards || c.Flags&^FlagFull != 0 || c.Aux1 == 0 {
			return fail("snapshot of shard %d at tick %d (position %d)", c.Shard, c.First, c.Aux1)
		}
	case KindLineage:
		if c.Last < c.First || c.Shard >= shards || c.Flags != 0 {
			return fail("lineage of shard %d ticks %d..%d", c.Shard, c.First, c.Last)
		}
	case KindTree, KindCheckpoint:
		if c.Last != c.First || c.Flags != 0 || c.Shard != 0 || c.Aux2 > 1<<62 {
			return fail("%s of tick %d, tree size %d", c.Kind, c.First, c.Aux2)
		}
	default:
		if c.Flags != 0 || c.Shard != 0 {
			return fail("%s chunk with flags %d shard %d", c.Kind, c.Flags, c.Shard)
		}
	}
	return nil
}

func appendTrailer(b []byte, indexOff, indexSize int64) []byte {
	le := binary.LittleEndian
	start := len(b)
	b = le.AppendUint64(b, uint64(indexOff))
	b = le.AppendUint64(b, uint64(indexSize))
	b = le.AppendUint32(b, crc32.Checksum(b[start:], castagnoli))
	return append(b, trailerMagic...)
}

// decodeTrailer returns the index chunk's offset and size.
func decodeTrailer(b []byte) (off, size int64, err error) {
	le := binary.LittleEndian
	if len(b) != trailerLen || string(b[20:]) != trailerMagic {
		return 0, 0, fmt.Errorf("%w: no trailer", ErrCorrupt)
	}
	if crc32.Checksum(b[:16], castagnoli) != le.Uint32(b[16:]) {
		return 0, 0, fmt.Errorf("%w: trailer checksum", ErrCorrupt)
	}
	o, s := le.Uint64(b), le.Uint64(b[8:])
	if o > 1<<62 || s > 1<<62 {
		return 0, 0, fmt.Errorf("%w: trailer offset %d size %d", ErrCorrupt, o, s)
	}
	return int64(o), int64(s), nil
}
