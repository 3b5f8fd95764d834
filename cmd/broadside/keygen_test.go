package main

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anoptic/broadside/replay/bsr"
)

// TestKeygenSignedVerify: keygen, a signed export, replay verify --key
// with the server's key (OK) and with another key (refused).
func TestKeygenSignedVerify(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	if _, _, err := runCLI(t, "keygen", "--dir", dir, "--name", "test-server"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runCLI(t, "keygen", "--dir", dir); err == nil {
		t.Fatal("keygen replaced existing keys")
	}
	if _, _, err := runCLI(t, "keygen", "--dir", other, "--name", "impostor"); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "m.bsr")
	if _, _, err := runCLI(t, "replay", "export", "--bots", "8", "--minutes", "0.1", "-o", path, "--no-progress",
		"--key", filepath.Join(dir, "server.key")); err != nil {
		t.Fatal(err)
	}
	out, _, err := runCLI(t, "replay", "verify", "--no-progress", "--key", filepath.Join(dir, "server.pub"), path)
	if err != nil || !strings.Contains(out, "SIGNED: ") || !strings.Contains(out, "test-server") || !strings.Contains(out, "final") || !strings.Contains(out, "OK: ") {
		t.Fatalf("%v\n%s", err, out)
	}
	if _, _, err := runCLI(t, "replay", "verify", "--no-progress", "--key", filepath.Join(other, "server.pub"), path); !errors.Is(err, bsr.ErrSignature) {
		t.Fatalf("another key: %v", err)
	}
}
