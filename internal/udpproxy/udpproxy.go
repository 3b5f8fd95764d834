// Package udpproxy relays one client's UDP packets to a server and the
// server's back, and can drop the server's packets on demand: a player's
// downlink that dies while its uplink still works, as a test and hostile
// peer need it. Loopback use only.
package udpproxy

import (
	"fmt"
	"net"
	"sync/atomic"
)

// Proxy relays between the first client that sends to Addr and the
// server it was made for.
type Proxy struct {
	ln, up  *net.UDPConn
	silent  atomic.Bool
	client  atomic.Pointer[net.UDPAddr]
	dropped atomic.Int64
}

// New listens on a free 127.0.0.1 port and relays to server (host:port).
func New(server string) (*Proxy, error) {
	raddr, err := net.ResolveUDPAddr("udp", server)
	if err != nil {
		return nil, fmt.Errorf("udpproxy: %w", err)
	}
	ln, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, fmt.Errorf("udpproxy: %w", err)
	}
	up, err := net.DialUDP("udp", nil, raddr)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("udpproxy: %w", err)
	}
	p := &Proxy{ln: ln, up: up}
	go p.relayUp()
	go p.relayDown()
	return p, nil
}

// Addr is the address a client dials instead of the server's.
func (p *Proxy) Addr() string { return p.ln.LocalAddr().String() }

// SetSilent starts (true) or stops dropping the server's packets.
func (p *Proxy) SetSilent(on bool) { p.silent.Store(on) }

// Dropped returns how many of the server's packets were dropped.
func (p *Proxy) Dropped() int64 { return p.dropped.Load() }

// Close stops relaying.
func (p *Proxy) Close() error {
	p.ln.Close()
	return p.up.Close()
}

func (p *Proxy) relayUp() {
	buf := make([]byte, 64<<10)
	for {
		n, from, err := p.ln.ReadFromUDP(buf)
		if err != nil {
			return
		}
		p.client.Store(from)
		p.up.Write(buf[:n])
	}
}

func (p *Proxy) relayDown() {
	buf := make([]byte, 64<<10)
	for {
		n, err := p.up.Read(buf)
		if err != nil {
			return
		}
		switch to := p.client.Load(); {
		case to == nil:
		case p.silent.Load():
			p.dropped.Add(1)
		default:
			p.ln.WriteToUDP(buf[:n], to)
		}
	}
}
