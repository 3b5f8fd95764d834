package transport

import (
	"context"
	"net"
	"sync"
)

// EchoServer is a minimal frame echo service: every frame received on any
// stream of any connection is sent back on the same stream. It is the far end
// of round-trip benchmarks (the raw-QUIC floor a 1-RTT log append is compared
// with) and a handy peer in tests. Pipelined requests are answered in
// batches: replies are buffered while further requests are already waiting
// and flushed when none is.
type EchoServer struct {
	ep     *Endpoint
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NewEchoServer starts an echo server on a new listening Endpoint built from
// cfg (which needs ServerTLS). The server owns the endpoint.
func NewEchoServer(cfg Config) (*EchoServer, error) {
	ep, err := NewEndpoint(cfg)
	if err != nil {
		return nil, err
	}
	if err := ep.Listen(); err != nil {
		_ = ep.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &EchoServer{ep: ep, cancel: cancel}
	s.wg.Go(func() { s.acceptConns(ctx) })
	return s, nil
}

// Addr returns the address clients dial.
func (s *EchoServer) Addr() net.Addr { return s.ep.Addr() }

// Endpoint returns the server's endpoint.
func (s *EchoServer) Endpoint() *Endpoint { return s.ep }

// Close closes the endpoint (and so every client connection, with
// CodeShuttingDown) and waits for all of the server's goroutines to end.
func (s *EchoServer) Close() error {
	s.cancel()
	err := s.ep.Close()
	s.wg.Wait()
	return err
}

func (s *EchoServer) acceptConns(ctx context.Context) {
	for {
		conn, err := s.ep.Accept(ctx)
		if err != nil {
			return
		}
		s.wg.Go(func() { s.acceptStreams(ctx, conn) })
	}
}

func (s *EchoServer) acceptStreams(ctx context.Context, conn *Conn) {
	for {
		st, err := conn.AcceptStream(ctx)
		if err != nil {
			return
		}
		s.wg.Go(func() { echoFrames(st) })
	}
}

// echoFrames copies frames back until the stream or connection ends. The
// frames are copied into the writer's buffer, so one read buffer serves all.
func echoFrames(st *Stream) {
	buf := make([]byte, 0, 64<<10)
	for {
		frame, err := st.ReadFrame(buf[:0])
		if err != nil {
			_ = st.Close() // clean EOF: mirror it; otherwise the conn is gone anyway
			return
		}
		if cap(frame) > cap(buf) {
			buf = frame
		}
		if err := st.BufferFrame(frame); err != nil {
			return
		}
		if !st.FrameBuffered() {
			if err := st.Flush(); err != nil {
				return
			}
		}
	}
}
