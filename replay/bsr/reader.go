package bsr

import (
	"bufio"
	"container/list"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/lineage"
	"github.com/anoptic/broadside/netcode/wire"
	"github.com/anoptic/broadside/replay"
	"github.com/klauspost/compress/zstd"
)

var (
	decoderOnce sync.Once
	decoder     *zstd.Decoder
	decoderErr  error
	// smallDecoder decodes the kinds bounded by MaxCachedRaw.
	smallDecoder *zstd.Decoder
)

// sharedDecoder returns the package's zstd decoder (DecodeAll is safe for
// concurrent use), bounded for untrusted input.
func sharedDecoder() (*zstd.Decoder, error) {
	decoderOnce.Do(func() {
		decoder, decoderErr = zstd.NewReader(nil, zstd.WithDecoderConcurrency(0),
			zstd.WithDecoderMaxMemory(MaxChunkRaw), zstd.WithDecoderMaxWindow(1<<26))
		if decoderErr == nil {
			smallDecoder, decoderErr = zstd.NewReader(nil, zstd.WithDecoderConcurrency(0),
				zstd.WithDecoderMaxMemory(MaxCachedRaw), zstd.WithDecoderMaxWindow(MaxCachedRaw))
		}
	})
	return decoder, decoderErr
}

// Reader reads a recording. Open it with Open; it is safe for concurrent
// use (several Seekers may share one).
type Reader struct {
	f         File
	path      string
	size      int64
	h         Header
	dataStart int64
	indexed   bool
	truncated string

	refs    []chunkRef   // every chunk, in file order
	ticks   []chunkRef   // the contiguous run of Ticks chunks from the base
	cmds    []chunkRef   // the contiguous run of Commands chunks from the base
	snaps   [][]chunkRef // per shard, by tick (one per tick, the last written)
	lineage []chunkRef
	fields  []chunkRef // KindFields, by first tick
	base    uint64     // tick of the state the recording starts from
	basePos uint64     // position of its marker (0 for the start of the world)
	last    uint64     // last tick with commands and hashes

	cacheMu     sync.Mutex
	cache       map[int64]*list.Element
	lru         *list.List
	cacheBytes  int // decoded bytes held by the cache
	cacheBudget int // bound on cacheBytes (CacheBytes; tests lower it)

	claimsMu  sync.Mutex
	claims    []claimAt // the lease claims after the base, up to claimsPos (claimsTo)
	claimsPos uint64
}

// cached is a decoded chunk in the reader's cache.
type cached struct {
	off     int64
	once    sync.Once
	value   any
	err     error
	size    int  // decoded bytes, counted in Reader.cacheBytes once known
	evicted bool // removed from the cache (under cacheMu)
}

const cacheChunks = 96

// Open opens a recording. A recording that was not closed (its writer
// crashed) or whose index is damaged is recovered by scanning its chunks:
// Truncated then says what was cut. A file that is not a recording, or
// whose header is damaged, yields an error (ErrNotRecording, ErrVersion or
// ErrCorrupt).
func Open(path string) (*Reader, error) { return open(path, false) }

func open(path string, ignoreIndex bool) (*Reader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("bsr: %w", err)
	}
	r, err := newReader(f, path, ignoreIndex)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("bsr: %s: %w", path, err)
	}
	return r, nil
}

// File is what a Reader reads a recording from: an *os.File, or the bytes
// of a recording held in memory (a browser fetched or picked it).
type File interface {
	io.ReaderAt
	io.Closer
}

// NewReader reads the recording of size bytes in f, named name (a path or
// a URL: for messages), as Open reads a file; Close closes f.
func NewReader(f File, name string, size int64) (*Reader, error) {
	r, err := newReaderSized(f, name, size, false)
	if err != nil {
		return nil, fmt.Errorf("bsr: %s: %w", name, err)
	}
	return r, nil
}

func newReader(f *os.File, path string, ignoreIndex bool) (*Reader, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return newReaderSized(f, path, st.Size(), ignoreIndex)
}

