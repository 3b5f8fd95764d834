package transport

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/quic-go/quic-go"
)

// Stream is a long-lived bidirectional QUIC stream carrying length-prefixed
// frames (see FrameReader and FrameWriter for the format and the coalescing).
//
// Writing (WriteFrame, BufferFrame, Flush) is safe for concurrent use.
// Reading (ReadFrame, FrameBuffered) belongs to one goroutine at a time.
// Reading and writing may proceed concurrently.
type Stream struct {
	qs   *quic.Stream
	conn *Conn
	r    *FrameReader
	w    *FrameWriter
}

func newStream(qs *quic.Stream, c *Conn) *Stream {
	return &Stream{
		qs:   qs,
		conn: c,
		r:    NewFrameReader(qs, c.maxFrame),
		w:    NewFrameWriter(qs, c.maxWrite),
	}
}

// ReadFrame reads the next frame into buf if it fits (see
// FrameReader.ReadFrame). io.EOF means the peer closed its side cleanly.
// A frame announced above the size limit closes the whole connection with
// CodeFrameTooLarge, since the peer is misbehaving, and returns an error
// matching ErrFrameTooLarge. It blocks until a frame arrives, the stream or
// connection ends, or a read deadline passes.
func (s *Stream) ReadFrame(buf []byte) ([]byte, error) {
	frame, err := s.r.ReadFrame(buf)
	if err != nil {
		var tooLarge *FrameTooLargeError
		if errors.As(err, &tooLarge) {
			_ = s.conn.CloseWithCode(CodeFrameTooLarge, tooLarge.Error())
		}
		return nil, err
	}
	return frame, nil
}

// FrameBuffered reports whether ReadFrame would return without waiting for
// the network; see FrameReader.FrameBuffered.
func (s *Stream) FrameBuffered() bool { return s.r.FrameBuffered() }

// WriteFrame queues a frame and sees that it is written promptly, batched with
// frames from concurrent writers (see FrameWriter.WriteFrame).
func (s *Stream) WriteFrame(p []byte) error { return s.w.WriteFrame(p) }

// BufferFrame queues a frame for the next Flush (see FrameWriter.BufferFrame).
func (s *Stream) BufferFrame(p []byte) error { return s.w.BufferFrame(p) }

// Flush hands every queued frame to QUIC (see FrameWriter.Flush).
func (s *Stream) Flush() error { return s.w.Flush() }

// Close flushes queued frames and closes the sending side; the peer reads
// io.EOF after the last frame. Reading continues until the peer closes its
// side.
func (s *Stream) Close() error {
	flushErr := s.w.Flush()
	if err := s.qs.Close(); err != nil {
		return fmt.Errorf("transport: close stream %d: %w", s.qs.StreamID(), err)
	}
	return flushErr
}

// Abort abandons the stream in both directions with code, which the peer
// sees through ErrorCodeOf on its next read or write. Queued frames are
// dropped.
func (s *Stream) Abort(code ErrorCode) {
	s.qs.CancelWrite(quic.StreamErrorCode(code))
	s.qs.CancelRead(quic.StreamErrorCode(code))
}

// SetReadDeadline makes blocked and future ReadFrame calls fail after t
// (zero means no deadline). If the deadline strikes while ReadFrame waits for
// the next frame's header, extend it and read again; if it strikes in the
// middle of a payload, the stream is unusable for reading afterwards.
func (s *Stream) SetReadDeadline(t time.Time) error { return s.qs.SetReadDeadline(t) }

// Context is cancelled when the sending side is closed or aborted, or the
// connection ends.
func (s *Stream) Context() context.Context { return s.qs.Context() }

// Conn returns the connection the stream belongs to.
func (s *Stream) Conn() *Conn { return s.conn }

// QUIC returns the underlying quic-go stream. Writing to it directly
// interleaves with framed writes and corrupts the stream; it is meant for
// priorities, IDs and tests.
func (s *Stream) QUIC() *quic.Stream { return s.qs }
