package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/quic-go/quic-go"
)

// AdmissionLimits bound the connections a server holds, before any token
// is checked. A connection counts as "before Hello" from its first packet
// until its Hello carried a valid token (it then counts only towards the
// connection caps); Config.HandshakeTimeout bounds that time. A connection
// attempt over a cap is refused before its handshake (QUIC
// CONNECTION_REFUSED), which costs the server one packet.
type AdmissionLimits struct {
	// MaxConns caps connections in total (default 4096), MaxConnsPerAddr
	// those from one source address (an IPv4 address or an IPv6 /64;
	// default 1024: players behind one NAT share an address).
	MaxConns, MaxConnsPerAddr int
	// MaxPreHello caps connections before Hello in total (default 256),
	// MaxPreHelloPerAddr those from one source address (default 32).
	MaxPreHello, MaxPreHelloPerAddr int
	// RetryAbove: with more than this many connections before Hello, new
	// connections from unvalidated addresses must validate their address
	// with a QUIC Retry first (default MaxPreHello/4); negative: always.
	RetryAbove int
}

func (l *AdmissionLimits) defaults() {
	if l.MaxConns <= 0 {
		l.MaxConns = 4096
	}
	if l.MaxConnsPerAddr <= 0 {
		l.MaxConnsPerAddr = 1024
	}
	if l.MaxPreHello <= 0 {
		l.MaxPreHello = 256
	}
	if l.MaxPreHelloPerAddr <= 0 {
		l.MaxPreHelloPerAddr = 32
	}
	if l.RetryAbove == 0 {
		l.RetryAbove = max(1, l.MaxPreHello/4)
	}
}

// ErrAdmission: a connection attempt over an AdmissionLimits cap.
var ErrAdmission = errors.New("server: connection refused by admission control")

// admission counts connections by source address (AdmissionLimits).
type admission struct {
	limits    AdmissionLimits
	refused   *prometheus.CounterVec
	validated prometheus.Counter

	mu       sync.Mutex
	conns    int
	preHello atomic.Int64
	byAddr   map[netip.Prefix]*addrCount
}

type addrCount struct{ conns, preHello int }

// ticket is one admitted connection; it lives in its context.
type ticket struct {
	a        *admission
	key      netip.Prefix
	helloed  bool // under a.mu
	released bool
}

type ticketKey struct{}

func newAdmission(l AdmissionLimits) *admission {
	l.defaults()
	return &admission{limits: l, byAddr: map[netip.Prefix]*addrCount{},
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "broadside", Subsystem: "server", Name: "connections_refused_total",
			Help: "Connection attempts refused before their handshake, by cap (conns, conns_per_addr, pre_hello, pre_hello_per_addr)."}, []string{"cap"}),
		validated: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "broadside", Subsystem: "server", Name: "connections_address_validated_total",
			Help: "Connections admitted whose source address was validated (by a QUIC Retry or a token)."}),
	}
}

// addrKey is the unit a per-address cap counts: an IPv4 address, an IPv6 /64.
func addrKey(a net.Addr) netip.Prefix {
	var ip netip.Addr
	switch a := a.(type) {
	case *net.UDPAddr:
		ip = a.AddrPort().Addr().Unmap()
	default:
		if ap, err := netip.ParseAddrPort(a.String()); err == nil {
			ip = ap.Addr().Unmap()
		}
	}
	bits := 32
	if ip.Is6() {
		bits = 64
	}
	p, _ := ip.Prefix(bits)
	return p
}

// connContext admits or refuses a connection attempt (transport.Config.ConnContext).
func (a *admission) connContext(ctx context.Context, info *quic.ClientInfo) (context.Context, error) {
	key := addrKey(info.RemoteAddr)
	a.mu.Lock()
	c := a.byAddr[key]
	if c == nil {
		c = &addrCount{}
	}
	var cap string
	switch {
	case a.conns >= a.limits.MaxConns:
		cap = "conns"
	case c.conns >= a.limits.MaxConnsPerAddr:
		cap = "conns_per_addr"
	case int(a.preHello.Load()) >= a.limits.MaxPreHello:
		cap = "pre_hello"
	case c.preHello >= a.limits.MaxPreHelloPerAddr:
		cap = "pre_hello_per_addr"
	}
	if cap != "" {
		a.mu.Unlock()
		a.refused.WithLabelValues(cap).Inc()
		return nil, fmt.Errorf("%w: %s cap reached for %s", ErrAdmission, cap, key)
	}
	c.conns++
	c.preHello++
	a.byAddr[key] = c
	a.conns++
	a.preHello.Add(1)
	a.mu.Unlock()
	if info.AddrVerified {
		a.validated.Inc()
	}
	t := &ticket{a: a, key: key}
	context.AfterFunc(ctx, t.release)
	return context.WithValue(ctx, ticketKey{}, t), nil
}

// verifySource asks for a Retry while many connections are before Hello
// (transport.Config.VerifySourceAddress).
func (a *admission) verifySource(net.Addr) bool {
	return a.limits.RetryAbove < 0 || a.preHello.Load() >= int64(a.limits.RetryAbove)
}

// helloDone moves the connection of ctx out of the before-Hello counts.
func (a *admission) helloDone(ctx context.Context) {
	t, _ := ctx.Value(ticketKey{}).(*ticket)
	if t == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !t.helloed && !t.released {
		t.helloed = true
		a.byAddr[t.key].preHello--
		a.preHello.Add(-1)
	}
}

func (t *ticket) release() {
	a := t.a
	a.mu.Lock()
	defer a.mu.Unlock()
	if t.released {
		return
	}
	t.released = true
	c := a.byAddr[t.key]
	c.conns--
	a.conns--
	if !t.helloed {
		t.helloed = true
		c.preHello--
		a.preHello.Add(-1)
	}
	if c.conns == 0 {
		delete(a.byAddr, t.key)
	}
}

// counts returns the connections held and those before Hello (tests).
func (a *admission) counts() (conns, preHello int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.conns, int(a.preHello.Load())
}
