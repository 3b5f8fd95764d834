// Package pipe carries pipelined request/response calls over one long-lived
// transport stream: each request frame starts with an 8-byte big-endian
// request id, which the reply frame repeats, so any number of calls can be
// in flight on one stream and replies may come back in any order. One reader
// goroutine per stream dispatches replies to their callers.
//
// The baselines of the side-by-side log benchmark use it (the Corfu-style
// client and the raw QUIC floor), so they share one honest, equally
// optimised request path. An echo server (transport.EchoServer) is a valid
// peer: it returns each request, id included.
package pipe

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/anoptic/broadside/netcode/transport"
)

// HeaderSize is the size of the request id that starts every frame.
const HeaderSize = 8

// ErrClosed is returned for calls on a closed client, and for calls still
// waiting when it closes.
var ErrClosed = errors.New("pipe: closed")

// ReplyFunc receives a call's reply body (valid only during the call: copy
// what you keep) or the error that ended the call. It runs on the stream's
// reader goroutine and must not block.
type ReplyFunc func(body []byte, err error)

// Client issues calls on one stream.
//
// Requests are written in batches. A caller of Send finding no write in
// progress writes the queued frames itself, once, so an idle client adds no
// hand-off; requests queued while a write is in progress are written by the
// client's writer goroutine, so no caller is kept writing other callers'
// frames for long (a caller that simply looped until the queue was empty
// would, under load, keep one unlucky request waiting for seconds).
// SendAsync always leaves the writing to the writer goroutine: reply
// callbacks, which run on a reader goroutine, use it to issue follow-up
// requests without ever blocking on flow control.
type Client struct {
	st *transport.Stream

	mu      sync.Mutex
	nextID  uint64
	waiting map[uint64]ReplyFunc
	err     error         // set once the stream failed or Close was called
	failed  chan struct{} // closed with err

	wmu     sync.Mutex
	queue   []*[]byte // request frames not yet written
	spare   []*[]byte // the other queue buffer, used by whoever writes
	writing bool      // a goroutine owns writing (inline caller or writer)
	wake    chan struct{}

	bufs       sync.Pool // *[]byte request frames
	readDone   chan struct{}
	writerDone chan struct{}
}

// NewClient starts a client on st (the client owns it from now on).
func NewClient(st *transport.Stream) *Client {
	c := &Client{st: st, waiting: make(map[uint64]ReplyFunc), failed: make(chan struct{}),
		wake: make(chan struct{}, 1), readDone: make(chan struct{}), writerDone: make(chan struct{})}
	go c.readLoop()
	go c.writeLoop()
	return c
}

// Dial connects ep to addr, opens one stream and returns a client on it.
func Dial(ctx context.Context, ep *transport.Endpoint, addr string) (*Client, error) {
	conn, err := ep.Dial(ctx, addr)
	if err != nil {
		return nil, fmt.Errorf("pipe: %w", err)
	}
	st, err := conn.OpenStream(ctx)
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("pipe: %w", err)
	}
	return NewClient(st), nil
}

// Send issues a request with body and arranges for reply to be called once
// with the reply or an error. body may be reused when Send returns. If Send
// returns an error, reply is never called. Send may write to the stream
// (once) on the caller's goroutine; see SendAsync.
func (c *Client) Send(body []byte, reply ReplyFunc) error { return c.send(body, reply, true) }

// SendAsync is Send without writing on the caller's goroutine: it never
// blocks on the network.
func (c *Client) SendAsync(body []byte, reply ReplyFunc) error { return c.send(body, reply, false) }

func (c *Client) send(body []byte, reply ReplyFunc, inline bool) error {
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return err
	}
	c.nextID++
	id := c.nextID
	c.waiting[id] = reply
	c.mu.Unlock()

	bp, _ := c.bufs.Get().(*[]byte)
	if bp == nil {
		bp = new([]byte)
	}
	*bp = binary.BigEndian.AppendUint64((*bp)[:0], id)
	*bp = append(*bp, body...)

	c.wmu.Lock()
	c.queue = append(c.queue, bp)
	if c.writing {
		c.wmu.Unlock()
		return nil
	}
	c.writing = true
	if !inline {
		c.wmu.Unlock()
		c.kick()
		return nil
	}
	batch := c.takeLocked()
	c.wmu.Unlock()
	c.write(batch)
	c.wmu.Lock()
	if len(c.queue) > 0 {
		c.wmu.Unlock()
		c.kick() // the writer goroutine carries on; writing stays true
		return nil
	}
	c.writing = false
	c.wmu.Unlock()
	return nil
}

// takeLocked swaps the queue for the spare buffer and returns what was
// queued. Called with wmu held by the goroutine that owns writing.
func (c *Client) takeLocked() []*[]byte {
	batch := c.queue
	c.queue = c.spare[:0]
	c.spare = nil
	return batch
}

