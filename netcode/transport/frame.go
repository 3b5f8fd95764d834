package transport

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
)

// Frame format.
//
// A frame is a 4-byte big-endian unsigned length followed by that many bytes
// of opaque payload. A zero-length frame is valid. There is no type byte:
// callers put whatever they need (a FlatBuffers envelope, a message kind) in
// the payload.
//
// Fixed 4 bytes rather than a uvarint: it has exactly one encoding per length
// (no overlong forms to reject), the limit check is a single comparison on a
// Peek of 4 bytes, and other-language peers implement it in one line. The
// cost is 3 bytes per frame over a 1-byte uvarint, about 3% of a 100-byte log
// append, which is well below QUIC's own per-packet overhead.
const (
	// FrameHeaderSize is the size of the length prefix in front of every frame.
	FrameHeaderSize = 4
	// DefaultMaxFrameSize is the payload limit used when Config.MaxFrameSize is 0.
	DefaultMaxFrameSize = 4 << 20
	// MaxFrameSizeLimit is the largest limit a FrameReader or FrameWriter
	// accepts; frames are meant for messages, not bulk files.
	MaxFrameSizeLimit = 1 << 30
)

// Buffer tuning. flushThreshold bounds how much BufferFrame accumulates before
// it writes on its own; pendingLimit bounds how much may queue up behind a
// flush in progress before producers wait (backpressure). retainLimit caps the
// buffer capacity kept for reuse, so one huge frame does not pin memory.
// readBufferSize is the bufio.Reader size per stream: big enough to pull ~150
// log appends per read, small enough for a server with many player streams
// (frames larger than it bypass it and are read straight into their buffer).
const (
	flushThreshold = 64 << 10
	pendingLimit   = 1 << 20
	retainLimit    = 256 << 10
	readBufferSize = 16 << 10
)

// ErrFrameTooLarge is matched (errors.Is) by every error about a frame above
// the size limit, on the reading and on the writing side. The concrete error
// is a *FrameTooLargeError carrying the sizes.
var ErrFrameTooLarge = errors.New("transport: frame too large")

// FrameTooLargeError reports a frame whose length exceeds the limit. On the
// reading side it is returned after reading only the 4-byte header: nothing
// is allocated for the payload.
type FrameTooLargeError struct {
	Size  uint64 // announced (read side) or attempted (write side) payload size
	Limit int    // the frame size limit in force
}

// Error describes the sizes involved.
func (e *FrameTooLargeError) Error() string {
	return fmt.Sprintf("transport: frame of %d bytes exceeds limit of %d bytes", e.Size, e.Limit)
}

// Is makes errors.Is(err, ErrFrameTooLarge) true.
func (e *FrameTooLargeError) Is(target error) bool { return target == ErrFrameTooLarge }

func checkMaxFrameSize(n int) (int, error) {
	switch {
	case n == 0:
		return DefaultMaxFrameSize, nil
	case n < 0 || n > MaxFrameSizeLimit:
		return 0, fmt.Errorf("transport: frame size limit %d outside [1, %d]", n, MaxFrameSizeLimit)
	}
	return n, nil
}

// FrameReader reads length-prefixed frames from a byte stream through a
// bufio.Reader, so many small frames cost few reads of the underlying stream
// and partial reads are handled transparently. It is not safe for concurrent
// use: a stream has one reading goroutine.
type FrameReader struct {
	br       *bufio.Reader
	maxFrame int
	err      error // sticky: after a framing error the byte stream is out of sync
}

// NewFrameReader returns a FrameReader over r that rejects frames above
// maxFrameSize bytes (0 means DefaultMaxFrameSize). It panics if maxFrameSize
// is negative or above MaxFrameSizeLimit, which is a programming error.
func NewFrameReader(r io.Reader, maxFrameSize int) *FrameReader {
	return newFrameReaderSize(r, maxFrameSize, readBufferSize)
}

// newFrameReaderSize is NewFrameReader with a chosen read buffer size (tests
// use a tiny one to push frames across buffer refills).
func newFrameReaderSize(r io.Reader, maxFrameSize, bufferSize int) *FrameReader {
	limit, err := checkMaxFrameSize(maxFrameSize)
	if err != nil {
		panic(err)
	}
	return &FrameReader{br: bufio.NewReaderSize(r, bufferSize), maxFrame: limit}
}

