package transport

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// roundTrip opens a stream on conn and checks one echoed frame.
func roundTrip(conn *Conn, t testing.TB) error {
	st, err := conn.OpenStream(testCtx(t))
	if err != nil {
		return err
	}
	if err := st.WriteFrame([]byte("ping")); err != nil {
		return err
	}
	got, err := st.ReadFrame(nil)
	if err != nil {
		return err
	}
	if string(got) != "ping" {
		return errors.New("echo mismatch")
	}
	return nil
}

func TestDevCAPersistAndReload(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	created, err := LoadOrCreateDevCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	keyInfo, err := os.Stat(filepath.Join(dir, DevCAKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if perm := keyInfo.Mode().Perm(); perm != 0o600 {
		t.Fatalf("CA key has mode %v, want 0600", perm)
	}
	if _, err := os.Stat(filepath.Join(dir, DevCACertFile)); err != nil {
		t.Fatal(err)
	}

	reloaded, err := LoadOrCreateDevCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !reloaded.Certificate().Equal(created.Certificate()) {
		t.Fatal("reloading produced a different CA")
	}
	if !bytes.Equal(reloaded.CertPEM(), created.CertPEM()) {
		t.Fatal("reloaded PEM differs")
	}
	if err := created.Save(dir); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("Save over an existing CA: %v, want fs.ErrExist", err)
	}

	// A leaf from the reloaded CA is trusted by a client of the original one,
	// over a real handshake.
	serverTLS, err := reloaded.ServerTLS("node-a.test")
	if err != nil {
		t.Fatal(err)
	}
	leaf := serverTLS.Certificates[0].Leaf
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: created.Pool(), DNSName: "node-a.test"}); err != nil {
		t.Fatalf("leaf for an extra name: %v", err)
	}
	for _, name := range []string{"localhost", "127.0.0.1", "::1"} {
		if err := leaf.VerifyHostname(name); err != nil {
			t.Fatalf("leaf lacks default name %s: %v", name, err)
		}
	}
	srv := newEchoServer(t, func(c *Config) { c.ServerTLS = serverTLS })
	conn := dial(t, srv.Addr(), func(c *Config) { c.ClientTLS = created.ClientTLS() })
	if err := roundTrip(conn, t); err != nil {
		t.Fatal(err)
	}
}

func TestDevCAConcurrentCreateAgrees(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	const procs = 6
	cas := make([]*DevCA, procs)
	errs := make([]error, procs)
	var wg sync.WaitGroup
	for i := range procs {
		wg.Go(func() { cas[i], errs[i] = LoadOrCreateDevCA(dir) })
	}
	wg.Wait()
	for i := range procs {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if !cas[i].Certificate().Equal(cas[0].Certificate()) {
			t.Fatalf("caller %d got a different CA", i)
		}
	}
	onDisk, err := LoadDevCA(dir)
	if err != nil || !onDisk.Certificate().Equal(cas[0].Certificate()) {
		t.Fatalf("on-disk CA differs from the one returned: %v", err)
	}
}

