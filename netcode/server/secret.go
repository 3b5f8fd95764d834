package server

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
)

// MinSecretBytes is the shortest server secret LoadOrCreateSecret accepts.
const MinSecretBytes = 16

// LoadOrCreateSecret reads the server secret that signs tokens from path
// (hex, or raw bytes; at least MinSecretBytes), creating the file with 32
// random bytes in hex (mode 0600) if it does not exist.
func LoadOrCreateSecret(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		s := make([]byte, 32)
		if _, err := rand.Read(s); err != nil {
			return nil, err
		}
		if err := os.WriteFile(path, []byte(hex.EncodeToString(s)+"\n"), 0o600); err != nil {
			return nil, fmt.Errorf("create secret %s: %w", path, err)
		}
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read secret %s: %w", path, err)
	}
	b = bytes.TrimSpace(b)
	if h, err := hex.DecodeString(string(b)); err == nil {
		b = h
	}
	if len(b) < MinSecretBytes {
		return nil, fmt.Errorf("secret %s: shorter than 16 bytes", path)
	}
	return b, nil
}

// PlayersFileBeside is the player registry's default file: "players" in
// the directory of the secret file secretFile.
func PlayersFileBeside(secretFile string) string {
	return filepath.Join(filepath.Dir(secretFile), "players")
}
