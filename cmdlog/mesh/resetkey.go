package mesh

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/quic-go/quic-go"
)

// LoadOrCreateResetKey returns the stateless reset key kept in the file at
// path, creating it (32 random bytes, mode 0600) the first time: a node
// that keeps its data directory across restarts keeps its key (see
// Config.StatelessResetKey).
func LoadOrCreateResetKey(path string) (*quic.StatelessResetKey, error) {
	var key quic.StatelessResetKey
	b, err := os.ReadFile(path)
	switch {
	case err == nil && len(b) == len(key):
		copy(key[:], b)
		return &key, nil
	case err == nil:
		return nil, fmt.Errorf("mesh: reset key %s: %d bytes, want %d", path, len(b), len(key))
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("mesh: reset key: %w", err)
	}
	if _, err := rand.Read(key[:]); err != nil {
		return nil, fmt.Errorf("mesh: reset key: %w", err)
	}
	if err := os.WriteFile(path, key[:], 0o600); err != nil {
		return nil, fmt.Errorf("mesh: reset key: %w", err)
	}
	return &key, nil
}

// deriveResetKey gives each node of a Group its own key from the group's
// secret, the same whenever the node is registered again.
func deriveResetKey(secret [32]byte, id msg.NodeID) *quic.StatelessResetKey {
	h := sha256.New()
	h.Write([]byte("broadside mesh stateless reset\x00"))
	h.Write(secret[:])
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(id))
	h.Write(b[:])
	var key quic.StatelessResetKey
	copy(key[:], h.Sum(nil))
	return &key
}