func newReaderSized(f File, path string, size int64, ignoreIndex bool) (*Reader, error) {
	r := &Reader{f: f, path: path, size: size, cache: map[int64]*list.Element{}, lru: list.New(), cacheBudget: CacheBytes}
	var err error
	var fixed [fileFixedLen]byte
	if n, err := f.ReadAt(fixed[:], 0); n < 8 || (err != nil && !errors.Is(err, io.EOF)) {
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		return nil, fmt.Errorf("%w (%d bytes)", ErrNotRecording, r.size)
	}
	if string(fixed[:8]) != fileMagic {
		return nil, fmt.Errorf("%w (it starts with %x)", ErrNotRecording, fixed[:8])
	}
	if r.size < fileFixedLen {
		return nil, fmt.Errorf("%w: header cut at %d bytes", ErrCorrupt, r.size)
	}
	le := binary.LittleEndian
	if v := le.Uint16(fixed[8:]); v != FormatVersion {
		return nil, fmt.Errorf("%w: version %d (this build reads %d)", ErrVersion, v, FormatVersion)
	}
	bodyLen := int64(le.Uint32(fixed[12:]))
	if bodyLen > maxHeaderBody || le.Uint16(fixed[10:]) != 0 {
		return nil, fmt.Errorf("%w: header of %d bytes", ErrCorrupt, bodyLen)
	}
	if r.size < fileFixedLen+bodyLen+4 {
		return nil, fmt.Errorf("%w: header cut at %d of %d bytes", ErrCorrupt, r.size, fileFixedLen+bodyLen+4)
	}
	hb := make([]byte, fileFixedLen+bodyLen+4)
	if _, err := f.ReadAt(hb, 0); err != nil {
		return nil, err
	}
	if crc32.Checksum(hb[:len(hb)-4], castagnoli) != le.Uint32(hb[len(hb)-4:]) {
		return nil, fmt.Errorf("%w: header checksum", ErrCorrupt)
	}
	if r.h, err = decodeHeaderBody(hb[fileFixedLen : len(hb)-4]); err != nil {
		return nil, err
	}
	r.dataStart = int64(len(hb))
	var why string
	if ignoreIndex {
		why = "index ignored"
	} else if r.refs, err = r.readIndex(); err == nil {
		r.indexed = true
	} else {
		why = err.Error()
	}
	if !r.indexed {
		cut, err := r.scan()
		if err != nil {
			return nil, err
		}
		if !ignoreIndex {
			r.truncated = fmt.Sprintf("not closed cleanly (%s); recovered %d complete chunks", shortReason(why), len(r.refs))
			if cut != "" {
				r.truncated += "; cut: " + cut
			}
		}
	}
	r.organize()
	return r, nil
}

// shortReason drops the ErrCorrupt prefix from an error message.
func shortReason(why string) string {
	return strings.TrimPrefix(why, ErrCorrupt.Error()+": ")
}

// readIndex reads the index through the trailer.
func (r *Reader) readIndex() ([]chunkRef, error) {
	if r.size < r.dataStart+trailerLen {
		return nil, fmt.Errorf("%w: no index", ErrCorrupt)
	}
	var tr [trailerLen]byte
	if _, err := r.f.ReadAt(tr[:], r.size-trailerLen); err != nil {
		return nil, err
	}
	off, size, err := decodeTrailer(tr[:])
	if err != nil {
		return nil, fmt.Errorf("%w: no index", ErrCorrupt)
	}
	if off < r.dataStart || size < chunkOverhead || off+size != r.size-trailerLen {
		return nil, fmt.Errorf("%w: index at %d (%d bytes) out of place", ErrCorrupt, off, size)
	}
	hdr := make([]byte, chunkHeaderLen)
	if _, err := r.f.ReadAt(hdr, off); err != nil {
		return nil, err
	}
	c, err := decodeChunkHeader(hdr, off, r.h.Shards)
	if err != nil {
		return nil, err
	}
	if c.Kind != KindIndex || c.size() != size {
		return nil, fmt.Errorf("%w: index chunk is a %s chunk of %d bytes", ErrCorrupt, c.Kind, c.size())
	}
	raw, err := r.readRaw(&c)
	if err != nil {
		return nil, err
	}
	return decodeIndex(raw, r.h.Shards, r.dataStart, off)
}

