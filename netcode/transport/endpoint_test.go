package transport

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/quic-go/quic-go"
)

// dial connects a fresh client endpoint to addr.
func dial(t testing.TB, addr net.Addr, mutate func(*Config)) *Conn {
	t.Helper()
	client := newEndpoint(t, func(c *Config) {
		c.ServerTLS = nil
		if mutate != nil {
			mutate(c)
		}
	})
	conn, err := client.Dial(testCtx(t), addr.String())
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

// TestEchoManyFramesConcurrently sends frames from several goroutines on one
// stream and checks that each writer's frames come back complete and in order.
func TestEchoManyFramesConcurrently(t *testing.T) {
	srv := newEchoServer(t, nil)
	conn := dial(t, srv.Addr(), nil)
	st, err := conn.OpenStream(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}

	const writers, perWriter = 8, 400
	received := make(chan error, 1)
	go func() {
		next := make([]int, writers)
		buf := make([]byte, 0, 4096)
		for range writers * perWriter {
			f, err := st.ReadFrame(buf[:0])
			if err != nil {
				received <- err
				return
			}
			id, seq := int(binary.BigEndian.Uint32(f)), int(binary.BigEndian.Uint32(f[4:]))
			if id >= writers || seq != next[id] || !bytes.Equal(f, testPayload(id, seq)) {
				received <- fmt.Errorf("writer %d: got seq %d (%d bytes), want seq %d", id, seq, len(f), next[id])
				return
			}
			next[id]++
			buf = f
		}
		// The echo server mirrors our Close after the last frame.
		if _, err := st.ReadFrame(buf[:0]); err != io.EOF {
			received <- fmt.Errorf("after the last frame: %v, want io.EOF", err)
			return
		}
		received <- nil
	}()

	var wg sync.WaitGroup
	for id := range writers {
		wg.Go(func() {
			for seq := range perWriter {
				var err error
				if id%2 == 0 {
					err = st.WriteFrame(testPayload(id, seq))
				} else if err = st.BufferFrame(testPayload(id, seq)); err == nil && seq%16 == 15 {
					err = st.Flush()
				}
				if err != nil {
					t.Errorf("writer %d: %v", id, err)
					return
				}
			}
			if err := st.Flush(); err != nil {
				t.Errorf("writer %d: flush: %v", id, err)
			}
		})
	}
	wg.Wait()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-received; err != nil {
		t.Fatal(err)
	}
}

// testPayload is writer id's frame number seq: 8 bytes of identity, then a
// size-varying pattern derived from both.
func testPayload(id, seq int) []byte {
	p := make([]byte, 8+(seq*37+id*101)%1500)
	binary.BigEndian.PutUint32(p, uint32(id))
	binary.BigEndian.PutUint32(p[4:], uint32(seq))
	for i := 8; i < len(p); i++ {
		p[i] = byte(id*7 + seq + i)
	}
	return p
}

func TestFrameTooLargeClosesConnection(t *testing.T) {
	server := newEndpoint(t, func(c *Config) { c.MaxFrameSize = 1024 })
	if err := server.Listen(); err != nil {
		t.Fatal(err)
	}
	// The client's own limit is larger, so its writer lets the frame through.
	conn := dial(t, server.Addr(), func(c *Config) { c.MaxFrameSize = 1 << 20 })

	serverErr := make(chan error, 1)
	go func() {
		sconn, err := server.Accept(testCtx(t))
		if err != nil {
			serverErr <- err
			return
		}
		st, err := sconn.AcceptStream(testCtx(t))
		if err != nil {
			serverErr <- err
			return
		}
		if f, err := st.ReadFrame(nil); err != nil || string(f) != "fine" {
			serverErr <- fmt.Errorf("first frame: %q %v", f, err)
			return
		}
		_, err = st.ReadFrame(nil)
		serverErr <- err
	}()

	st, err := conn.OpenStream(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.WriteFrame([]byte("fine")); err != nil {
		t.Fatal(err)
	}
	if err := st.WriteFrame(make([]byte, 1025)); err != nil {
		t.Fatal(err)
	}
	err = <-serverErr
	var tooLarge *FrameTooLargeError
	if !errors.As(err, &tooLarge) || tooLarge.Size != 1025 || tooLarge.Limit != 1024 {
		t.Fatalf("server read: got %v, want a FrameTooLargeError for 1025 > 1024", err)
	}
	cause := waitClosed(t, conn)
	code, remote, ok := ErrorCodeOf(cause)
	if !ok || code != CodeFrameTooLarge || !remote {
		t.Fatalf("client saw close %v (code %v remote %v ok %v), want remote CodeFrameTooLarge", cause, code, remote, ok)
	}
	if _, err := st.ReadFrame(nil); err == nil {
		t.Fatal("reading a closed connection succeeded")
	} else if code, _, _ := ErrorCodeOf(err); code != CodeFrameTooLarge {
		t.Fatalf("client read error %v does not carry CodeFrameTooLarge", err)
	}
}

func TestTruncatedFrameOverQUIC(t *testing.T) {
	server := newEndpoint(t, nil)
	if err := server.Listen(); err != nil {
		t.Fatal(err)
	}
	conn := dial(t, server.Addr(), nil)
	st, err := conn.OpenStream(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	// One whole frame, then a header announcing 100 bytes and only 10 of them,
	// written in pieces, then FIN.
	raw := append(encodeFrames([]byte("whole")), encodeFrames(make([]byte, 100))[:14]...)
	for _, piece := range [][]byte{raw[:3], raw[3:11], raw[11:]} {
		if _, err := st.QUIC().Write(piece); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	sconn, err := server.Accept(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	sst, err := sconn.AcceptStream(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if f, err := sst.ReadFrame(nil); err != nil || string(f) != "whole" {
		t.Fatalf("first frame: %q %v", f, err)
	}
	if _, err := sst.ReadFrame(nil); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("truncated frame: got %v, want io.ErrUnexpectedEOF", err)
	}
}

// TestServeAndDialOnOneEndpoint has two nodes that each listen and dial the
// other through the same socket.
func TestServeAndDialOnOneEndpoint(t *testing.T) {
	for _, network := range []struct{ name, addr string }{{"ipv4", "127.0.0.1:0"}, {"ipv6", "[::1]:0"}} {
		t.Run(network.name, func(t *testing.T) {
			nodes := make([]*Endpoint, 2)
			for i := range nodes {
				cfg := testConfig(t, network.addr)
				ep, err := NewEndpoint(cfg)
				if err != nil {
					if network.name == "ipv6" {
						t.Skipf("no IPv6 loopback: %v", err)
					}
					t.Fatal(err)
				}
				if err := ep.Listen(); err != nil {
					t.Fatal(err)
				}
				serveEcho(t, ep)
				nodes[i] = ep
			}
			for i, from := range nodes {
				to := nodes[1-i]
				conn, err := from.Dial(testCtx(t), to.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				if conn.LocalAddr().String() != from.Addr().String() {
					t.Fatalf("dialed from %s, want the endpoint's own socket %s", conn.LocalAddr(), from.Addr())
				}
				if conn.TLS().NegotiatedProtocol != testALPN {
					t.Fatalf("negotiated ALPN %q", conn.TLS().NegotiatedProtocol)
				}
				st, err := conn.OpenStream(testCtx(t))
				if err != nil {
					t.Fatal(err)
				}
				msg := fmt.Appendf(nil, "node %d to node %d", i, 1-i)
				if err := st.WriteFrame(msg); err != nil {
					t.Fatal(err)
				}
				if got, err := st.ReadFrame(nil); err != nil || !bytes.Equal(got, msg) {
					t.Fatalf("echo: %q %v", got, err)
				}
			}
		})
	}
}

func TestDialByHostName(t *testing.T) {
	srv := newEchoServer(t, nil)
	_, port, _ := net.SplitHostPort(srv.Addr().String())
	conn := dial(t, &hostAddr{"localhost:" + port}, nil)
	if got := conn.RemoteAddr().String(); got != srv.Addr().String() {
		t.Fatalf("localhost resolved to %s, want %s", got, srv.Addr())
	}
}

// hostAddr is a net.Addr spelled with a host name.
type hostAddr struct{ s string }

func (h *hostAddr) Network() string { return "udp" }
func (h *hostAddr) String() string  { return h.s }

func TestCloseWithCodeReachesPeer(t *testing.T) {
	server := newEndpoint(t, nil)
	if err := server.Listen(); err != nil {
		t.Fatal(err)
	}
	conn := dial(t, server.Addr(), nil)
	sconn, err := server.Accept(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := sconn.CloseWithCode(CodeRateLimited, "slow down"); err != nil {
		t.Fatal(err)
	}
	cause := waitClosed(t, conn)
	code, remote, ok := ErrorCodeOf(cause)
	if !ok || code != CodeRateLimited || !remote || !strings.Contains(cause.Error(), "slow down") {
		t.Fatalf("client saw %v (code %v remote %v ok %v)", cause, code, remote, ok)
	}
	code, remote, ok = ErrorCodeOf(context.Cause(sconn.Context()))
	if !ok || code != CodeRateLimited || remote {
		t.Fatalf("closing side sees code %v remote %v ok %v", code, remote, ok)
	}
}

func TestStreamAbortCarriesCode(t *testing.T) {
	srv := newEchoServer(t, nil)
	conn := dial(t, srv.Addr(), nil)
	st, err := conn.OpenStream(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.WriteFrame([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ReadFrame(nil); err != nil {
		t.Fatal(err)
	}
	st.Abort(CodeProtocolError)
	_, err = st.ReadFrame(nil)
	code, remote, ok := ErrorCodeOf(err)
	if !ok || code != CodeProtocolError || remote {
		t.Fatalf("read after abort: %v (code %v remote %v ok %v)", err, code, remote, ok)
	}
	// The connection itself survives a stream abort.
	st2, err := conn.OpenStream(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := st2.WriteFrame([]byte("again")); err != nil {
		t.Fatal(err)
	}
	if got, err := st2.ReadFrame(nil); err != nil || string(got) != "again" {
		t.Fatalf("second stream: %q %v", got, err)
	}
}

// TestCloseUnblocksEverything closes an endpoint while goroutines wait in
// Accept, AcceptStream and ReadFrame on it; all must return, and the peer must
// learn CodeShuttingDown. goleak (TestMain) checks nothing is left behind.
func TestCloseUnblocksEverything(t *testing.T) {
	server := newEndpoint(t, nil)
	if err := server.Listen(); err != nil {
		t.Fatal(err)
	}
	conn := dial(t, server.Addr(), nil)
	st, err := conn.OpenStream(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.WriteFrame([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	sconn, err := server.Accept(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	sst, err := sconn.AcceptStream(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sst.ReadFrame(nil); err != nil {
		t.Fatal(err)
	}

	ctx := context.Background() // only Close may unblock these
	errs := make(chan error, 4)
	go func() { _, err := server.Accept(ctx); errs <- err }()
	go func() { _, err := sconn.AcceptStream(ctx); errs <- err }()
	go func() { _, err := sst.ReadFrame(nil); errs <- err }()
	go func() { _, err := st.ReadFrame(nil); errs <- err }()

	if err := server.Close(); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if err := <-errs; err == nil {
			t.Fatal("a blocked call returned no error after Close")
		}
	}
	code, remote, ok := ErrorCodeOf(waitClosed(t, conn))
	if !ok || code != CodeShuttingDown || !remote {
		t.Fatalf("peer saw code %v remote %v ok %v, want remote CodeShuttingDown", code, remote, ok)
	}
	if _, err := server.Accept(ctx); !errors.Is(err, ErrEndpointClosed) || !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v", err)
	}
	if _, err := server.Dial(testCtx(t), conn.LocalAddr().String()); !errors.Is(err, ErrEndpointClosed) {
		t.Fatalf("Dial after Close: %v", err)
	}
	if err := server.Listen(); err == nil {
		t.Fatal("Listen after Close succeeded")
	}
	if err := server.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestCloseWithUnacceptedConnections(t *testing.T) {
	server := newEndpoint(t, nil)
	if err := server.Listen(); err != nil {
		t.Fatal(err)
	}
	conns := make([]*Conn, 3)
	for i := range conns {
		conns[i] = dial(t, server.Addr(), nil)
	}
	// Nobody accepted them; Close must still tell each peer at once (rather
	// than leave it to the idle timeout). A connection whose handshake the
	// server had not finished when it closed is refused instead.
	if err := server.Close(); err != nil {
		t.Fatal(err)
	}
	for _, conn := range conns {
		cause := waitClosed(t, conn)
		var transportErr *quic.TransportError
		if code, _, ok := ErrorCodeOf(cause); ok && code == CodeShuttingDown {
			continue
		}
		if errors.As(cause, &transportErr) && transportErr.ErrorCode == quic.ConnectionRefused {
			continue
		}
		t.Fatalf("unaccepted conn closed with %v", cause)
	}
}

func TestConfigValidation(t *testing.T) {
	base := testConfig(t, "127.0.0.1:0")
	tests := []struct {
		name   string
		mutate func(*Config)
	}{
		{"no ALPN", func(c *Config) { c.ALPN = nil }},
		{"empty ALPN entry", func(c *Config) { c.ALPN = []string{""} }},
		{"no TLS at all", func(c *Config) { c.ServerTLS, c.ClientTLS = nil, nil }},
		{"server TLS without certificate", func(c *Config) { c.ServerTLS = &tls.Config{} }},
		{"negative frame size", func(c *Config) { c.MaxFrameSize = -1 }},
		{"huge frame size", func(c *Config) { c.MaxFrameSize = MaxFrameSizeLimit + 1 }},
		{"bad address", func(c *Config) { c.ListenAddr = "not an address" }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			tc.mutate(&cfg)
			if ep, err := NewEndpoint(cfg); err == nil {
				_ = ep.Close()
				t.Fatal("invalid config accepted")
			}
		})
	}

	clientOnly := newEndpoint(t, func(c *Config) { c.ServerTLS = nil })
	if err := clientOnly.Listen(); err == nil {
		t.Fatal("Listen without ServerTLS succeeded")
	}
	serverOnly := newEndpoint(t, func(c *Config) { c.ClientTLS = nil })
	if _, err := serverOnly.Dial(testCtx(t), clientOnly.Addr().String()); err == nil {
		t.Fatal("Dial without ClientTLS succeeded")
	}
	if _, err := serverOnly.Accept(testCtx(t)); err == nil {
		t.Fatal("Accept before Listen succeeded")
	}
	if err := serverOnly.Listen(); err != nil {
		t.Fatal(err)
	}
	if err := serverOnly.Listen(); err == nil {
		t.Fatal("second Listen succeeded")
	}
}

func TestALPNMismatchRejected(t *testing.T) {
	srv := newEchoServer(t, nil)
	client := newEndpoint(t, func(c *Config) { c.ALPN = []string{"something-else/1"} })
	if _, err := client.Dial(testCtx(t), srv.Addr().String()); err == nil {
		t.Fatal("dial with a different ALPN succeeded")
	}
}

func TestErrorCodeOf(t *testing.T) {
	if _, _, ok := ErrorCodeOf(nil); ok {
		t.Fatal("nil carries no code")
	}
	if _, _, ok := ErrorCodeOf(io.EOF); ok {
		t.Fatal("io.EOF carries no code")
	}
	wrapped := fmt.Errorf("ctx: %w", &quic.ApplicationError{ErrorCode: 4, Remote: true})
	if code, remote, ok := ErrorCodeOf(wrapped); !ok || code != CodeRateLimited || !remote {
		t.Fatalf("got %v %v %v", code, remote, ok)
	}
	streamErr := &quic.StreamError{ErrorCode: quic.StreamErrorCode(CodeUnauthorized)}
	if code, remote, ok := ErrorCodeOf(streamErr); !ok || code != CodeUnauthorized || remote {
		t.Fatalf("got %v %v %v", code, remote, ok)
	}
	if CodeFrameTooLarge.String() != "frame too large" || ErrorCode(0x1234).String() != "code 0x1234" {
		t.Fatal("ErrorCode.String")
	}
}

// TestBufferWarningRouted checks that quic-go's own stderr warning about UDP
// buffer sizes is switched off once an endpoint exists (the endpoint reports
// through slog instead), unless the user chose a value.
func TestBufferWarningRouted(t *testing.T) {
	newEndpoint(t, nil)
	if v, set := os.LookupEnv(quicBufferWarningEnv); !set || v == "" {
		t.Fatalf("%s not set after NewEndpoint", quicBufferWarningEnv)
	}
}