func (c *Client) kick() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// write hands a batch of frames to the stream in one flush. A failed write
// fails the client (and so every waiting call).
func (c *Client) write(batch []*[]byte) {
	var err error
	for i, bp := range batch {
		if err == nil {
			err = c.st.BufferFrame(*bp) // copies the frame
		}
		c.bufs.Put(bp)
		batch[i] = nil
	}
	if err == nil {
		err = c.st.Flush()
	}
	c.wmu.Lock()
	if c.spare == nil {
		c.spare = batch[:0]
	}
	c.wmu.Unlock()
	if err != nil {
		c.fail(fmt.Errorf("pipe: send: %w", err))
	}
}

// writeLoop writes what callers queued while another write was in
// progress, and what SendAsync queued.
func (c *Client) writeLoop() {
	defer close(c.writerDone)
	for {
		select {
		case <-c.wake:
		case <-c.failed:
			return
		}
		for {
			c.wmu.Lock()
			if len(c.queue) == 0 {
				c.writing = false
				c.wmu.Unlock()
				break
			}
			batch := c.takeLocked()
			c.wmu.Unlock()
			c.write(batch)
		}
	}
}

// Call issues a request and waits for its reply, which it returns in a newly
// allocated slice.
func (c *Client) Call(ctx context.Context, body []byte) ([]byte, error) {
	type result struct {
		body []byte
		err  error
	}
	ch := make(chan result, 1)
	if err := c.Send(body, func(b []byte, err error) {
		ch <- result{append([]byte(nil), b...), err}
	}); err != nil {
		return nil, err
	}
	select {
	case r := <-ch:
		return r.body, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close closes the stream's connection; calls still waiting fail with
// ErrClosed. It waits for the client's goroutines to end.
func (c *Client) Close() error {
	c.fail(ErrClosed)
	_ = c.st.Conn().Close()
	<-c.readDone
	<-c.writerDone
	return nil
}

func (c *Client) fail(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	close(c.failed)
	waiting := c.waiting
	c.waiting = make(map[uint64]ReplyFunc)
	c.mu.Unlock()
	for _, reply := range waiting {
		reply(nil, err)
	}
}

func (c *Client) readLoop() {
	defer close(c.readDone)
	buf := make([]byte, 0, 64<<10)
	for {
		frame, err := c.st.ReadFrame(buf[:0])
		if err != nil {
			c.fail(fmt.Errorf("pipe: read: %w", err))
			return
		}
		if cap(frame) > cap(buf) && cap(frame) <= 1<<20 {
			buf = frame
		}
		if len(frame) < HeaderSize {
			c.fail(fmt.Errorf("pipe: short reply frame (%d bytes)", len(frame)))
			_ = c.st.Conn().CloseWithCode(transport.CodeProtocolError, "short frame")
			return
		}
		id := binary.BigEndian.Uint64(frame)
		c.mu.Lock()
		reply, ok := c.waiting[id]
		delete(c.waiting, id)
		c.mu.Unlock()
		if ok {
			reply(frame[HeaderSize:], nil)
		}
	}
}

// Responder answers the requests of one stream on the server side: it
// buffers replies while more requests are already waiting to be read and
// flushes when none is, so a burst of pipelined requests costs one write.
type Responder struct {
	st  *transport.Stream
	buf []byte
}

// NewResponder wraps a server-side stream.
func NewResponder(st *transport.Stream) *Responder { return &Responder{st: st} }

// Stream returns the wrapped stream.
func (r *Responder) Stream() *transport.Stream { return r.st }

// Next reads the next request, returning its id and body (valid until the
// next call). Malformed frames close the connection with
// CodeProtocolError.
func (r *Responder) Next() (id uint64, body []byte, err error) {
	frame, err := r.st.ReadFrame(r.buf[:0])
	if err != nil {
		return 0, nil, err
	}
	if cap(frame) > cap(r.buf) && cap(frame) <= 1<<20 {
		r.buf = frame
	}
	if len(frame) < HeaderSize {
		_ = r.st.Conn().CloseWithCode(transport.CodeProtocolError, "short frame")
		return 0, nil, fmt.Errorf("pipe: short request frame (%d bytes)", len(frame))
	}
	return binary.BigEndian.Uint64(frame), frame[HeaderSize:], nil
}

// More reports whether another request is already buffered.
func (r *Responder) More() bool { return r.st.FrameBuffered() }

// AppendReply appends the reply frame for request id with body to dst.
func AppendReply(dst []byte, id uint64, body ...[]byte) []byte {
	dst = binary.BigEndian.AppendUint64(dst, id)
	for _, b := range body {
		dst = append(dst, b...)
	}
	return dst
}
