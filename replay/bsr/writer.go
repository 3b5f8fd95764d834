package bsr

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"
)

// WriterOptions configure a Writer.
type WriterOptions struct {
	// Level is the zstd level of chunk payloads (default
	// zstd.SpeedDefault: recordings are written once and read often).
	Level zstd.EncoderLevel
	// Sync makes the writer fsync the file after every chunk of commands,
	// so that a machine crash (not only a process crash) loses at most
	// the chunk being written. Off by default: a process crash loses
	// nothing written, the operating system has it.
	Sync bool
}

// WriterStats counts what a Writer wrote.
type WriterStats struct {
	// Chunks and Bytes count the chunks written (index excluded) and the
	// file's size so far.
	Chunks int
	Bytes  int64
	// ByKind counts chunks and stored bytes per kind.
	ByKind map[ChunkKind]KindStats
}

// KindStats counts the chunks of one kind.
type KindStats struct {
	Chunks      int
	Raw, Stored int64
}

// Writer appends a recording to a file chunk by chunk: every chunk goes out
// in one write as soon as it is complete, so a crash leaves a file readable
// up to the last chunk written. Close writes the seek index and the
// trailer. A Writer is safe for concurrent use, but chunks of a range must
// be written in tick order (Record does this).
type Writer struct {
	mu     sync.Mutex
	f      *os.File
	path   string
	h      Header
	opt    WriterOptions
	enc    *zstd.Encoder
	off    int64
	refs   []chunkRef
	buf    []byte
	zbuf   []byte
	closed bool
	err    error // a failed write: the file is unusable
}

// Create creates (or truncates) path and writes h to it.
func Create(path string, h Header, opt WriterOptions) (*Writer, error) {
	if err := h.Validate(); err != nil {
		return nil, err
	}
	if h.Created == 0 {
		h.Created = time.Now().UnixNano()
	}
	if opt.Level == 0 {
		opt.Level = zstd.SpeedDefault
	}
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(opt.Level), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return nil, fmt.Errorf("bsr: zstd encoder: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("bsr: create %s: %w", path, err)
	}
	w := &Writer{f: f, path: path, h: h, opt: opt, enc: enc}
	w.buf = appendFileHeader(nil, &h)
	if _, err := f.Write(w.buf); err != nil {
		f.Close()
		return nil, fmt.Errorf("bsr: write %s: %w", path, err)
	}
	w.off = int64(len(w.buf))
	return w, nil
}

// Header returns the recording's header.
func (w *Writer) Header() Header { return w.h }

// Path returns the file's path.
func (w *Writer) Path() string { return w.path }

// Stats returns what was written so far.
func (w *Writer) Stats() WriterStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	st := WriterStats{Chunks: len(w.refs), Bytes: w.off, ByKind: map[ChunkKind]KindStats{}}
	for _, c := range w.refs {
		k := st.ByKind[c.Kind]
		k.Chunks++
		k.Raw += int64(c.Raw)
		k.Stored += chunkOverhead + int64(c.Stored)
		st.ByKind[c.Kind] = k
	}
	return st
}

// writeChunk compresses raw and appends it as a chunk described by c.
func (w *Writer) writeChunk(c chunkRef, raw []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	return w.writeChunkLocked(c, raw)
}

func (w *Writer) writeChunkLocked(c chunkRef, raw []byte) error {
	if w.err != nil {
		return w.err
	}
	if len(raw) > MaxChunkRaw {
		return fmt.Errorf("bsr: %s chunk of %d bytes exceeds %d", c.Kind, len(raw), MaxChunkRaw)
	}
	w.zbuf = w.enc.EncodeAll(raw, w.zbuf[:0])
	c.Raw, c.Stored, c.Off = uint32(len(raw)), uint32(len(w.zbuf)), w.off
	if err := c.check(w.h.Shards); err != nil {
		return fmt.Errorf("bsr: write: %w", err) // a bug of the caller
	}
	b := appendChunkHeader(w.buf[:0], &c)
	b = append(b, w.zbuf...)
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	w.buf = b
	if _, err := w.f.Write(b); err != nil {
		w.err = fmt.Errorf("bsr: write %s: %w", w.path, err)
		return w.err
	}
	w.off += int64(len(b))
	if c.Kind != KindIndex {
		w.refs = append(w.refs, c)
	}
	if w.opt.Sync && c.Kind == KindCommands {
		if err := w.f.Sync(); err != nil {
			w.err = fmt.Errorf("bsr: sync %s: %w", w.path, err)
			return w.err
		}
	}
	return nil
}

// WriteMeta appends a named metadata value (for example
// lineage.PutKindNames through the writer's lineage store). Readers keep
// the last value of each name.
func (w *Writer) WriteMeta(name string, value []byte) error {
	if name == "" || len(name) > 255 {
		return fmt.Errorf("bsr: meta name %q: want 1..255 bytes", name)
	}
	return w.writeChunk(chunkRef{Kind: KindMeta}, appendMeta(nil, name, value))
}

// Close writes the seek index and the trailer, syncs and closes the file.
// After an earlier write error it only closes the file (the file is then
// readable up to its last complete chunk) and returns that error.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	w.closed = true
	defer w.enc.Close()
	if w.err != nil {
		w.f.Close()
		return w.err
	}
	indexOff := w.off
	if err := w.writeChunkLocked(chunkRef{Kind: KindIndex}, appendIndex(nil, w.refs)); err != nil {
		w.f.Close()
		return err
	}
	tr := appendTrailer(nil, indexOff, w.off-indexOff)
	if _, err := w.f.Write(tr); err != nil {
		w.f.Close()
		return fmt.Errorf("bsr: write %s: %w", w.path, err)
	}
	w.off += int64(len(tr))
	if err := w.f.Sync(); err != nil {
		w.f.Close()
		return fmt.Errorf("bsr: sync %s: %w", w.path, err)
	}
	if err := w.f.Close(); err != nil {
		return fmt.Errorf("bsr: close %s: %w", w.path, err)
	}
	return nil
}

// abandon closes the file without the index, as a crash would leave it
// (tests).
func (w *Writer) abandon() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.closed = true
		w.f.Close()
		w.enc.Close()
	}
}
