package server

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/anoptic/broadside/netcode/transport"
)

// Token errors. Every verification failure wraps ErrBadToken.
var (
	ErrBadToken     = errors.New("server: bad token")
	ErrTokenExpired = fmt.Errorf("%w: expired", ErrBadToken)
	// ErrWrongAudience: a token used for a session it was not issued for
	// (a player token opening a spectator session, or the reverse).
	ErrWrongAudience = fmt.Errorf("%w: wrong audience", ErrBadToken)
	// ErrStaleToken: a token older than one the server already accepted
	// for the player, or the token of the player's live session presented
	// again (a replay): a takeover needs a newer token.
	ErrStaleToken = fmt.Errorf("%w: stale or replayed", ErrBadToken)
)

// MaxPlayerName bounds a player name in bytes.
const MaxPlayerName = 64

// MaxTokenLifetime bounds a token's validity (Expires - IssuedAt): a
// server remembers the newest token of each player for this long, so
// that an older token cannot come back once the newer one is forgotten.
const MaxTokenLifetime = 7 * 24 * time.Hour

// Audience is what a token may open.
type Audience uint8

const (
	// AudienceSpectator (the zero value: a token that does not say it may
	// play cannot play) opens spectator sessions only: the whole world,
	// Config.SpectatorDelay ticks behind, and no commands.
	AudienceSpectator Audience = iota
	// AudiencePlayer opens player sessions only: the player's own view,
	// live, and its commands.
	AudiencePlayer
)

// String returns "spectator" or "player".
func (a Audience) String() string {
	switch a {
	case AudienceSpectator:
		return "spectator"
	case AudiencePlayer:
		return "player"
	}
	return fmt.Sprintf("audience %d", uint8(a))
}

// ParseAudience parses "player" or "spectator".
func ParseAudience(s string) (Audience, error) {
	switch s {
	case "player":
		return AudiencePlayer, nil
	case "spectator":
		return AudienceSpectator, nil
	}
	return 0, fmt.Errorf("server: audience %q: want player or spectator", s)
}

// Claims is what a token says about its holder.
type Claims struct {
	// Player is the player's display name. It identifies nobody: two
	// players may share a name, never an id.
	Player string
	// PlayerID is the numeric id the server stamps on the player's
	// commands (never taken from a command's payload). It is assigned by
	// the token's issuer (Registry), not derived from the name.
	PlayerID uint32
	// Audience is what the token may open (the zero value: spectator).
	Audience Audience
	// ID identifies the token; IssueToken draws a random one if it is 0.
	ID uint64
	// IssuedAt orders the tokens of a player: a second connection takes
	// over a live session only with a newer token. IssueToken sets it to
	// the current time if it is zero.
	IssuedAt time.Time
	// Expires is when the token stops being valid (at most
	// MaxTokenLifetime after IssuedAt).
	Expires time.Time
}

// newer reports whether c is a newer token than o (issue time, then id).
func (c Claims) newer(o Claims) bool {
	if !c.IssuedAt.Equal(o.IssuedAt) {
		return c.IssuedAt.After(o.IssuedAt)
	}
	return c.ID > o.ID
}

// tokenVersion is the first byte of every token body.
const tokenVersion = 2

// tokenFixed is the size of a token body without the name: version,
// audience, player id, token id, issued at (unix ns), expires (unix s).
const tokenFixed = 1 + 1 + 4 + 8 + 8 + 8

// maxTokenLen bounds a token string (a body of tokenFixed + MaxPlayerName
// bytes and a signature, base64url).
const maxTokenLen = 512

// IssueToken signs claims with the server secret. The token is
// "v2.<base64url body>.<base64url HMAC-SHA256(body)>"; the body holds the
// version, audience, player id, token id, issue time, expiry and name.
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
	if c.Audience > AudiencePlayer {
		return "", fmt.Errorf("server: unknown %s", c.Audience)
	}
	if c.ID == 0 {
		var b [8]byte
		rand.Read(b[:])
		c.ID = binary.BigEndian.Uint64(b[:]) | 1
	}
	if c.IssuedAt.IsZero() {
		c.IssuedAt = time.Now()
	}
	if c.Expires.Sub(c.IssuedAt) > MaxTokenLifetime {
		return "", fmt.Errorf("server: token lifetime %s exceeds %s", c.Expires.Sub(c.IssuedAt), MaxTokenLifetime)
	}
	body := make([]byte, 0, tokenFixed+len(c.Player))
	body = append(body, tokenVersion, byte(c.Audience))
	body = binary.BigEndian.AppendUint32(body, c.PlayerID)
	body = binary.BigEndian.AppendUint64(body, c.ID)
	body = binary.BigEndian.AppendUint64(body, uint64(c.IssuedAt.UnixNano()))
	body = binary.BigEndian.AppendUint64(body, uint64(c.Expires.Unix()))
	body = append(body, c.Player...)
	return signBody(secret, body), nil
}

