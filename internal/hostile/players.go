package hostile

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anoptic/broadside/netcode/server"
	"github.com/anoptic/broadside/netcode/transport"
	"github.com/anoptic/broadside/netcode/wire"
	"github.com/quic-go/quic-go"
)

// PlayerTarget is a game server's player endpoint, and what hostile
// players hold: valid tokens of their own (from the same issuer as every
// player's), a victim's id and the token of the victim's live session
// (seen on the wire or stolen).
type PlayerTarget struct {
	// Addr is the server's UDP address; TLS trusts its certificate.
	Addr string
	TLS  *tls.Config
	// Secret is the token issuer's: the attackers' own tokens.
	Secret []byte
	// Attacker is the hostile player's id (its tokens name it).
	Attacker uint32
	// Victim is the good player's id, VictimToken its live session's token.
	Victim      uint32
	VictimToken string
	// HandshakeTimeout is the server's Hello deadline (default 2s), and
	// MaxPreHello, MaxPreHelloPerAddr its admission caps (defaults 256,
	// 32): the floods are sized against them.
	HandshakeTimeout                time.Duration
	MaxPreHello, MaxPreHelloPerAddr int

	// Rate and Burst are the server's command rate limit (defaults 60/s
	// and 30): the command flood may store at most Burst + Rate × its
	// duration.
	Rate  float64
	Burst int

	// attackerAcks counts the attacker's commands the server acknowledged
	// (the command flood's burst, within its rate limit); floodTook is how
	// long the flood's session lasted.
	attackerAcks atomic.Int64
	floodTook    atomic.Int64
	nextAddr     atomic.Uint32
}

func (p *PlayerTarget) defaults() {
	if p.HandshakeTimeout <= 0 {
		p.HandshakeTimeout = 2 * time.Second
	}
	if p.MaxPreHello <= 0 {
		p.MaxPreHello = 256
	}
	if p.MaxPreHelloPerAddr <= 0 {
		p.MaxPreHelloPerAddr = 32
	}
	if p.Rate <= 0 {
		p.Rate = 60
	}
	if p.Burst <= 0 {
		p.Burst = 30
	}
}

// AttackerAcks returns how many of the attacker's commands the server
// acknowledged: every one must be in the log.
func (p *PlayerTarget) AttackerAcks() int64 { return p.attackerAcks.Load() }

// AttackerLimit is the most commands of the attacker the log may hold:
// what the rate limit let through during the command flood (the other
// attacks' commands are refused before the log). A command accepted but
// not acknowledged (the session was cut first) may be stored or not.
func (p *PlayerTarget) AttackerLimit() int64 {
	return int64(p.Burst) + int64(p.Rate*time.Duration(p.floodTook.Load()).Seconds()+1)
}

// PlayerAttacks returns the attacks on the player endpoint.
func (p *PlayerTarget) PlayerAttacks() []Attack {
	p.defaults()
	return []Attack{
		{ClassGarbage, "garbage instead of a Hello", p.garbageHello},
		{ClassGarbage, "garbage frame after Hello", p.garbageAfterHello},
		{ClassGarbage, "oversized frame before Hello (16 KiB announced)", p.oversizedHello},
		{ClassGarbage, "oversized GameCommand after Hello", p.oversizedCommand},
		{ClassPreHello, fmt.Sprintf("%d connections from 8 addresses, no Hello", 8*(p.MaxPreHelloPerAddr+8)), p.preHelloFlood},
		{ClassNoStream, fmt.Sprintf("%d handshakes that open no stream", p.MaxPreHelloPerAddr), p.noStreams},
		{ClassStreamFlood, "extra streams before and after Hello", p.streamFlood},
		{ClassStreamFlood, "client datagrams, and 5000 UDP packets of garbage", p.datagramFlood},
		{ClassStreamFlood, "1000 commands at once (rate limit)", p.commandFlood},
		{ClassTokens, "token signed with another secret", p.forgedToken},
		{ClassTokens, "expired token", p.expiredToken},
		{ClassTokens, "the victim's live token replayed", p.replayedToken},
		{ClassTokens, "token of another player's id, older than its live one", p.olderToken},
		{ClassImpersonate, "GameCommand naming the victim's player id", p.impersonate},
		{ClassSpectator, "spectator session with a player token", p.spectatorWithPlayerToken},
		{ClassPadding, "GameCommand padded with 900 junk bytes", p.junkPadding},
		{ClassPadding, "GameCommand padded with 8 junk bytes", p.smallPadding},
	}
}

