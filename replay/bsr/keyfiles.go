package bsr

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/mod/sumdb/note"
)

// Key files: a server's checkpoint signing key pair, as 'broadside keygen'
// writes it (server.key, the signer key, mode 0600; server.pub, the
// verifier key).
const (
	SignerKeyFile   = "server.key"
	VerifierKeyFile = "server.pub"
)

// WriteKeyFiles makes a key pair named name (GenerateKey) and writes it to
// dir/server.key and dir/server.pub, refusing to replace existing files
// unless force is set. It returns both paths and the verifier key.
func WriteKeyFiles(dir, name string, force bool) (signerPath, verifierPath, verifierKey string, err error) {
	skey, vkey, err := GenerateKey(name)
	if err != nil {
		return "", "", "", err
	}
	spath, vpath := filepath.Join(dir, SignerKeyFile), filepath.Join(dir, VerifierKeyFile)
	flags := os.O_WRONLY | os.O_CREATE | os.O_EXCL
	if force {
		flags = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	}
	for _, kf := range []struct {
		path, text string
		mode       os.FileMode
	}{{spath, skey, 0o600}, {vpath, vkey, 0o644}} {
		f, err := os.OpenFile(kf.path, flags, kf.mode)
		if errors.Is(err, os.ErrExist) {
			return "", "", "", fmt.Errorf("%s exists (give --force to replace it)", kf.path)
		} else if err != nil {
			return "", "", "", err
		}
		if _, err := fmt.Fprintln(f, kf.text); err != nil {
			f.Close()
			return "", "", "", err
		}
		if err := f.Close(); err != nil {
			return "", "", "", err
		}
	}
	return spath, vpath, vkey, nil
}

// LoadSigner reads a signer key file made by WriteKeyFiles ("" gives nil).
func LoadSigner(path string) (note.Signer, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("signer key: %w", err)
	}
	s, err := NewSigner(string(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// LoadVerifier reads a verifier key file made by WriteKeyFiles.
func LoadVerifier(path string) (note.Verifier, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("verifier key: %w", err)
	}
	v, err := NewVerifier(string(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}