// ReadFrame reads the next frame. The payload is stored in buf[:n] when buf
// has the capacity (pass the previous result, resliced to zero, to reuse it),
// otherwise in a newly allocated slice; the result is valid until buf is
// reused. A frame above the limit returns a *FrameTooLargeError without
// allocating. End of input exactly at a frame boundary returns io.EOF; end of
// input inside a frame returns an error matching io.ErrUnexpectedEOF.
// A read error while waiting for the 4-byte header (a read deadline, say)
// consumes nothing and can be retried; after a truncated or oversized frame,
// or an error in the middle of a payload, the reader stays failed, since the
// byte stream is no longer aligned on frames.
func (fr *FrameReader) ReadFrame(buf []byte) ([]byte, error) {
	if fr.err != nil {
		return nil, fr.err
	}
	hdr, err := fr.br.Peek(FrameHeaderSize)
	if err != nil {
		switch {
		case errors.Is(err, io.EOF) && len(hdr) == 0:
			return nil, io.EOF
		case errors.Is(err, io.EOF):
			return nil, fr.fail(fmt.Errorf("transport: truncated frame header (%d of %d bytes): %w",
				len(hdr), FrameHeaderSize, io.ErrUnexpectedEOF))
		default:
			// Not sticky: Peek consumed nothing, so after a read deadline
			// (say) the next call resumes where this one stopped.
			return nil, fmt.Errorf("transport: read frame header: %w", err)
		}
	}
	size := binary.BigEndian.Uint32(hdr)
	if uint64(size) > uint64(fr.maxFrame) {
		return nil, fr.fail(&FrameTooLargeError{Size: uint64(size), Limit: fr.maxFrame})
	}
	if _, err := fr.br.Discard(FrameHeaderSize); err != nil {
		// Cannot happen: the header bytes are buffered.
		return nil, fr.fail(fmt.Errorf("transport: discard frame header: %w", err))
	}
	n := int(size)
	var frame []byte
	if cap(buf) >= n {
		frame = buf[:n]
	} else {
		frame = make([]byte, n)
	}
	if got, err := io.ReadFull(fr.br, frame); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fr.fail(fmt.Errorf("transport: truncated frame (%d of %d bytes): %w",
				got, n, io.ErrUnexpectedEOF))
		}
		return nil, fr.fail(fmt.Errorf("transport: read frame of %d bytes: %w", n, err))
	}
	return frame, nil
}

// FrameBuffered reports whether ReadFrame can return without reading from the
// underlying stream: a complete frame (or a header that ReadFrame will reject)
// is already buffered. A server answering pipelined requests buffers its
// replies while this is true and flushes once it is false, so a burst of
// requests costs one write.
func (fr *FrameReader) FrameBuffered() bool {
	if fr.err != nil {
		return true
	}
	buffered := fr.br.Buffered()
	if buffered < FrameHeaderSize {
		return false
	}
	hdr, err := fr.br.Peek(FrameHeaderSize)
	if err != nil {
		return false
	}
	size := uint64(binary.BigEndian.Uint32(hdr))
	return size > uint64(fr.maxFrame) || uint64(buffered-FrameHeaderSize) >= size
}

// MaxFrameSize returns the payload limit the reader enforces.
func (fr *FrameReader) MaxFrameSize() int { return fr.maxFrame }

func (fr *FrameReader) fail(err error) error {
	fr.err = err
	return err
}

// FrameWriter writes length-prefixed frames to an io.Writer, coalescing many
// small frames into few writes. It is safe for concurrent use; frames from
// one goroutine keep their order, and frames never interleave.
//
// Coalescing works without a goroutine ("flush combining"): frames are
// appended to a pending buffer under a mutex; when no write is in progress,
// the caller becomes the flusher and writes everything pending in one Write,
// then loops while other callers appended more meanwhile. An idle writer thus
// sends a frame immediately (no added latency), and a busy one batches
// automatically: while one Write is in flight, every frame queued behind it
// goes out in the next single Write. A producer that writes a burst from one
// goroutine uses BufferFrame and Flush to batch explicitly.
//
// Errors from the underlying writer are sticky: once a Write fails, every
// later call returns that error.
type FrameWriter struct {
	w        io.Writer
	maxFrame int

	mu       sync.Mutex
	progress sync.Cond // broadcast after every underlying Write and when a flush ends
	pending  []byte    // encoded frames not yet handed to w
	spare    []byte    // buffer recycled from the last Write
	queued   uint64    // total bytes ever appended to pending
	written  uint64    // total bytes handed to w
	flushing bool      // a goroutine is inside flushLocked
	err      error
}