// endpoint returns a QUIC endpoint on a loopback address of its own
// (127.0.0.10 and up): the server's per-address caps count each attack
// apart from the good client (127.0.0.1) and from each other.
func (p *PlayerTarget) endpoint(datagrams bool) (*transport.Endpoint, error) {
	n := 10 + p.nextAddr.Add(1)%240
	return transport.NewEndpoint(transport.Config{ListenAddr: fmt.Sprintf("127.0.0.%d:0", n), ClientTLS: p.TLS,
		ALPN: []string{wire.ALPN}, EnableDatagrams: datagrams, MaxFrameSize: 1 << 20,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
}

// dial connects to the server from ep.
func (p *PlayerTarget) dial(ctx context.Context, ep *transport.Endpoint) (*transport.Conn, error) {
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return ep.Dial(dctx, p.Addr)
}

// connect dials the server from an endpoint of its own (endpoint, with
// datagrams or not); done closes the endpoint.
func (p *PlayerTarget) connect(ctx context.Context, datagrams bool) (conn *transport.Conn, done func(), err error) {
	ep, err := p.endpoint(datagrams)
	if err != nil {
		return nil, nil, err
	}
	if conn, err = p.dial(ctx, ep); err != nil {
		ep.Close()
		return nil, nil, err
	}
	return conn, func() { ep.Close() }, nil
}

// token issues a token of the attacker's (a fresh one: a takeover needs a
// newer token than the last one the server saw for the player).
func (p *PlayerTarget) token(aud server.Audience, player uint32, ttl time.Duration, secret []byte) string {
	if secret == nil {
		secret = p.Secret
	}
	tok, err := server.IssueToken(secret, server.Claims{Player: fmt.Sprintf("mallory-%d", player), PlayerID: player, Audience: aud,
		Expires: time.Now().Add(ttl)})
	if err != nil {
		panic(err) // our own arguments
	}
	return tok
}

// closed waits until conn is closed and returns the application code
// the server closed it with, and its reason.
func closed(ctx context.Context, conn *transport.Conn) (code transport.ErrorCode, reason string, err error) {
	select {
	case <-conn.Context().Done():
	case <-ctx.Done():
		return 0, "", fmt.Errorf("the server did not close the connection: %w", ctx.Err())
	}
	cause := context.Cause(conn.Context())
	var ae *quic.ApplicationError
	if errors.As(cause, &ae) && ae.Remote {
		return transport.ErrorCode(ae.ErrorCode), ae.ErrorMessage, nil
	}
	return 0, "", fmt.Errorf("connection ended without a code from the server: %v", cause)
}

// expectClose waits for the server to close conn with one of want.
func expectClose(ctx context.Context, conn *transport.Conn, want ...transport.ErrorCode) (bool, string) {
	code, reason, err := closed(ctx, conn)
	if err != nil {
		return false, err.Error()
	}
	for _, w := range want {
		if code == w {
			return true, fmt.Sprintf("closed %s: %s", code, reason)
		}
	}
	return false, fmt.Sprintf("closed with %s, want %v: %s", code, want, reason)
}

// hello opens the session stream on a new connection from a fresh address
// and sends a Hello with token; welcomed reports whether a Welcome came
// back (else the server refused: see the connection's close).
func (p *PlayerTarget) hello(ctx context.Context, token string, spectator bool) (ep *transport.Endpoint, conn *transport.Conn, st *transport.Stream, welcomed bool, err error) {
	ep, err = p.endpoint(false)
	if err != nil {
		return nil, nil, nil, false, err
	}
	conn, err = p.dial(ctx, ep)
	if err != nil {
		ep.Close()
		return nil, nil, nil, false, err
	}
	if st, err = conn.OpenStream(ctx); err != nil {
		ep.Close()
		return nil, nil, nil, false, err
	}
	if err = st.WriteFrame(wire.EncodeSession(nil, wire.Hello{Token: token, Protocol: wire.ProtocolVersion, Spectator: spectator, Session: uint64(time.Now().UnixNano())})); err != nil {
		ep.Close()
		return nil, nil, nil, false, err
	}
	st.SetReadDeadline(time.Now().Add(5 * time.Second))
	defer st.SetReadDeadline(time.Time{})
	for {
		f, rerr := st.ReadFrame(nil)
		if rerr != nil {
			return ep, conn, st, false, nil // refused: the close says why
		}
		m, derr := wire.DecodeSession(f)
		if derr != nil {
			continue
		}
		switch m.(type) {
		case wire.Welcome:
			return ep, conn, st, true, nil
		case wire.Goodbye:
			return ep, conn, st, false, nil
		}
	}
}

// session opens a session with a fresh token of the attacker's and
// returns its stream; the endpoint is closed when ctx ends.
func (p *PlayerTarget) session(ctx context.Context) (*transport.Conn, *transport.Stream, error) {
	ep, conn, st, ok, err := p.hello(ctx, p.token(server.AudiencePlayer, p.Attacker, time.Hour, nil), false)
	if err != nil {
		return nil, nil, err
	}
	context.AfterFunc(ctx, func() { ep.Close() })
	if !ok {
		_, reason, _ := closed(ctx, conn)
		return nil, nil, fmt.Errorf("the attacker's own valid token was refused: %s", reason)
	}
	return conn, st, nil
}

// refusedHello sends a Hello with token and expects the server to refuse
// it with want.
func (p *PlayerTarget) refusedHello(ctx context.Context, token string, spectator bool, want transport.ErrorCode) (bool, string) {
	ep, conn, _, ok, err := p.hello(ctx, token, spectator)
	if err != nil {
		return false, err.Error()
	}
	defer ep.Close()
	if ok {
		return false, "the server welcomed the session"
	}
	return expectClose(ctx, conn, want)
}

func (p *PlayerTarget) garbageHello(ctx context.Context) (bool, string) {
	conn, done, err := p.connect(ctx, false)
	if err != nil {
		return false, err.Error()
	}
	defer done()
	st, err := conn.OpenStream(ctx)
	if err != nil {
		return false, err.Error()
	}
	st.WriteFrame(randomBytes(700, 1))
	return expectClose(ctx, conn, transport.CodeProtocolError)
}

func (p *PlayerTarget) garbageAfterHello(ctx context.Context) (bool, string) {
	conn, st, err := p.session(ctx)
	if err != nil {
		return false, err.Error()
	}
	st.WriteFrame(randomBytes(300, 2))
	return expectClose(ctx, conn, transport.CodeProtocolError)
}

func (p *PlayerTarget) oversizedHello(ctx context.Context) (bool, string) {
	conn, done, err := p.connect(ctx, false)
	if err != nil {
		return false, err.Error()
	}
	defer done()
	qs, err := conn.QUIC().OpenStream()
	if err != nil {
		return false, err.Error()
	}
	qs.Write(binary.BigEndian.AppendUint32(nil, 16<<10))
	qs.Write(randomBytes(4000, 3))
	return expectClose(ctx, conn, transport.CodeFrameTooLarge)
}

func (p *PlayerTarget) oversizedCommand(ctx context.Context) (bool, string) {
	conn, st, err := p.session(ctx)
	if err != nil {
		return false, err.Error()
	}
	frame := wire.EncodeGameCommand(nil, wire.GameCommand{Seq: 1, Kind: wire.CommandFire})
	st.WriteFrame(append(frame, make([]byte, 1500)...))
	return expectClose(ctx, conn, transport.CodeFrameTooLarge)
}

// preHelloFlood opens more connections than the caps allow, from 8
// addresses, each with a stream holding a partial Hello (what the server
// buffers for it), and sends none: the excess is refused before its
// handshake, the rest closed at the Hello deadline. The attempts are
// spread over about a second (the attacker shares the server's machine:
// its own handshakes must not be what slows the server).
func (p *PlayerTarget) preHelloFlood(ctx context.Context) (bool, string) {
	const addrs = 8
	per := p.MaxPreHelloPerAddr + 8
	total := addrs * per
	var mu sync.Mutex
	var held []*transport.Conn
	refused, open, peak := 0, 0, 0
	var wg sync.WaitGroup
	eps := make([]*transport.Endpoint, addrs)
	for i := range eps {
		ep, err := p.endpoint(false)
		if err != nil {
			return false, err.Error()
		}
		defer ep.Close()
		eps[i] = ep
	}
	spacing := time.Second / time.Duration(total)
	for i := range total {
		time.Sleep(spacing)
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := p.dial(ctx, eps[i%addrs])
			mu.Lock()
			if err != nil {
				refused++
				mu.Unlock()
				return
			}
			held = append(held, conn)
			open++
			peak = max(peak, open)
			mu.Unlock()
			if qs, err := conn.QUIC().OpenStream(); err == nil {
				qs.Write(binary.BigEndian.AppendUint32(nil, server.MaxPlayerFrame))
				qs.Write(randomBytes(server.MaxPlayerFrame/2, 4))
			}
			<-conn.Context().Done()
			mu.Lock()
			open--
			mu.Unlock()
		}()
	}
	wg.Wait()
	maxHeld := min(p.MaxPreHello, addrs*p.MaxPreHelloPerAddr)
	if peak > maxHeld {
		return false, fmt.Sprintf("%d connections without Hello held at once, caps allow %d", peak, maxHeld)
	}
	if refused < total-len(held) || refused == 0 {
		return false, fmt.Sprintf("only %d of %d refused", refused, total)
	}
	codes := map[transport.ErrorCode]int{}
	for _, c := range held {
		code, _, err := closed(ctx, c)
		if err != nil {
			return false, fmt.Sprintf("%d held: %v", len(held), err)
		}
		codes[code]++
	}
	if codes[transport.CodeProtocolError] != len(held) {
		return false, fmt.Sprintf("held connections closed with %v", codes)
	}
	return true, fmt.Sprintf("%d refused before their handshake (admission caps), %d admitted (at most %d at once) closed %s at the Hello deadline",
		refused, len(held), peak, transport.CodeProtocolError)
}

func (p *PlayerTarget) noStreams(ctx context.Context) (bool, string) {
	ep, err := p.endpoint(false)
	if err != nil {
		return false, err.Error()
	}
	defer ep.Close()
	var conns []*transport.Conn
	for range p.MaxPreHelloPerAddr {
		conn, err := p.dial(ctx, ep)
		if err != nil {
			return false, fmt.Sprintf("dial %d: %v", len(conns), err)
		}
		conns = append(conns, conn)
	}
	start := time.Now()
	for _, c := range conns {
		if ok, how := expectClose(ctx, c, transport.CodeProtocolError); !ok {
			return false, how
		}
	}
	return true, fmt.Sprintf("all %d closed %s (no command stream) within %v", len(conns), transport.CodeProtocolError,
		time.Since(start).Round(100*time.Millisecond))
}

// streamFlood opens more streams than the one a session has, before Hello
// and after it: QUIC's stream limit refuses them (the server allows one
// bidirectional stream and no unidirectional ones).
func (p *PlayerTarget) streamFlood(ctx context.Context) (bool, string) {
	conn, done, err := p.connect(ctx, false)
	if err != nil {
		return false, err.Error()
	}
	defer done()
	if _, err := conn.QUIC().OpenStream(); err != nil {
		return false, "the first stream was refused: " + err.Error()
	}
	opened := 0
	var lastErr error
	for range 100 {
		if _, err := conn.QUIC().OpenStream(); err != nil {
			lastErr = err
			break
		}
		opened++
	}
	if opened > 0 {
		return false, fmt.Sprintf("%d more streams opened before Hello", opened)
	}
	if _, err := conn.QUIC().OpenUniStream(); err == nil {
		return false, "a unidirectional stream opened"
	}
	sconn, _, err := p.session(ctx)
	if err != nil {
		return false, err.Error()
	}
	if _, err := sconn.QUIC().OpenStream(); err == nil {
		return false, "a second stream opened after Hello"
	}
	return true, fmt.Sprintf("the 2nd stream before Hello and after it refused by the stream limit (%v); no unidirectional stream", lastErr)
}

// datagramFlood: the server does not accept client datagrams (it does not
// advertise them, so QUIC refuses them), and raw UDP garbage to its port
// is dropped by QUIC.
func (p *PlayerTarget) datagramFlood(ctx context.Context) (bool, string) {
	conn, done, err := p.connect(ctx, true)
	if err != nil {
		return false, err.Error()
	}
	defer done()
	if conn.QUIC().ConnectionState().SupportsDatagrams.Remote {
		return false, "the server advertises datagram support"
	}
	sent := 0
	for range 1000 {
		if err := conn.QUIC().SendDatagram(randomBytes(1000, 5)); err == nil {
			sent++
		}
	}
	if sent > 0 {
		return false, fmt.Sprintf("%d client datagrams sent", sent)
	}
	raddr, err := net.ResolveUDPAddr("udp", p.Addr)
	if err != nil {
		return false, err.Error()
	}
	udp, err := net.DialUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, byte(10+p.nextAddr.Add(1)%240))}, raddr)
	if err != nil {
		return false, err.Error()
	}
	defer udp.Close()
	junk := randomBytes(1200, 6)
	for i := range 5000 {
		junk[0] = byte(i) | 0x40 // a short-header packet of an unknown connection
		udp.Write(junk)
		if i%10 == 9 {
			time.Sleep(2 * time.Millisecond) // about 5,000 packets (6 MB) a second
		}
	}
	return true, "client datagrams refused (not advertised by the server: QUIC sends none); 5000 garbage UDP packets dropped"
}