// scan reads the chunks from the start and keeps every complete one; it
// returns what stopped it ("" at a clean end of file).
func (r *Reader) scan() (string, error) {
	r.refs = r.refs[:0]
	sr := io.NewSectionReader(r.f, r.dataStart, r.size-r.dataStart)
	br := bufio.NewReaderSize(sr, 1<<20)
	off := r.dataStart
	hdr := make([]byte, chunkHeaderLen)
	var body []byte
	for off < r.size {
		left := r.size - off
		if left < chunkOverhead {
			return fmt.Sprintf("%d trailing bytes at offset %d (an incomplete chunk)", left, off), nil
		}
		if _, err := io.ReadFull(br, hdr); err != nil {
			return "", err
		}
		if off+trailerLen == r.size && string(hdr[20:24]) == trailerMagic {
			return "", nil // a trailer whose index was unusable
		}
		c, err := decodeChunkHeader(hdr, off, r.h.Shards)
		if err != nil {
			return fmt.Sprintf("%d bytes from offset %d that are not a chunk (%v)", left, off, shortReason(err.Error())), nil
		}
		if c.size() > left {
			return fmt.Sprintf("incomplete %s at offset %d: %d of %d bytes", c.Kind, off, left, c.size()), nil
		}
		body = slices.Grow(body[:0], int(c.Stored)+4)[:c.Stored+4]
		if _, err := io.ReadFull(br, body); err != nil {
			return "", err
		}
		sum := crc32.Update(crc32.Checksum(hdr, castagnoli), castagnoli, body[:c.Stored])
		if sum != binary.LittleEndian.Uint32(body[c.Stored:]) {
			return fmt.Sprintf("%s at offset %d fails its checksum (%d bytes from there dropped)", c.describe(), off, left), nil
		}
		if c.Kind != KindIndex {
			r.refs = append(r.refs, c)
		}
		off += c.size()
	}
	return "", nil
}

// organize derives the per-kind views of the chunks.
func (r *Reader) organize() {
	r.snaps = make([][]chunkRef, r.h.Shards)
	var cmds, ticks []chunkRef
	for _, c := range r.refs {
		switch c.Kind {
		case KindCommands:
			cmds = append(cmds, c)
		case KindTicks:
			ticks = append(ticks, c)
		case KindSnapshot:
			r.snaps[c.Shard] = append(r.snaps[c.Shard], c)
		case KindLineage:
			r.lineage = append(r.lineage, c)
		case KindFields:
			r.fields = append(r.fields, c)
		}
	}
	sort.SliceStable(r.fields, func(i, j int) bool { return r.fields[i].First < r.fields[j].First })
	var notes []string
	r.cmds, cmds = contiguous(cmds)
	r.ticks, ticks = contiguous(ticks)
	if len(cmds) > 0 {
		notes = append(notes, fmt.Sprintf("%d commands chunks after tick %d do not follow on", len(cmds), lastOf(r.cmds)))
	}
	if len(ticks) > 0 {
		notes = append(notes, fmt.Sprintf("%d ticks chunks after tick %d do not follow on", len(ticks), lastOf(r.ticks)))
	}
	switch {
	case len(r.cmds) == 0 || len(r.ticks) == 0:
		r.cmds, r.ticks = nil, nil
		if len(r.snaps) > 0 && len(r.snaps[0]) > 0 {
			r.base, r.basePos = r.snaps[0][0].First, r.snaps[0][0].Aux1
		}
		r.last = r.base
	case r.cmds[0].First != r.ticks[0].First || r.cmds[0].Aux1 != r.ticks[0].Aux1:
		notes = append(notes, fmt.Sprintf("commands start at tick %d, hashes at tick %d", r.cmds[0].First, r.ticks[0].First))
		r.cmds, r.ticks = nil, nil
	default:
		r.base, r.basePos = r.cmds[0].First-1, r.cmds[0].Aux1
		r.last = min(lastOf(r.cmds), lastOf(r.ticks))
	}
	for s := range r.snaps {
		sn := r.snaps[s]
		sort.SliceStable(sn, func(i, j int) bool { return sn[i].First < sn[j].First })
		// Keep the last written of any tick snapshotted twice.
		out := sn[:0]
		for _, c := range sn {
			if n := len(out); n > 0 && out[n-1].First == c.First {
				out[n-1] = c
				continue
			}
			out = append(out, c)
		}
		r.snaps[s] = out
	}
	if len(notes) > 0 {
		if r.truncated != "" {
			notes = append([]string{r.truncated}, notes...)
		}
		r.truncated = strings.Join(notes, "; ")
	}
}

