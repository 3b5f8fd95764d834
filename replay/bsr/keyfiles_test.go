package bsr

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestKeyFiles(t *testing.T) {
	dir := t.TempDir()
	spath, vpath, vkey, err := WriteKeyFiles(dir, "test-server", false)
	if err != nil {
		t.Fatal(err)
	}
	if spath != filepath.Join(dir, "server.key") || vpath != filepath.Join(dir, "server.pub") || !strings.HasPrefix(vkey, "test-server+") {
		t.Fatalf("%s %s %s", spath, vpath, vkey)
	}
	if st, err := os.Stat(spath); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("signer key file: %v %v", st, err)
	}
	if _, _, _, err := WriteKeyFiles(dir, "again", false); err == nil || !strings.Contains(err.Error(), "exists (give --force") {
		t.Fatalf("replaced without force: %v", err)
	}
	s, err := LoadSigner(spath)
	if err != nil || s.Name() != "test-server" {
		t.Fatalf("signer: %v", err)
	}
	v, err := LoadVerifier(vpath)
	if err != nil || v.Name() != "test-server" || v.KeyHash() != s.KeyHash() {
		t.Fatalf("verifier: %v", err)
	}
	if _, err := LoadVerifier(spath); err == nil {
		t.Fatal("a signer key read as a verifier key")
	}
	if s, err := LoadSigner(""); s != nil || err != nil {
		t.Fatalf("no signer: %v %v", s, err)
	}
	if _, err := LoadSigner(filepath.Join(dir, "none")); err == nil || !strings.HasPrefix(err.Error(), "signer key: ") {
		t.Fatalf("a missing file: %v", err)
	}
	if _, _, _, err := WriteKeyFiles(dir, "again", true); err != nil {
		t.Fatalf("with force: %v", err)
	}
	if v2, err := LoadVerifier(vpath); err != nil || v2.Name() != "again" {
		t.Fatalf("not replaced: %v", err)
	}
}