// commandFlood sends 1000 commands at once in a session: beyond the burst
// they are refused rate limited, and past the flood factor the session is
// closed. The commands acknowledged are counted (AttackerAcks).
func (p *PlayerTarget) commandFlood(ctx context.Context) (bool, string) {
	conn, st, err := p.session(ctx)
	if err != nil {
		return false, err.Error()
	}
	go func() {
		for {
			f, err := st.ReadFrame(nil)
			if err != nil {
				return
			}
			if m, err := wire.DecodeSession(f); err == nil {
				if r, ok := m.(wire.CommandResult); ok && (r.Status == wire.AckDurable || r.Status == wire.AckReplicated) {
					p.attackerAcks.Add(1)
				}
			}
		}
	}()
	start := time.Now()
	for i := range 1000 {
		if err := st.BufferFrame(wire.EncodeGameCommand(nil, wire.GameCommand{Seq: uint64(i + 1), Kind: wire.CommandRudder, Value: 1})); err != nil {
			break
		}
	}
	st.Flush()
	ok, how := expectClose(ctx, conn, transport.CodeRateLimited)
	p.floodTook.Store(int64(time.Since(start)))
	return ok, how
}

func (p *PlayerTarget) forgedToken(ctx context.Context) (bool, string) {
	wrong := []byte("not the server's secret, 32 bytes")
	return p.refusedHello(ctx, p.token(server.AudiencePlayer, p.Victim, time.Hour, wrong), false, transport.CodeUnauthorized)
}