// VerifyToken checks a token's signature, form and expiry at time now
// (not its audience or freshness: the server does, per session).
func VerifyToken(secret []byte, token string, now time.Time) (Claims, error) {
	if len(token) > maxTokenLen {
		return Claims{}, fmt.Errorf("%w: %d bytes", ErrBadToken, len(token))
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 || parts[0] != "v2" {
		return Claims{}, fmt.Errorf("%w: not a v2 token", ErrBadToken)
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
	if len(body) <= tokenFixed || body[0] != tokenVersion || len(body)-tokenFixed > MaxPlayerName {
		return Claims{}, fmt.Errorf("%w: malformed body", ErrBadToken)
	}
	c := Claims{
		Audience: Audience(body[1]),
		PlayerID: binary.BigEndian.Uint32(body[2:6]),
		ID:       binary.BigEndian.Uint64(body[6:14]),
		IssuedAt: time.Unix(0, int64(binary.BigEndian.Uint64(body[14:22]))),
		Expires:  time.Unix(int64(binary.BigEndian.Uint64(body[22:30])), 0),
		Player:   string(body[tokenFixed:]),
	}
	if c.PlayerID == 0 || c.Audience > AudiencePlayer || !utf8.ValidString(c.Player) ||
		c.Expires.Sub(c.IssuedAt) > MaxTokenLifetime {
		return Claims{}, fmt.Errorf("%w: malformed claims", ErrBadToken)
	}
	if !now.Before(c.Expires) {
		return Claims{}, fmt.Errorf("%w (at %s)", ErrTokenExpired, c.Expires.UTC().Format(time.RFC3339))
	}
	return c, nil
}

// CodeStaleToken closes a connection whose token is older than one the
// server accepted for the player already, or is the live session's token
// presented again: a takeover needs a newer token.
const CodeStaleToken = transport.CodeFirstProtocolSpecific + 0x10

// tokenUse is the newest token a server accepted for a player, and the
// session it opened.
type tokenUse struct {
	claims  Claims
	session uint64
}

// useToken decides whether a player token may open a session (live: the
// player has one open) and records it; the caller holds s.mu. A newer
// token than any accepted for the player is accepted (taking over a live
// session); the newest one again only to resume its own session after
// that session's connection ended; an older one never.
func (s *Server) useToken(c Claims, session uint64, live bool) error {
	s.sweepTokens()
	prev, ok := s.tokens[c.PlayerID]
	switch {
	case !ok || c.newer(prev.claims):
	case c.ID == prev.claims.ID && c.IssuedAt.Equal(prev.claims.IssuedAt):
		if live {
			return fmt.Errorf("%w: player %d's live session holds this token; a takeover needs a newer token", ErrStaleToken, c.PlayerID)
		}
		if session != prev.session {
			return fmt.Errorf("%w: the token of player %d was used by another session", ErrStaleToken, c.PlayerID)
		}
	default:
		return fmt.Errorf("%w: player %d holds a newer token (issued %s)", ErrStaleToken, c.PlayerID, prev.claims.IssuedAt.UTC().Format(time.RFC3339Nano))
	}
	s.tokens[c.PlayerID] = tokenUse{claims: c, session: session}
	return nil
}

// sweepTokens forgets, once the map has doubled since the last sweep, the
// tokens issued more than MaxTokenLifetime ago: every token issued before
// them has expired too.
func (s *Server) sweepTokens() {
	if len(s.tokens) < s.nextSweep {
		return
	}
	now := s.cfg.Now()
	for id, u := range s.tokens {
		if now.Sub(u.claims.IssuedAt) > MaxTokenLifetime && s.players[id] == nil {
			delete(s.tokens, id)
		}
	}
	s.nextSweep = max(1024, 2*len(s.tokens))
}

// signBody returns a token of body as IssueToken would sign it (tests
// and fuzzing of VerifyToken's checks behind the signature).
func signBody(secret, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	enc := base64.RawURLEncoding
	return "v2." + enc.EncodeToString(body) + "." + enc.EncodeToString(mac.Sum(nil))
}
