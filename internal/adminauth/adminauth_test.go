package adminauth

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
)

func TestRefusesBeyondLoopbackWithoutToken(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:9090", ":9090", "192.0.2.7:9090", "[::]:9090", "example.com:9090"} {
		if _, err := New(Options{Addr: addr}); !errors.Is(err, ErrNoToken) {
			t.Errorf("%s: %v", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:9090", "[::1]:9090", "localhost:9090", "127.0.0.2:0"} {
		if _, err := New(Options{Addr: addr}); err != nil {
			t.Errorf("%s: %v", addr, err)
		}
	}
	short := filepath.Join(t.TempDir(), "short")
	os.WriteFile(short, []byte("abc\n"), 0o600)
	if _, err := New(Options{Addr: "0.0.0.0:1", TokenFile: short}); err == nil {
		t.Error("a 3-byte token accepted")
	}
}

func TestHostAndToken(t *testing.T) {
	file := filepath.Join(t.TempDir(), "token")
	os.WriteFile(file, []byte("s3cret-admin-token-0123\n"), 0o600)
	g, err := New(Options{Addr: "0.0.0.0:9090", TokenFile: file, Hosts: []string{"admin.example"}})
	if err != nil {
		t.Fatal(err)
	}
	loop, _ := New(Options{Addr: "127.0.0.1:9090"})
	ok := http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) { rw.Write([]byte("ok")) })
	cases := []struct {
		g          *Guard
		host, auth string
		want       int
	}{
		{g, "127.0.0.1:9090", "Bearer s3cret-admin-token-0123", 200},
		{g, "admin.example:9090", "Bearer s3cret-admin-token-0123", 200},
		{g, "ADMIN.example", "Bearer s3cret-admin-token-0123", 200},
		{g, "127.0.0.1:9090", "", 401},
		{g, "127.0.0.1:9090", "Bearer wrong", 401},
		{g, "127.0.0.1:9090", "s3cret-admin-token-0123", 401},
		{g, "evil.example:9090", "Bearer s3cret-admin-token-0123", 421},
		{loop, "localhost:9090", "", 200},
		{loop, "[::1]:9090", "", 200},
		{loop, "rebind.evil.example:9090", "", 421},
		{loop, "", "", 421},
		{nil, "localhost", "", 421},
	}
	for _, c := range cases {
		r := httptest.NewRequest("GET", "/metrics", nil)
		r.Host = c.host
		if c.auth != "" {
			r.Header.Set("Authorization", c.auth)
		}
		rec := httptest.NewRecorder()
		c.g.Wrap(ok).ServeHTTP(rec, r)
		if rec.Code != c.want {
			t.Errorf("host %q auth %q: %d, want %d", c.host, c.auth, rec.Code, c.want)
		}
	}
}
