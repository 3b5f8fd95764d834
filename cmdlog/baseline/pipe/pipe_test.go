package pipe

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/anoptic/broadside/netcode/transport"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const alpn = "pipe-test/1"

// echo starts an echo server and a client endpoint dialing it.
func echo(t *testing.T) (*Client, *transport.EchoServer) {
	t.Helper()
	ca, err := transport.NewDevCA()
	if err != nil {
		t.Fatal(err)
	}
	server, client, err := ca.MutualTLS("localhost", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := transport.NewEchoServer(transport.Config{ListenAddr: "127.0.0.1:0", ServerTLS: server, ALPN: []string{alpn}})
	if err != nil {
		t.Fatal(err)
	}
	ep, err := transport.NewEndpoint(transport.Config{ListenAddr: "127.0.0.1:0", ClientTLS: client, ALPN: []string{alpn}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, ep, srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		ep.Close()
		srv.Close()
	})
	return c, srv
}

// TestConcurrentCallsGetTheirOwnReplies pipelines many calls from many
// goroutines, both Send flavours, and checks every reply matches its call.
func TestConcurrentCallsGetTheirOwnReplies(t *testing.T) {
	c, _ := echo(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 100 {
				body := fmt.Appendf(nil, "call %d/%d %s", g, i, bytes.Repeat([]byte{'x'}, i*37))
				if i%2 == 0 {
					got, err := c.Call(ctx, body)
					if err != nil || !bytes.Equal(got, body) {
						t.Errorf("call %d/%d: %q, %v", g, i, got, err)
						return
					}
					continue
				}
				done := make(chan error, 1)
				want := append([]byte(nil), body...)
				if err := c.SendAsync(body, func(got []byte, err error) {
					if err == nil && !bytes.Equal(got, want) {
						err = fmt.Errorf("reply %q", got)
					}
					done <- err
				}); err != nil {
					t.Error(err)
					return
				}
				body[0] = '!' // the caller may reuse body at once
				select {
				case err := <-done:
					if err != nil {
						t.Errorf("async call %d/%d: %v", g, i, err)
						return
					}
				case <-ctx.Done():
					t.Errorf("async call %d/%d: %v", g, i, ctx.Err())
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestCloseFailsWaitingCalls checks that calls in flight end with ErrClosed
// and later calls are refused.
func TestCloseFailsWaitingCalls(t *testing.T) {
	c, srv := echo(t)
	srv.Close() // no replies from now on
	errc := make(chan error, 1)
	if err := c.Send([]byte("never answered"), func(_ []byte, err error) { errc <- err }); err != nil {
		errc <- err // the server's close already reached the client
	}
	c.Close()
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("call completed without a reply")
		}
		if !errors.Is(err, ErrClosed) {
			t.Logf("call failed with %v (the server's close came first)", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waiting call not failed by Close")
	}
	if err := c.Send([]byte("late"), func([]byte, error) {}); err == nil {
		t.Fatal("Send after Close succeeded")
	}
}