// contiguous splits refs (in file order) into the run of ranges that
// follow each other from the first, and the rest.
func contiguous(refs []chunkRef) (run, rest []chunkRef) {
	if len(refs) == 0 {
		return nil, nil
	}
	n := 1
	for n < len(refs) && refs[n].First == refs[n-1].Last+1 && refs[n].Aux1 == refs[n-1].Aux2 {
		n++
	}
	return refs[:n:n], refs[n:]
}

func lastOf(refs []chunkRef) uint64 {
	if len(refs) == 0 {
		return 0
	}
	return refs[len(refs)-1].Last
}

// Close closes the file.
func (r *Reader) Close() error { return r.f.Close() }

// Header returns the recording's header.
func (r *Reader) Header() Header { return r.h }

// Path returns the file's path.
func (r *Reader) Path() string { return r.path }

// BaseTick returns the tick of the state the recording starts from: 0 for
// the start of the world (fresh sims), otherwise a tick with a full
// snapshot of every shard.
func (r *Reader) BaseTick() uint64 { return r.base }

// FirstTick returns the first tick whose commands are recorded
// (BaseTick()+1).
func (r *Reader) FirstTick() uint64 { return r.base + 1 }

// LastTick returns the last tick recorded completely (commands and
// hashes); it is BaseTick() when the recording holds no tick.
func (r *Reader) LastTick() uint64 { return r.last }

// Truncated says what was cut from a recording that was not closed
// cleanly or is damaged ("" if nothing was).
func (r *Reader) Truncated() string { return r.truncated }

// Indexed reports whether the recording was read through its seek index
// (false: it was recovered by scanning).
func (r *Reader) Indexed() bool { return r.indexed }

// bufPool recycles the buffers of chunk reads (seeks read many chunks;
// allocating them afresh makes the garbage collector a large part of a
// seek's time).
var bufPool sync.Pool

func getBuf(n int) *[]byte {
	if p, ok := bufPool.Get().(*[]byte); ok && cap(*p) >= n {
		*p = (*p)[:n]
		return p
	} else if ok {
		bufPool.Put(p)
	}
	b := make([]byte, n, max(n, 64<<10))
	return &b
}

func putBuf(p *[]byte) {
	if cap(*p) <= 8<<20 {
		bufPool.Put(p)
	}
}

// readRaw reads chunk c, checks it and returns its decompressed payload
// in a new slice.
func (r *Reader) readRaw(c *chunkRef) ([]byte, error) { return r.readRawInto(c, nil) }

