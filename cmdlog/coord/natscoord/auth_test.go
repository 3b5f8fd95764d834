package natscoord

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/nkeys"

	"github.com/anoptic/broadside/netcode/transport"
)

// TestConnOptions starts a server that demands a user/password or an
// nkey, over TLS, and checks that Connect gets in with either credential
// and the CA file, and not without them.
func TestConnOptions(t *testing.T) {
	dir := t.TempDir()
	ca, err := transport.LoadOrCreateDevCA(filepath.Join(dir, "ca"))
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "ca", transport.DevCACertFile)
	srvTLS, err := ca.ServerTLS("127.0.0.1", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	user, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := user.PublicKey()
	seed, _ := user.Seed()
	seedFile := filepath.Join(dir, "user.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	srv, err := StartEmbedded(EmbeddedOptions{StoreDir: filepath.Join(dir, "nats"),
		Auth: ServerAuth{User: "bs", Password: "s3cret", Nkeys: []string{pub}, TLS: srvTLS}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	url := srv.ClientURL()
	for _, tc := range []struct {
		name string
		o    ConnOptions
		ok   bool
	}{
		{"password over TLS", ConnOptions{User: "bs", Password: "s3cret", CAFile: caFile}, true},
		{"nkey over TLS", ConnOptions{NkeySeedFile: seedFile, CAFile: caFile}, true},
		{"no credentials", ConnOptions{CAFile: caFile}, false},
		{"wrong password", ConnOptions{User: "bs", Password: "guess", CAFile: caFile}, false},
		{"no CA: the server's certificate is not trusted", ConnOptions{User: "bs", Password: "s3cret", TLS: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc, err := Connect(url, tc.o)
			if err == nil {
				defer nc.Close()
			}
			if (err == nil) != tc.ok {
				t.Fatalf("Connect: %v, want ok=%v", err, tc.ok)
			}
			if tc.ok && !nc.TLSRequired() {
				t.Fatal("connection is not over TLS")
			}
		})
	}
	// The coordinator dials with the same options.
	c, closeFn, err := DialConfig(opCtx(t), url, Config{Cluster: "auth"}, ConnOptions{NkeySeedFile: seedFile, CAFile: caFile})
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	if _, _, err := c.Get(opCtx(t)); err == nil {
		t.Fatal("Get of a record never written succeeded")
	}
}

// TestEmbeddedBeyondLoopbackNeedsAuth (issue 16, finding 2): an embedded
// server listening beyond loopback refuses to start without client
// credentials; on loopback, or with a user and password, it starts.
func TestEmbeddedBeyondLoopbackNeedsAuth(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		host string
		auth ServerAuth
		ok   bool
	}{
		{"0.0.0.0", ServerAuth{}, false},
		{"0.0.0.0", ServerAuth{User: "bs"}, false},
		{"0.0.0.0", ServerAuth{User: "bs", Password: "s3cret"}, true},
		{"127.0.0.1", ServerAuth{}, true},
	} {
		srv, err := StartEmbedded(EmbeddedOptions{StoreDir: filepath.Join(dir, tc.host+tc.auth.User+tc.auth.Password), Host: tc.host, Auth: tc.auth})
		if err == nil {
			srv.Shutdown()
		}
		if (err == nil) != tc.ok {
			t.Errorf("host %s, auth %+v: %v, want ok=%v", tc.host, tc.auth, err, tc.ok)
		}
	}
}
