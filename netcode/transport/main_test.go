package transport

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const testALPN = "broadside-test/1"

// testTimeout bounds every wait in the tests; loopback operations take
// microseconds, so hitting it means a hang, not slowness.
const testTimeout = 20 * time.Second

// testCA is one development CA shared by the whole test binary.
var testCA = sync.OnceValue(func() *DevCA {
	ca, err := NewDevCA()
	if err != nil {
		panic(err)
	}
	return ca
})

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// testConfig returns a config for a loopback node trusting testCA.
func testConfig(t testing.TB, addr string) Config {
	t.Helper()
	server, err := testCA().ServerTLS()
	if err != nil {
		t.Fatal(err)
	}
	return Config{
		ListenAddr: addr,
		ServerTLS:  server,
		ClientTLS:  testCA().ClientTLS(),
		ALPN:       []string{testALPN},
		Logger:     slog.New(slog.DiscardHandler),
	}
}

// newEndpoint creates an endpoint on 127.0.0.1 from testConfig, adjusted by
// mutate, and closes it at the end of the test.
func newEndpoint(t testing.TB, mutate func(*Config)) *Endpoint {
	t.Helper()
	cfg := testConfig(t, "127.0.0.1:0")
	if mutate != nil {
		mutate(&cfg)
	}
	ep, err := NewEndpoint(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ep.Close(); err != nil {
			t.Errorf("close endpoint: %v", err)
		}
	})
	return ep
}

// newEchoServer starts an EchoServer on 127.0.0.1 and closes it at the end of
// the test.
func newEchoServer(t testing.TB, mutate func(*Config)) *EchoServer {
	t.Helper()
	cfg := testConfig(t, "127.0.0.1:0")
	if mutate != nil {
		mutate(&cfg)
	}
	srv, err := NewEchoServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("close echo server: %v", err)
		}
	})
	return srv
}

// serveEcho runs the echo loop on an existing, listening endpoint. At cleanup
// it closes the endpoint (idempotent) and waits for its goroutines.
func serveEcho(t testing.TB, ep *Endpoint) {
	t.Helper()
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() {
		cancel()
		_ = ep.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			conn, err := ep.Accept(ctx)
			if err != nil {
				return
			}
			wg.Go(func() {
				for {
					st, err := conn.AcceptStream(ctx)
					if err != nil {
						return
					}
					wg.Go(func() { echoFrames(st) })
				}
			})
		}
	})
}

// waitClosed waits until conn is closed and returns the close cause.
func waitClosed(t testing.TB, conn *Conn) error {
	t.Helper()
	select {
	case <-conn.Context().Done():
		return context.Cause(conn.Context())
	case <-time.After(testTimeout):
		t.Fatal("connection did not close")
		return nil
	}
}