// readRawInto is readRaw decompressing into dst's capacity.
func (r *Reader) readRawInto(c *chunkRef, dst []byte) ([]byte, error) {
	if c.Off < r.dataStart || c.Off > r.size-c.size() {
		return nil, fmt.Errorf("%w: %s lies beyond the file", ErrCorrupt, c.describe())
	}
	bp := getBuf(int(c.size()))
	defer putBuf(bp)
	b := *bp
	if _, err := r.f.ReadAt(b, c.Off); err != nil {
		return nil, fmt.Errorf("bsr: read %s: %w", c.describe(), err)
	}
	got, err := decodeChunkHeader(b, c.Off, r.h.Shards)
	if err != nil {
		return nil, err
	}
	if got != *c {
		return nil, fmt.Errorf("%w: %s: the chunk there is a %s", ErrCorrupt, c.describe(), got.describe())
	}
	n := len(b) - 4
	if crc32.Checksum(b[:n], castagnoli) != binary.LittleEndian.Uint32(b[n:]) {
		return nil, fmt.Errorf("%w: %s fails its checksum", ErrCorrupt, c.describe())
	}
	dec, err := sharedDecoder()
	if err != nil {
		return nil, err
	}
	if c.Raw <= MaxCachedRaw && c.Kind != KindSnapshot && c.Kind != KindLineage && c.Kind != KindIndex {
		dec = smallDecoder
	}
	// A frame that declares another size than the recorded one is
	// refused before it is decoded.
	var zh zstd.Header
	if err := zh.Decode(b[chunkHeaderLen:n]); err == nil && zh.HasFCS && zh.FrameContentSize != uint64(c.Raw) {
		return nil, fmt.Errorf("%w: %s: zstd frame of %d bytes, %d recorded", ErrCorrupt, c.describe(), zh.FrameContentSize, c.Raw)
	}
	raw, err := dec.DecodeAll(b[chunkHeaderLen:n], dst[:0])
	if err != nil {
		return nil, fmt.Errorf("%w: %s: decompress: %v", ErrCorrupt, c.describe(), err)
	}
	if len(raw) != int(c.Raw) {
		return nil, fmt.Errorf("%w: %s: %d bytes decompressed, %d recorded", ErrCorrupt, c.describe(), len(raw), c.Raw)
	}
	return raw, nil
}

// cachedDecode returns chunk c decoded by fn, through the reader's LRU
// cache (concurrent callers of one chunk share one decode).
// The cache holds at most cacheChunks chunks and cacheBudget decoded
// bytes (the chunk in use may exceed it alone).
func (r *Reader) cachedDecode(c *chunkRef, fn func(raw []byte) (any, int, error)) (any, error) {
	r.cacheMu.Lock()
	el, ok := r.cache[c.Off]
	if ok {
		r.lru.MoveToFront(el)
	} else {
		el = r.lru.PushFront(&cached{off: c.Off})
		r.cache[c.Off] = el
		r.evictLocked()
	}
	ent := el.Value.(*cached)
	r.cacheMu.Unlock()
	ent.once.Do(func() {
		raw, err := r.readRaw(c)
		if err != nil {
			ent.err = err
			return
		}
		var size int
		ent.value, size, ent.err = fn(raw)
		r.cacheMu.Lock()
		if !ent.evicted {
			ent.size = size
			r.cacheBytes += size
			r.evictLocked()
		}
		r.cacheMu.Unlock()
	})
	return ent.value, ent.err
}

// evictLocked drops the least recently used chunks beyond the cache's
// bounds (never the most recent one).
func (r *Reader) evictLocked() {
	for r.lru.Len() > 1 && (r.lru.Len() > cacheChunks || r.cacheBytes > r.cacheBudget) {
		old := r.lru.Back()
		r.lru.Remove(old)
		ent := old.Value.(*cached)
		delete(r.cache, ent.off)
		ent.evicted = true
		r.cacheBytes -= ent.size
	}
}

