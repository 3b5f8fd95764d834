// Package adminauth guards an admin HTTP endpoint: a bearer token (read
// from a file) required whenever the endpoint listens beyond loopback,
// and a Host header allow-list on every request, so that a web page in an
// operator's browser cannot reach the endpoint through DNS rebinding (its
// requests carry the attacker's host name).
package adminauth

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
)

// MinTokenLen is the shortest admin token accepted, in bytes.
const MinTokenLen = 16

// Guard checks admin requests. Its zero value lets nothing through.
type Guard struct {
	token []byte          // nil: no token required (loopback only)
	hosts map[string]bool // allowed Host header hosts, lower case, without port
}

// Options configure a Guard.
type Options struct {
	// Addr is the address the endpoint listens on (host:port).
	Addr string
	// TokenFile, if set, holds the bearer token (its first line, at least
	// MinTokenLen bytes). Without one the endpoint must listen on
	// loopback only.
	TokenFile string
	// Hosts are further host names clients may use in their Host header
	// (besides localhost, the loopback addresses and Addr's host).
	Hosts []string
}

// ErrNoToken: an endpoint beyond loopback without a token file.
var ErrNoToken = errors.New("admin: listening beyond loopback needs a bearer token (--admin-token-file)")

// New returns the guard of an endpoint on o.Addr.
func New(o Options) (*Guard, error) {
	host, _, err := net.SplitHostPort(o.Addr)
	if err != nil {
		return nil, fmt.Errorf("admin: address %q: %w", o.Addr, err)
	}
	g := &Guard{hosts: map[string]bool{"localhost": true, "127.0.0.1": true, "::1": true}}
	if host != "" {
		g.hosts[strings.ToLower(host)] = true
	}
	for _, h := range o.Hosts {
		g.hosts[strings.ToLower(strings.Trim(h, "[]"))] = true
	}
	if o.TokenFile != "" {
		if g.token, err = ReadToken(o.TokenFile); err != nil {
			return nil, err
		}
	} else if !IsLoopback(host) {
		return nil, fmt.Errorf("%w: %s is not loopback", ErrNoToken, o.Addr)
	}
	return g, nil
}

// IsLoopback reports whether host (an address or "localhost") only ever
// reaches this machine. An empty host (all interfaces) is not.
func IsLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(strings.Trim(host, "[]"))
	return err == nil && ip.IsLoopback()
}

// Wrap returns h behind the guard: a request with a Host not allowed gets
// 421, one without the bearer token (when one is required) 401.
func (g *Guard) Wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if g == nil || !g.hostAllowed(r.Host) {
			http.Error(rw, "admin: host not allowed", http.StatusMisdirectedRequest)
			return
		}
		if g.token != nil && !g.authorized(r.Header.Get("Authorization")) {
			rw.Header().Set("WWW-Authenticate", `Bearer realm="broadside admin"`)
			http.Error(rw, "admin: bearer token required", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(rw, r)
	})
}

func (g *Guard) hostAllowed(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.ToLower(strings.Trim(host, "[]"))
	return host != "" && g.hosts[host]
}

func (g *Guard) authorized(header string) bool {
	tok, ok := strings.CutPrefix(header, "Bearer ")
	if !ok {
		return false
	}
	// Compare digests: constant time whatever the lengths.
	a, b := sha256.Sum256([]byte(tok)), sha256.Sum256(g.token)
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// ReadToken reads an admin token file: its first line, trimmed, at least
// MinTokenLen bytes (servers and the clients of their admin address alike).
func ReadToken(file string) ([]byte, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("admin: token file: %w", err)
	}
	tok, _, _ := bytes.Cut(b, []byte("\n"))
	tok = bytes.TrimSpace(tok)
	if len(tok) < MinTokenLen {
		return nil, fmt.Errorf("admin: token in %s shorter than %d bytes", file, MinTokenLen)
	}
	return tok, nil
}
