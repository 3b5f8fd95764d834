package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/anoptic/broadside/internal/adminauth"
	"github.com/prometheus/client_golang/prometheus"
)

// TestAdminGuarded: serve's admin endpoint refuses to start beyond
// loopback without a token, and every handler checks the Host header and,
// with a token file, the bearer token.
func TestAdminGuarded(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	reg := prometheus.NewRegistry()
	if err := serveAdminGuarded(ctx, adminauth.Options{Addr: "0.0.0.0:0"}, reg, log, nil); !errors.Is(err, adminauth.ErrNoToken) {
		t.Fatalf("beyond loopback without a token: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	tokenFile := filepath.Join(t.TempDir(), "admin.token")
	os.WriteFile(tokenFile, []byte("admin-token-for-the-test\n"), 0o600)
	extra := map[string]http.Handler{"/replay/": http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) { rw.Write([]byte("log")) })}
	if err := serveAdminGuarded(ctx, adminauth.Options{Addr: addr, TokenFile: tokenFile}, reg, log, extra); err != nil {
		t.Fatal(err)
	}
	get := func(path, host, token string) int {
		req, _ := http.NewRequest("GET", "http://"+addr+path, nil)
		if host != "" {
			req.Host = host
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		for i := 0; ; i++ {
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				resp.Body.Close()
				return resp.StatusCode
			}
			if i > 200 {
				t.Fatal(err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for _, path := range []string{"/metrics", "/debug/pprof/", "/replay/log"} {
		if c := get(path, "", "admin-token-for-the-test"); c != 200 {
			t.Errorf("%s with the token: %d", path, c)
		}
		if c := get(path, "", ""); c != 401 {
			t.Errorf("%s without the token: %d", path, c)
		}
		if c := get(path, "rebound.evil.example", "admin-token-for-the-test"); c != 421 {
			t.Errorf("%s with a foreign Host: %d", path, c)
		}
	}
}