// NewFrameWriter returns a FrameWriter over w that refuses frames above
// maxFrameSize bytes (0 means DefaultMaxFrameSize). It panics if maxFrameSize
// is negative or above MaxFrameSizeLimit, which is a programming error.
func NewFrameWriter(w io.Writer, maxFrameSize int) *FrameWriter {
	limit, err := checkMaxFrameSize(maxFrameSize)
	if err != nil {
		panic(err)
	}
	fw := &FrameWriter{w: w, maxFrame: limit}
	fw.progress.L = &fw.mu
	return fw
}

// WriteFrame queues one frame and makes sure it is written promptly: if no
// write is in progress it writes now (together with anything else pending);
// otherwise the goroutine already writing will include it in its next Write,
// and WriteFrame returns at once. A nil error therefore means the frame was
// accepted, not that it reached the stream; call Flush for that. A frame above
// the limit returns a *FrameTooLargeError and is not queued. p may be reused
// as soon as WriteFrame returns.
func (fw *FrameWriter) WriteFrame(p []byte) error {
	fw.mu.Lock()
	if err := fw.appendLocked(p); err != nil {
		fw.mu.Unlock()
		return err
	}
	if fw.flushing {
		fw.mu.Unlock()
		return nil
	}
	return fw.flushLocked()
}

// BufferFrame queues one frame without writing it, unless 64 KiB or more are
// pending, in which case it writes (or leaves it to a write in progress). Use
// it for bursts from one goroutine and finish the burst with Flush. p may be
// reused as soon as BufferFrame returns.
func (fw *FrameWriter) BufferFrame(p []byte) error {
	fw.mu.Lock()
	if err := fw.appendLocked(p); err != nil {
		fw.mu.Unlock()
		return err
	}
	if fw.flushing || len(fw.pending) < flushThreshold {
		fw.mu.Unlock()
		return nil
	}
	return fw.flushLocked()
}

// Flush returns once every frame queued before the call has been handed to
// the underlying writer (or the writer failed), writing them itself if no
// other goroutine is doing so.
func (fw *FrameWriter) Flush() error {
	fw.mu.Lock()
	target := fw.queued
	for fw.written < target && fw.err == nil {
		if !fw.flushing {
			return fw.flushLocked()
		}
		fw.progress.Wait()
	}
	err := fw.err
	fw.mu.Unlock()
	return err
}

// Buffered returns the number of encoded bytes queued but not yet written.
func (fw *FrameWriter) Buffered() int {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	return len(fw.pending)
}

// MaxFrameSize returns the payload limit the writer enforces.
func (fw *FrameWriter) MaxFrameSize() int { return fw.maxFrame }

// appendLocked encodes p into pending, waiting first while too much is queued
// behind a write in progress. Called with fw.mu held.
func (fw *FrameWriter) appendLocked(p []byte) error {
	if fw.err != nil {
		return fw.err
	}
	if len(p) > fw.maxFrame {
		return &FrameTooLargeError{Size: uint64(len(p)), Limit: fw.maxFrame}
	}
	for fw.flushing && len(fw.pending) > 0 && len(fw.pending)+FrameHeaderSize+len(p) > pendingLimit {
		fw.progress.Wait()
		if fw.err != nil {
			return fw.err
		}
	}
	fw.pending = binary.BigEndian.AppendUint32(fw.pending, uint32(len(p)))
	fw.pending = append(fw.pending, p...)
	fw.queued += uint64(FrameHeaderSize + len(p))
	return nil
}

// flushLocked writes pending data until none is left. It is called with fw.mu
// held and fw.flushing false, and returns with fw.mu released.
func (fw *FrameWriter) flushLocked() error {
	fw.flushing = true
	for len(fw.pending) > 0 && fw.err == nil {
		batch := fw.pending
		fw.pending = fw.spare[:0]
		fw.spare = nil
		fw.mu.Unlock()
		_, err := fw.w.Write(batch)
		fw.mu.Lock()
		if cap(batch) <= retainLimit {
			fw.spare = batch[:0]
		}
		if err != nil {
			fw.err = fmt.Errorf("transport: write %d bytes of frames: %w", len(batch), err)
		} else {
			fw.written += uint64(len(batch))
		}
		fw.progress.Broadcast()
	}
	fw.flushing = false
	if fw.err != nil {
		// Nothing will ever write what is still pending; release it.
		fw.pending, fw.spare = nil, nil
	}
	fw.progress.Broadcast()
	err := fw.err
	fw.mu.Unlock()
	return err
}
