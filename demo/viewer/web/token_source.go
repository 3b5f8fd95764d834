package web

import (
	"os"
	"strings"
	"time"

	"github.com/anoptic/broadside/netcode/server"
)

// TokenSource is the spectator token pages present ('broadside view
// --server'): token itself, else the contents of tokenFile, else one
// minted per page (SpectatorTokens, valid for ttl) with the server secret
// in secretFile (server.LoadOrCreateSecret); nil if all are empty.
func TokenSource(token, tokenFile, secretFile string, ttl time.Duration) (func() (string, error), error) {
	switch {
	case token != "":
		return func() (string, error) { return token, nil }, nil
	case tokenFile != "":
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			return nil, err
		}
		tok := strings.TrimSpace(string(b))
		return func() (string, error) { return tok, nil }, nil
	case secretFile != "":
		secret, err := server.LoadOrCreateSecret(secretFile)
		if err != nil {
			return nil, err
		}
		return SpectatorTokens(secret, ttl), nil
	}
	return nil, nil
}