func TestLoadDevCARejectsBadFiles(t *testing.T) {
	if _, err := LoadDevCA(t.TempDir()); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("empty dir: %v, want fs.ErrNotExist", err)
	}
	// Key of one CA with the certificate of another.
	dirA, dirB := t.TempDir(), t.TempDir()
	for _, dir := range []string{dirA, dirB} {
		ca, err := NewDevCA()
		if err != nil {
			t.Fatal(err)
		}
		if err := ca.Save(dir); err != nil {
			t.Fatal(err)
		}
	}
	keyB, err := os.ReadFile(filepath.Join(dirB, DevCAKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dirA, DevCAKeyFile), keyB, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadDevCA(dirA); err == nil {
		t.Fatal("mismatched key and certificate accepted")
	}
	if err := os.WriteFile(filepath.Join(dirB, DevCACertFile), []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadDevCA(dirB); err == nil {
		t.Fatal("garbage certificate accepted")
	}
}

func TestWrongCARejected(t *testing.T) {
	other, err := NewDevCA()
	if err != nil {
		t.Fatal(err)
	}
	srv := newEchoServer(t, nil) // certificate from testCA
	client := newEndpoint(t, func(c *Config) { c.ServerTLS = nil; c.ClientTLS = other.ClientTLS() })
	_, err = client.Dial(testCtx(t), srv.Addr().String())
	if err == nil {
		t.Fatal("client accepted a server certificate from an untrusted CA")
	}
	var unknownAuthority x509.UnknownAuthorityError
	if !errors.As(err, &unknownAuthority) {
		t.Fatalf("dial error %v is not an x509.UnknownAuthorityError", err)
	}
}

func TestMutualTLS(t *testing.T) {
	ca := testCA()
	serverTLS, _, err := ca.MutualTLS("server.test")
	if err != nil {
		t.Fatal(err)
	}
	server := newEndpoint(t, func(c *Config) { c.ServerTLS = serverTLS })
	if err := server.Listen(); err != nil {
		t.Fatal(err)
	}
	// Accept loop that records each client's certificate name, then echoes.
	peerNames := make(chan string, 8)
	ctx := testCtx(t)
	var wg sync.WaitGroup
	t.Cleanup(func() {
		_ = server.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			conn, err := server.Accept(ctx)
			if err != nil {
				return
			}
			name := ""
			if peers := conn.TLS().PeerCertificates; len(peers) > 0 {
				name = peers[0].Subject.CommonName
			}
			peerNames <- name
			wg.Go(func() {
				if st, err := conn.AcceptStream(ctx); err == nil {
					echoFrames(st)
				}
			})
		}
	})

	_, goodClient, err := ca.MutualTLS("client-node.test")
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewDevCA()
	if err != nil {
		t.Fatal(err)
	}
	_, strangerClient, err := other.MutualTLS("stranger.test")
	if err != nil {
		t.Fatal(err)
	}
	strangerClient.RootCAs = ca.Pool() // trusts the server, but its own cert is foreign

	t.Run("client with a certificate from the CA", func(t *testing.T) {
		conn := dial(t, server.Addr(), func(c *Config) { c.ClientTLS = goodClient })
		if err := roundTrip(conn, t); err != nil {
			t.Fatal(err)
		}
		if name := <-peerNames; name != "client-node.test" {
			t.Fatalf("server saw client certificate %q", name)
		}
	})
	for name, clientTLS := range map[string]*tls.Config{
		"client without certificate":        ca.ClientTLS(),
		"client with a foreign certificate": strangerClient,
	} {
		t.Run(name, func(t *testing.T) {
			client := newEndpoint(t, func(c *Config) { c.ServerTLS = nil; c.ClientTLS = clientTLS })
			// With TLS 1.3 the client may finish its side of the handshake
			// before the server rejects its certificate, so the failure can
			// surface on Dial or on first use.
			conn, err := client.Dial(testCtx(t), server.Addr().String())
			if err == nil {
				err = roundTrip(conn, t)
			}
			if err == nil {
				t.Fatal("server accepted a client it should reject")
			}
			if !strings.Contains(err.Error(), "certificate") {
				t.Fatalf("rejected for another reason than the certificate: %v", err)
			}
		})
	}
}

func TestServerAndClientTLSFromFiles(t *testing.T) {
	dir := t.TempDir()
	ca, err := LoadOrCreateDevCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "node.pem"), filepath.Join(dir, "node-key.pem")
	if err := ca.IssueFiles(certFile, keyFile, "node.test"); err != nil {
		t.Fatal(err)
	}
	serverTLS, err := ServerTLS(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	clientTLS, err := ClientTLS(filepath.Join(dir, DevCACertFile))
	if err != nil {
		t.Fatal(err)
	}
	srv := newEchoServer(t, func(c *Config) { c.ServerTLS = serverTLS })
	conn := dial(t, srv.Addr(), func(c *Config) { c.ClientTLS = clientTLS })
	if err := roundTrip(conn, t); err != nil {
		t.Fatal(err)
	}
	if v := conn.TLS().Version; v != tls.VersionTLS13 {
		t.Fatalf("negotiated TLS version %#x", v)
	}

	if _, err := ServerTLS(filepath.Join(dir, "missing.pem"), keyFile); err == nil {
		t.Fatal("ServerTLS with a missing file succeeded")
	}
	if _, err := ClientTLS(keyFile); err == nil {
		t.Fatal("ClientTLS accepted a file without certificates")
	}
}

func TestWithALPN(t *testing.T) {
	orig := &tls.Config{NextProtos: []string{"h3"}}
	got := WithALPN(orig, "broadside/1")
	if got.MinVersion != tls.VersionTLS13 || len(got.NextProtos) != 1 || got.NextProtos[0] != "broadside/1" {
		t.Fatalf("WithALPN: %+v", got)
	}
	if orig.NextProtos[0] != "h3" || orig.MinVersion != 0 {
		t.Fatal("WithALPN modified its argument")
	}
}
