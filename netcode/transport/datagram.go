package transport

import (
	"context"
	"errors"
	"fmt"

	"github.com/quic-go/quic-go"
)

// MaxDatagramSize is the largest datagram payload SendDatagram accepts. A
// datagram must fit one QUIC packet, and 1200 bytes fit on every path QUIC
// supports; on top of this check, quic-go may refuse a payload that does not
// fit the current packet size estimate.
const MaxDatagramSize = 1200

// ErrDatagramTooLarge is matched by the error SendDatagram returns for a
// payload that cannot fit one packet. Send such data on a stream instead.
var ErrDatagramTooLarge = errors.New("transport: datagram too large")

// ErrDatagramsDisabled is matched by datagram errors when this side or the
// peer did not set Config.EnableDatagrams.
var ErrDatagramsDisabled = errors.New("transport: datagrams not enabled on both sides")

// SendDatagram sends p as one unreliable, unordered QUIC datagram. It never
// drops silently on the sending side: a payload above MaxDatagramSize (or
// above what the current packet size allows) returns an error matching
// ErrDatagramTooLarge. It may block briefly when quic-go's send queue (32
// datagrams) is full. The peer may still drop it: datagrams can be lost, and
// a receiver that falls more than 128 behind loses the excess.
func (c *Conn) SendDatagram(p []byte) error {
	if len(p) > MaxDatagramSize {
		return fmt.Errorf("transport: datagram of %d bytes exceeds %d: %w", len(p), MaxDatagramSize, ErrDatagramTooLarge)
	}
	if !c.DatagramsEnabled() {
		return fmt.Errorf("transport: send datagram to %s: %w", c.RemoteAddr(), ErrDatagramsDisabled)
	}
	if err := c.qc.SendDatagram(p); err != nil {
		var tooLarge *quic.DatagramTooLargeError
		if errors.As(err, &tooLarge) {
			return fmt.Errorf("transport: datagram of %d bytes exceeds current limit %d: %w",
				len(p), tooLarge.MaxDatagramPayloadSize, ErrDatagramTooLarge)
		}
		return fmt.Errorf("transport: send datagram to %s: %w", c.RemoteAddr(), err)
	}
	return nil
}

// ReceiveDatagram waits for the next datagram from the peer. The returned
// slice belongs to the caller. It works when this side enabled datagrams
// (and not send-only), whatever the peer advertised.
func (c *Conn) ReceiveDatagram(ctx context.Context) ([]byte, error) {
	if !c.recvDatagrams {
		return nil, fmt.Errorf("transport: receive datagram from %s: %w", c.RemoteAddr(), ErrDatagramsDisabled)
	}
	p, err := c.qc.ReceiveDatagram(ctx)
	if err != nil {
		return nil, fmt.Errorf("transport: receive datagram from %s: %w", c.RemoteAddr(), err)
	}
	return p, nil
}

// DatagramsEnabled reports whether SendDatagram can work: the peer
// advertised datagram support and this side enabled datagrams (or sends
// them only, Config.SendOnlyDatagrams). It is fixed when the handshake
// completes.
func (c *Conn) DatagramsEnabled() bool { return c.datagrams }
