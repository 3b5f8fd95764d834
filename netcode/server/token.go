package server

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Token errors. Every verification failure wraps ErrBadToken.
var (
	ErrBadToken     = errors.New("server: bad token")
	ErrTokenExpired = fmt.Errorf("%w: expired", ErrBadToken)
)

// MaxPlayerName bounds a player name in bytes.
const MaxPlayerName = 64

// Claims is what a token says about its holder.
type Claims struct {
	// Player is the authenticated player name.
	Player string
	// PlayerID is the numeric id the server stamps on the player's
	// commands (never taken from a command's payload).
	PlayerID uint32
	// Expires is when the token stops being valid.
	Expires time.Time
}

// tokenVersion is the first byte of every token body.
const tokenVersion = 1

// IssueToken signs claims with the server secret. The token is
// "v1.<base64url body>.<base64url HMAC-SHA256(body)>"; the body holds the
// version, expiry (unix seconds), player id and name.
func IssueToken(secret []byte, c Claims) (string, error) {
	if len(secret) < 16 {
		return "", errors.New("server: token secret shorter than 16 bytes")
	}
	if c.Player == "" || len(c.Player) > MaxPlayerName || !utf8.ValidString(c.Player) {
		return "", fmt.Errorf("server: player name must be 1..%d bytes of UTF-8", MaxPlayerName)
	}
	if c.PlayerID == 0 {
		return "", errors.New("server: player id 0 is reserved for the engine")
	}
	body := make([]byte, 0, 13+len(c.Player))
	body = append(body, tokenVersion)
	body = binary.BigEndian.AppendUint64(body, uint64(c.Expires.Unix()))
	body = binary.BigEndian.AppendUint32(body, c.PlayerID)
	body = append(body, c.Player...)
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	enc := base64.RawURLEncoding
	return "v1." + enc.EncodeToString(body) + "." + enc.EncodeToString(mac.Sum(nil)), nil
}

// VerifyToken checks a token's signature and expiry at time now.
func VerifyToken(secret []byte, token string, now time.Time) (Claims, error) {
	if len(token) > 512 {
		return Claims{}, fmt.Errorf("%w: %d bytes", ErrBadToken, len(token))
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 || parts[0] != "v1" {
		return Claims{}, fmt.Errorf("%w: not a v1 token", ErrBadToken)
	}
	enc := base64.RawURLEncoding
	body, err := enc.DecodeString(parts[1])
	if err != nil {
		return Claims{}, fmt.Errorf("%w: body: %v", ErrBadToken, err)
	}
	sig, err := enc.DecodeString(parts[2])
	if err != nil {
		return Claims{}, fmt.Errorf("%w: signature: %v", ErrBadToken, err)
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	if !hmac.Equal(sig, mac.Sum(nil)) {
		return Claims{}, fmt.Errorf("%w: signature mismatch", ErrBadToken)
	}
	// The signature is ours: the body was built by IssueToken, but check
	// it anyway (a leaked secret must not turn into a panic).
	if len(body) < 14 || body[0] != tokenVersion || len(body)-13 > MaxPlayerName {
		return Claims{}, fmt.Errorf("%w: malformed body", ErrBadToken)
	}
	c := Claims{
		Expires:  time.Unix(int64(binary.BigEndian.Uint64(body[1:9])), 0),
		PlayerID: binary.BigEndian.Uint32(body[9:13]),
		Player:   string(body[13:]),
	}
	if c.PlayerID == 0 || !utf8.ValidString(c.Player) {
		return Claims{}, fmt.Errorf("%w: malformed claims", ErrBadToken)
	}
	if !now.Before(c.Expires) {
		return Claims{}, fmt.Errorf("%w (at %s)", ErrTokenExpired, c.Expires.UTC().Format(time.RFC3339))
	}
	return c, nil
}

// PlayerIDFor derives a stable player id from a name (FNV-1a, never 0), for
// servers that identify players by name only.
func PlayerIDFor(name string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(name); i++ {
		h ^= uint32(name[i])
		h *= 16777619
	}
	if h == 0 {
		h = 1
	}
	return h
}