func (r *Reader) ticksChunk(c *chunkRef) (*ticksChunk, error) {
	v, err := r.cachedDecode(c, func(raw []byte) (any, int, error) {
		t, err := decodeTicks(raw, c, int(r.h.Shards))
		if err != nil {
			return nil, 0, err
		}
		return t, len(t.pos)*9 + len(t.hashes)*8, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*ticksChunk), nil
}

func (r *Reader) commandsChunk(c *chunkRef) ([]msg.Entry, error) {
	cc, err := r.commandsChunkVerified(c)
	if err != nil {
		return nil, err
	}
	return cc.entries, nil
}

// cmdChunk is a decoded commands chunk: its entries and whether each
// envelope passed the verifier (checked once, when decoded, for every
// shard replaying it).
type cmdChunk struct {
	entries []msg.Entry
	valid   []bool
	envs    []wire.Envelope // decoded where valid
}

func (r *Reader) commandsChunkVerified(c *chunkRef) (*cmdChunk, error) {
	v, err := r.cachedDecode(c, func(raw []byte) (any, int, error) {
		es, err := decodeEntries(raw, c)
		if err != nil {
			return nil, 0, err
		}
		cc := &cmdChunk{entries: es, valid: make([]bool, len(es)), envs: make([]wire.Envelope, len(es))}
		for i := range es {
			var err error
			cc.envs[i], err = replay.DecodeEnvelope(es[i].Record.Data)
			cc.valid[i] = err == nil
		}
		return cc, entriesDecodedSize(len(es), len(raw)) + len(es)*(1+envelopeSize), nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*cmdChunk), nil
}

// findRange returns the index in refs (a contiguous run) of the chunk
// holding tick.
func findRange(refs []chunkRef, tick uint64) (int, bool) {
	i := sort.Search(len(refs), func(i int) bool { return refs[i].Last >= tick })
	return i, i < len(refs) && refs[i].First <= tick
}

// Tick returns what the recording holds about tick (FirstTick..LastTick).
func (r *Reader) Tick(tick uint64) (TickRecord, error) {
	if tick < r.FirstTick() || tick > r.last {
		return TickRecord{}, fmt.Errorf("%w: tick %d (recorded %d..%d)", ErrOutOfRange, tick, r.FirstTick(), r.last)
	}
	i, ok := findRange(r.ticks, tick)
	if !ok {
		return TickRecord{}, fmt.Errorf("%w: tick %d (recorded %d..%d)", ErrOutOfRange, tick, r.FirstTick(), r.last)
	}
	tc, err := r.ticksChunk(&r.ticks[i])
	if err != nil {
		return TickRecord{}, err
	}
	rec := tc.record(tick)
	rec.Hashes = slices.Clone(rec.Hashes)
	return rec, nil
}

// Hash returns shard's recorded state hash after tick. For the base tick
// of a recording that starts from snapshots it is the base snapshot's.
func (r *Reader) Hash(shard uint32, tick uint64) (uint64, error) {
	if shard >= r.h.Shards {
		return 0, fmt.Errorf("bsr: shard %d of %d", shard, r.h.Shards)
	}
	if tick == r.base && r.base > 0 {
		if k, ok := r.snapshotAt(shard, tick); ok {
			return r.snaps[shard][k].Aux2, nil
		}
	}
	if tick < r.FirstTick() || tick > r.last {
		return 0, fmt.Errorf("%w: tick %d (recorded %d..%d)", ErrOutOfRange, tick, r.FirstTick(), r.last)
	}
	i, _ := findRange(r.ticks, tick)
	tc, err := r.ticksChunk(&r.ticks[i])
	if err != nil {
		return 0, err
	}
	return tc.hash(shard, tick), nil
}

// Hashes returns shard's recorded state hashes after ticks from..to.
func (r *Reader) Hashes(shard uint32, from, to uint64) ([]uint64, error) {
	if shard >= r.h.Shards {
		return nil, fmt.Errorf("bsr: shard %d of %d", shard, r.h.Shards)
	}
	if from < r.FirstTick() || to > r.last || from > to {
		return nil, fmt.Errorf("%w: ticks %d..%d (recorded %d..%d)", ErrOutOfRange, from, to, r.FirstTick(), r.last)
	}
	out := make([]uint64, 0, min(to-from+1, MaxChunkTicks))
	for t := from; t <= to; {
		i, _ := findRange(r.ticks, t)
		tc, err := r.ticksChunk(&r.ticks[i])
		if err != nil {
			return nil, err
		}
		for ; t <= to && t <= tc.last(); t++ {
			out = append(out, tc.hash(shard, t))
		}
	}
	return out, nil
}

// snapshotAt returns the index in r.snaps[shard] of the snapshot at tick.
func (r *Reader) snapshotAt(shard uint32, tick uint64) (int, bool) {
	sn := r.snaps[shard]
	k := sort.Search(len(sn), func(i int) bool { return sn[i].First >= tick })
	return k, k < len(sn) && sn[k].First == tick
}

// metaValue returns the last recorded value of a metadata name.
func (r *Reader) metaValue(name string) ([]byte, bool, error) {
	var best *chunkRef
	var value []byte
	for _, c := range r.refs {
		if c.Kind != KindMeta {
			continue
		}
		raw, err := r.readRaw(&c)
		if err != nil {
			return nil, false, err
		}
		n, v, err := decodeMeta(raw, &c)
		if err != nil {
			return nil, false, err
		}
		if n == name {
			cc := c
			best, value = &cc, v
		}
	}
	return value, best != nil, nil
}

// Lineage indexes the recorded lineage ranges (for Why, Affected and Frame
// queries). The horizon is the base tick: history before it is not in the
// recording.
func (r *Reader) Lineage() (*lineage.Index, error) {
	type key struct {
		shard uint32
		first uint64
	}
	latest := map[key]int{}
	var ranges []*lineage.Range
	for _, c := range r.lineage {
		raw, err := r.readRaw(&c)
		if err != nil {
			return nil, err
		}
		lr := new(lineage.Range)
		if err := lineage.DecodeRange(raw, lr); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, c.describe(), err)
		}
		if uint32(lr.Shard) != c.Shard || lr.FirstTick != c.First || lr.LastTick() != c.Last {
			return nil, fmt.Errorf("%w: %s holds shard %d ticks %d..%d", ErrCorrupt, c.describe(), lr.Shard, lr.FirstTick, lr.LastTick())
		}
		k := key{c.Shard, c.First}
		if i, ok := latest[k]; ok {
			ranges[i] = lr // a partial range replaced by the complete one
			continue
		}
		latest[k] = len(ranges)
		ranges = append(ranges, lr)
	}
	names, err := lineage.KindNames(context.Background(), &readerMeta{r: r})
	if err != nil {
		return nil, fmt.Errorf("bsr: lineage kind names: %w", err)
	}
	ix, err := lineage.BuildIndex(ranges, names, r.base)
	if err != nil {
		return nil, fmt.Errorf("bsr: %w", err)
	}
	return ix, nil
}

