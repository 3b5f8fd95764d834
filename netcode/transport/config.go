package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/quic-go/quic-go"
)

// DefaultKeepAlivePeriod is the keep-alive interval used when
// Config.KeepAlivePeriod is 0. Node-to-node links are long-lived and may be
// quiet for longer than the idle timeout, so keep-alives are on by default.
const DefaultKeepAlivePeriod = 10 * time.Second

// Config configures an Endpoint. Zero values select the documented defaults;
// only ALPN and at least one of ServerTLS or ClientTLS are required.
type Config struct {
	// ListenAddr is the local UDP address the endpoint's one socket binds,
	// for serving and dialing alike. Empty means ":0" (all interfaces, an
	// ephemeral port), which suits a dial-only client.
	ListenAddr string

	// ServerTLS is used for incoming connections; it needs a certificate.
	// Listen fails without it. See ServerTLS, DevCA.ServerTLS and
	// RequireClientCerts.
	ServerTLS *tls.Config
	// ClientTLS is used for outgoing connections; it needs the CAs that sign
	// the peers' certificates. Dial fails without it. See ClientTLS,
	// DevCA.ClientTLS and WithClientCert.
	ClientTLS *tls.Config

	// ALPN lists the application protocols (for example "broadside/1"), in
	// order of preference. It is mandatory and overrides NextProtos of both
	// TLS configs, which the endpoint clones and restricts to TLS 1.3.
	ALPN []string

	// MaxFrameSize limits frame payloads read and written on streams;
	// 0 means DefaultMaxFrameSize (4 MiB). Both ends should agree.
	MaxFrameSize int
	// MaxWriteFrameSize, if set, is the limit on frames written instead
	// (a game server reads small commands but writes large state).
	MaxWriteFrameSize int

	// HandshakeTimeout bounds the QUIC handshake (idle time; the whole
	// handshake may take twice as long). 0 means quic-go's 5 s.
	HandshakeTimeout time.Duration
	// IdleTimeout closes a connection that received nothing for this long
	// (the smaller of both peers' values wins). 0 means quic-go's 30 s.
	IdleTimeout time.Duration
	// KeepAlivePeriod sends a keep-alive after this much silence (at most
	// half the idle timeout). 0 means DefaultKeepAlivePeriod; negative
	// disables keep-alives.
	KeepAlivePeriod time.Duration

	// EnableDatagrams offers unreliable QUIC datagrams (RFC 9221). Both
	// peers must enable them for SendDatagram to work.
	EnableDatagrams bool
	// SendOnlyDatagrams makes the endpoint send datagrams to peers that
	// accept them while accepting none: it does not advertise datagram
	// support, so a peer cannot send it any (QUIC closes a connection on
	// which a DATAGRAM frame arrives anyway, FRAME_ENCODING_ERROR). It
	// overrides EnableDatagrams. For a server that pushes datagrams and
	// reads nothing from them (RFC 9221 lets an endpoint send datagrams
	// whenever its peer advertised them).
	SendOnlyDatagrams bool

	// ConnContext, if set, is called for every incoming connection attempt
	// before its handshake (quic-go's Transport.ConnContext): an error
	// refuses it at once (CONNECTION_REFUSED, no handshake is done), and
	// the returned context, cancelled when the connection ends, becomes
	// Conn.Context's parent. Admission control goes here.
	ConnContext func(context.Context, *quic.ClientInfo) (context.Context, error)
	// VerifySourceAddress, if set, tells for each connection attempt from
	// a not yet validated address whether it must first prove it owns the
	// address with a QUIC Retry (one more round trip; quic-go's
	// Transport.VerifySourceAddress). Turn it on under load.
	VerifySourceAddress func(net.Addr) bool

	// InitialStreamWindow and MaxStreamWindow bound the per-stream receive
	// flow-control window (quic-go defaults: 512 KiB growing to 6 MiB).
	InitialStreamWindow, MaxStreamWindow uint64
	// InitialConnectionWindow and MaxConnectionWindow bound the
	// per-connection receive window (quic-go defaults: 512 KiB growing to
	// 15 MiB).
	InitialConnectionWindow, MaxConnectionWindow uint64
	// MaxIncomingStreams limits concurrent bidirectional streams a peer may
	// open; 0 means quic-go's 100, negative allows none. Frames go on a few
	// long-lived streams, so the default is plenty.
	MaxIncomingStreams int64
	// MaxIncomingUniStreams limits concurrent unidirectional streams a peer
	// may open; 0 means quic-go's 100, negative allows none.
	MaxIncomingUniStreams int64

	// StatelessResetKey, when set and stable across restarts of this node,
	// lets peers of a crashed and restarted node learn at once that their
	// connection is gone instead of waiting for the idle timeout.
	StatelessResetKey *quic.StatelessResetKey

	// Logger receives the endpoint's few log lines (UDP buffer size
	// warnings, errors during Close). Nil means slog.Default().
	Logger *slog.Logger
}

