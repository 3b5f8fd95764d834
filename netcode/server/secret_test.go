package server

import (
	"bytes"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadOrCreateSecret(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "server.secret")
	s, err := LoadOrCreateSecret(path)
	if err != nil || len(s) != 32 {
		t.Fatalf("create: %d bytes, %v", len(s), err)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the secret file: %v %v", st, err)
	}
	again, err := LoadOrCreateSecret(path)
	if err != nil || !bytes.Equal(again, s) {
		t.Fatalf("read back: %x, %v (made %x)", again, err, s)
	}
	raw := filepath.Join(dir, "raw")
	os.WriteFile(raw, []byte("  a raw secret of 24 b.  \n"), 0o600)
	if b, err := LoadOrCreateSecret(raw); err != nil || string(b) != "a raw secret of 24 b." {
		t.Fatalf("raw: %q %v", b, err)
	}
	short := filepath.Join(dir, "short")
	os.WriteFile(short, []byte(hex.EncodeToString(make([]byte, 15))), 0o600)
	if _, err := LoadOrCreateSecret(short); err == nil || !strings.Contains(err.Error(), "shorter than 16 bytes") {
		t.Fatalf("15 bytes: %v", err)
	}
	if _, err := LoadOrCreateSecret(filepath.Join(dir, "no", "such")); err == nil || !strings.HasPrefix(err.Error(), "create secret ") {
		t.Fatalf("an unwritable path: %v", err)
	}
	if got := PlayersFileBeside(path); got != filepath.Join(dir, "players") {
		t.Fatal(got)
	}
}
