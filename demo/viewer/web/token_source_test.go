package web

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/anoptic/broadside/netcode/server"
)

func TestTokenSource(t *testing.T) {
	dir := t.TempDir()
	if src, err := TokenSource("", "", "", time.Hour); src != nil || err != nil {
		t.Fatalf("none given: %v", err)
	}
	src, err := TokenSource("tok-1", filepath.Join(dir, "ignored"), "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if tok, err := src(); tok != "tok-1" || err != nil {
		t.Fatalf("--token: %q %v", tok, err)
	}
	file := filepath.Join(dir, "token")
	os.WriteFile(file, []byte("  tok-2\n"), 0o600)
	if src, err = TokenSource("", file, "", time.Hour); err != nil {
		t.Fatal(err)
	}
	if tok, err := src(); tok != "tok-2" || err != nil {
		t.Fatalf("--token-file: %q %v", tok, err)
	}
	if _, err := TokenSource("", filepath.Join(dir, "none"), "", time.Hour); err == nil {
		t.Fatal("a missing token file")
	}
	secretFile := filepath.Join(dir, "server.secret")
	if src, err = TokenSource("", "", secretFile, time.Hour); err != nil {
		t.Fatal(err)
	}
	tok, err := src()
	if err != nil {
		t.Fatal(err)
	}
	secret, err := server.LoadOrCreateSecret(secretFile)
	if err != nil {
		t.Fatal(err)
	}
	c, err := server.VerifyToken(secret, tok, time.Now())
	if err != nil || c.Audience != server.AudienceSpectator || c.PlayerID < 1<<31 {
		t.Fatalf("a minted token: %+v %v", c, err)
	}
}