// settings is a validated Config, with TLS configs cloned and completed.
type settings struct {
	Config
	serverTLS *tls.Config
	clientTLS *tls.Config
	quic      *quic.Config
	logger    *slog.Logger
}

func (c Config) settings() (*settings, error) {
	if len(c.ALPN) == 0 {
		return nil, errors.New("transport: config: ALPN is mandatory")
	}
	for _, proto := range c.ALPN {
		if proto == "" || len(proto) > 255 {
			return nil, fmt.Errorf("transport: config: invalid ALPN protocol %q", proto)
		}
	}
	if c.ServerTLS == nil && c.ClientTLS == nil {
		return nil, errors.New("transport: config: need ServerTLS, ClientTLS or both")
	}
	maxFrame, err := checkMaxFrameSize(c.MaxFrameSize)
	if err != nil {
		return nil, fmt.Errorf("transport: config: %w", err)
	}
	maxWrite := maxFrame
	if c.MaxWriteFrameSize != 0 {
		if maxWrite, err = checkMaxFrameSize(c.MaxWriteFrameSize); err != nil {
			return nil, fmt.Errorf("transport: config: write limit: %w", err)
		}
	}
	s := &settings{Config: c, logger: c.Logger}
	s.MaxFrameSize, s.MaxWriteFrameSize = maxFrame, maxWrite
	if s.ListenAddr == "" {
		s.ListenAddr = ":0"
	}
	if s.logger == nil {
		s.logger = slog.Default()
	}
	if c.ServerTLS != nil {
		if len(c.ServerTLS.Certificates) == 0 && c.ServerTLS.GetCertificate == nil && c.ServerTLS.GetConfigForClient == nil {
			return nil, errors.New("transport: config: ServerTLS has no certificate")
		}
		s.serverTLS = WithALPN(c.ServerTLS, c.ALPN...)
	}
	if c.ClientTLS != nil {
		s.clientTLS = WithALPN(c.ClientTLS, c.ALPN...)
	}
	keepAlive := c.KeepAlivePeriod
	switch {
	case keepAlive == 0:
		keepAlive = DefaultKeepAlivePeriod
	case keepAlive < 0:
		keepAlive = 0
	}
	s.quic = &quic.Config{
		HandshakeIdleTimeout:           c.HandshakeTimeout,
		MaxIdleTimeout:                 c.IdleTimeout,
		KeepAlivePeriod:                keepAlive,
		InitialStreamReceiveWindow:     c.InitialStreamWindow,
		MaxStreamReceiveWindow:         c.MaxStreamWindow,
		InitialConnectionReceiveWindow: c.InitialConnectionWindow,
		MaxConnectionReceiveWindow:     c.MaxConnectionWindow,
		MaxIncomingStreams:             c.MaxIncomingStreams,
		MaxIncomingUniStreams:          c.MaxIncomingUniStreams,
		EnableDatagrams:                c.EnableDatagrams && !c.SendOnlyDatagrams,
	}
	return s, nil
}
