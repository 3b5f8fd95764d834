// Package transport is the QUIC layer every Broadside node uses: sequencing
// replicas, shards, the game server, clients and bots. It knows nothing about
// games or logs; it moves opaque frames and datagrams between authenticated
// peers.
//
// # Endpoints
//
// An Endpoint owns exactly one UDP socket, wrapped in a quic.Transport, and
// both accepts (Listen, Accept) and dials (Dial) through it, so a node that
// serves while it connects to its peers has one address and one receive loop.
// ALPN is mandatory (Config.ALPN, e.g. "broadside/1"); TLS is 1.3 only.
// Endpoint.Close stops accepting, closes every connection with
// CodeShuttingDown, stops the transport and closes the socket; when it
// returns, no goroutine of the endpoint is left.
//
// # TLS
//
// DevCA is a self-signed ed25519 CA persisted as ca.pem and ca-key.pem in a
// directory (LoadOrCreateDevCA); it issues leaf certificates for localhost,
// 127.0.0.1, ::1 and extra names, and builds server, client and mutual-TLS
// configs. ServerTLS and ClientTLS load user-supplied production certificates;
// RequireClientCerts and WithClientCert turn any pair of configs into mutual
// TLS for node-to-node links.
//
// # Frames
//
// Messages travel as frames on a few long-lived bidirectional streams, never
// a stream per request (a new QUIC stream costs tens of microseconds). A frame
// is a 4-byte big-endian payload length followed by the payload, which is
// opaque: callers that need a message type put it in the payload. Readers
// reject a length above the limit (default 4 MiB) before allocating
// anything, and Stream.ReadFrame then closes the connection with
// CodeFrameTooLarge. Writes are safe for concurrent callers and coalesce:
// frames queued while a write is in flight leave together in the next write
// (FrameWriter documents the scheme), and BufferFrame/Flush batch a burst from
// one goroutine explicitly.
//
// # Datagrams
//
// With Config.EnableDatagrams on both peers, Conn.SendDatagram and
// Conn.ReceiveDatagram carry unreliable payloads: MaxDatagramSize (1200)
// bytes fit at any packet size, and up to MaxDatagramCeiling (1400) once
// path MTU discovery has raised the packet size (Conn.DatagramRoom says
// what fits now). An oversized payload is an error, never a silent drop.
//
// # Error codes
//
// Connections and streams end with an ErrorCode (CodeNormal,
// CodeProtocolError, CodeFrameTooLarge, CodeUnauthorized, CodeRateLimited,
// CodeShuttingDown, ...); Conn.CloseWithCode sends one and ErrorCodeOf reads
// it back from any error.
//
// # UDP buffer sizes
//
// quic-go asks the kernel for 7 MiB UDP receive and send buffers and performs
// worse with less. Linux caps unprivileged requests at net.core.rmem_max and
// net.core.wmem_max; raise them as root with
//
//	sysctl -w net.core.rmem_max=7500000 net.core.wmem_max=7500000
//
// (add the keys to /etc/sysctl.d/ to keep them across reboots). Nothing here
// depends on it: tests and benchmarks run with the defaults. quic-go prints a
// warning through the standard log package when it gets less; Endpoint checks
// the sizes itself, logs a shortfall once per process through Config.Logger
// (log/slog), and sets QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING=true to silence
// the duplicate, unless that variable is already set in the environment.
package transport