// Source returns the recorded log entries as a replay.Source, from the
// start of the recording to its end (then ErrEndOfLog): Record can
// re-record a recording with other options. Only a recording that starts at
// the start of the world (BaseTick 0) can be replayed from it alone.
func (r *Reader) Source() (replay.Source, error) {
	if r.base != 0 {
		return nil, fmt.Errorf("bsr: %s starts at tick %d, not at the start of the world: its log alone cannot rebuild the state", r.path, r.base)
	}
	return r.newEntrySource(0, ^uint64(0)), nil
}

// entrySource delivers the entries of a run of commands chunks with a
// position in (from, to]; at to it returns ErrEndOfLog without consuming
// anything, so raising to lets it continue.
type entrySource struct {
	r       *Reader
	refs    []chunkRef
	ci      int // next chunk to load
	entries []msg.Entry
	valid   []bool
	envs    []wire.Envelope
	ei      int
	from    uint64
	to      uint64
	last    bool // the last entry returned passed the verifier
	env     wire.Envelope
}

// envelopeSize is what a decoded envelope costs the reader's cache.
const envelopeSize = 88

// LastEnvelope implements replay.DecodedSource.
func (s *entrySource) LastEnvelope() (*wire.Envelope, bool) { return &s.env, s.last }

// LastVerified implements replay.VerifiedSource: the entry Next returned
// last was verified when its chunk was decoded.
func (s *entrySource) LastVerified() bool { return s.last }

// newEntrySource returns a source of r's entries in (from, to].
func (r *Reader) newEntrySource(from, to uint64) *entrySource {
	ci := sort.Search(len(r.cmds), func(i int) bool { return r.cmds[i].Aux2 > from })
	return &entrySource{r: r, refs: r.cmds, ci: ci, from: from, to: to}
}