func (p *PlayerTarget) expiredToken(ctx context.Context) (bool, string) {
	tok, err := server.IssueToken(p.Secret, server.Claims{Player: "mallory", PlayerID: p.Attacker, Audience: server.AudiencePlayer,
		IssuedAt: time.Now().Add(-2 * time.Hour), Expires: time.Now().Add(-time.Hour)})
	if err != nil {
		return false, err.Error()
	}
	return p.refusedHello(ctx, tok, false, transport.CodeUnauthorized)
}

func (p *PlayerTarget) replayedToken(ctx context.Context) (bool, string) {
	return p.refusedHello(ctx, p.VictimToken, false, server.CodeStaleToken)
}

// olderToken: a valid token for the victim's id issued before the one of
// its live session (a leaked old token) cannot take the session over.
func (p *PlayerTarget) olderToken(ctx context.Context) (bool, string) {
	tok, err := server.IssueToken(p.Secret, server.Claims{Player: "victim", PlayerID: p.Victim, Audience: server.AudiencePlayer,
		IssuedAt: time.Now().Add(-24 * time.Hour), Expires: time.Now().Add(time.Hour)})
	if err != nil {
		return false, err.Error()
	}
	return p.refusedHello(ctx, tok, false, server.CodeStaleToken)
}

func (p *PlayerTarget) impersonate(ctx context.Context) (bool, string) {
	conn, st, err := p.session(ctx)
	if err != nil {
		return false, err.Error()
	}
	st.WriteFrame(wire.EncodeGameCommand(nil, wire.GameCommand{Seq: 1, Player: p.Victim, Kind: wire.CommandFire, Side: 1}))
	return expectClose(ctx, conn, transport.CodeUnauthorized)
}

func (p *PlayerTarget) spectatorWithPlayerToken(ctx context.Context) (bool, string) {
	return p.refusedHello(ctx, p.token(server.AudiencePlayer, p.Attacker, time.Hour, nil), true, transport.CodeUnauthorized)
}

func (p *PlayerTarget) junkPadding(ctx context.Context) (bool, string) {
	return p.padded(ctx, 900)
}

func (p *PlayerTarget) smallPadding(ctx context.Context) (bool, string) {
	return p.padded(ctx, 8)
}

func (p *PlayerTarget) padded(ctx context.Context, n int) (bool, string) {
	conn, st, err := p.session(ctx)
	if err != nil {
		return false, err.Error()
	}
	frame := wire.EncodeGameCommand(nil, wire.GameCommand{Seq: 1, Kind: wire.CommandFire, Side: 1})
	st.WriteFrame(append(frame, randomBytes(n, 7)...))
	return expectClose(ctx, conn, transport.CodeProtocolError)
}