// Next implements replay.Source.
func (s *entrySource) Next(ctx context.Context) (msg.Entry, error) {
	for {
		if s.ei < len(s.entries) {
			e := s.entries[s.ei]
			if e.Pos <= s.from {
				s.ei++
				continue
			}
			if e.Pos > s.to {
				return msg.Entry{}, replay.ErrEndOfLog
			}
			s.last, s.env = s.valid[s.ei], s.envs[s.ei]
			s.ei++
			return e, nil
		}
		if s.ci >= len(s.refs) || s.refs[s.ci].Aux1 >= s.to {
			return msg.Entry{}, replay.ErrEndOfLog
		}
		if err := ctx.Err(); err != nil {
			return msg.Entry{}, err
		}
		c := &s.refs[s.ci]
		s.ci++
		if c.Aux2 <= s.from {
			continue
		}
		cc, err := s.r.commandsChunkVerified(c)
		if err != nil {
			return msg.Entry{}, err
		}
		entries := cc.entries
		s.entries, s.valid, s.envs, s.ei = entries, cc.valid, cc.envs, 0
		if s.from > c.Aux1 {
			s.ei = sort.Search(len(entries), func(i int) bool { return entries[i].Pos > s.from })
		}
	}
}

// ScanStats describes a ScanTo.
type ScanStats struct {
	Chunks int
	Bytes  int64
	Took   time.Duration
}

// ScanTo reads and checks every chunk from the start of the file up to and
// including the commands chunk holding tick, as a player of a format
// without a seek index must before it can seek. Benchmarks use it to model
// such formats; Seeker never needs it.
func (r *Reader) ScanTo(tick uint64) (ScanStats, error) {
	start := time.Now()
	var st ScanStats
	sr := io.NewSectionReader(r.f, r.dataStart, r.size-r.dataStart)
	br := bufio.NewReaderSize(sr, 1<<20)
	off := r.dataStart
	hdr := make([]byte, chunkHeaderLen)
	var body []byte
	for off+chunkOverhead <= r.size {
		if _, err := io.ReadFull(br, hdr); err != nil {
			return st, err
		}
		c, err := decodeChunkHeader(hdr, off, r.h.Shards)
		if err != nil {
			return st, err
		}
		body = slices.Grow(body[:0], int(c.Stored)+4)[:c.Stored+4]
		if _, err := io.ReadFull(br, body); err != nil {
			return st, err
		}
		if crc32.Update(crc32.Checksum(hdr, castagnoli), castagnoli, body[:c.Stored]) != binary.LittleEndian.Uint32(body[c.Stored:]) {
			return st, fmt.Errorf("%w: %s fails its checksum", ErrCorrupt, c.describe())
		}
		st.Chunks++
		st.Bytes += c.size()
		off += c.size()
		if c.Kind == KindCommands && c.Last >= tick {
			break
		}
	}
	st.Took = time.Since(start)
	return st, nil
}

// readerMeta is the lineage.Store view of a recording's metadata, for
// lineage.KindNames.
type readerMeta struct{ r *Reader }

func (m *readerMeta) PutRange(context.Context, lineage.RangeInfo, []byte) error {
	return errors.New("bsr: recordings are read-only")
}
func (m *readerMeta) Ranges(context.Context) ([]lineage.RangeInfo, error) { return nil, nil }
func (m *readerMeta) GetRange(_ context.Context, shard lineage.ShardID, first uint64) ([]byte, error) {
	return nil, fmt.Errorf("bsr: range %d/%d: %w", shard, first, lineage.ErrNotFound)
}
func (m *readerMeta) DeleteBefore(context.Context, lineage.ShardID, uint64) error {
	return errors.New("bsr: recordings are read-only")
}
func (m *readerMeta) PutMeta(context.Context, string, []byte) error {
	return errors.New("bsr: recordings are read-only")
}
func (m *readerMeta) GetMeta(_ context.Context, name string) ([]byte, error) {
	v, ok, err := m.r.metaValue(name)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("bsr: meta %q: %w", name, lineage.ErrNotFound)
	}
	return v, nil
}
func (m *readerMeta) Close() error { return nil }
