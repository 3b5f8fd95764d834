package transport

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/quic-go/quic-go"
)

// MaxDatagramSize is a datagram payload that fits one QUIC packet at every
// packet size QUIC supports (1,200-byte packets and up): SendDatagram never
// refuses it as too large. Larger payloads, up to MaxDatagramCeiling, fit
// once path MTU discovery has raised the packet size (DatagramRoom says how
// much fits now).
const MaxDatagramSize = 1200

// MaxDatagramCeiling is the largest payload SendDatagram tries to send:
// what quic-go v0.65 lets a datagram carry at its largest packets (1,452
// bytes, where path MTU discovery stops: 1,415 bytes) less datagramAckRoom,
// so that an ACK frame still fits beside it in the packet (quic-go sends a
// datagram that does not fit beside a queued ACK in a packet of its own,
// after an ACK-only one).
const MaxDatagramCeiling = 1400

// datagramAckRoom is the room a datagram leaves below quic-go's size limit
// for an ACK frame in the same packet (a few ranges).
const datagramAckRoom = 15

// datagramRoomMemory is how long a refusal's size limit holds for
// DatagramRoom: after it, DatagramRoom offers MaxDatagramCeiling again
// (path MTU discovery may have raised the limit since; a wrong guess costs
// one refusal).
const datagramRoomMemory = 200 * time.Millisecond

// ErrDatagramTooLarge is matched by the error SendDatagram returns for a
// payload that cannot fit one packet. Send such data on a stream instead.
var ErrDatagramTooLarge = errors.New("transport: datagram too large")

// ErrDatagramsDisabled is matched by datagram errors when this side or the
// peer did not set Config.EnableDatagrams.
var ErrDatagramsDisabled = errors.New("transport: datagrams not enabled on both sides")

// SendDatagram sends p as one unreliable, unordered QUIC datagram. It never
// drops silently on the sending side: a payload above MaxDatagramCeiling, or
// above what the current packet size allows (more than MaxDatagramSize
// before path MTU discovery raised it), returns an error matching
// ErrDatagramTooLarge, and the limit it reports holds for DatagramRoom for
// a while. It may block briefly when quic-go's send queue (32 datagrams)
// is full. The peer may still drop it: datagrams can be lost, and a
// receiver that falls more than 128 behind loses the excess.
func (c *Conn) SendDatagram(p []byte) error {
	if len(p) > MaxDatagramCeiling {
		return fmt.Errorf("transport: datagram of %d bytes exceeds %d: %w", len(p), MaxDatagramCeiling, ErrDatagramTooLarge)
	}
	if !c.DatagramsEnabled() {
		return fmt.Errorf("transport: send datagram to %s: %w", c.RemoteAddr(), ErrDatagramsDisabled)
	}
	if err := c.qc.SendDatagram(p); err != nil {
		var tooLarge *quic.DatagramTooLargeError
		if errors.As(err, &tooLarge) {
			// Two stores, not one: a reader that sees one without the
			// other guesses wrong once, which costs one more refusal.
			c.roomLimit.Store(max(int64(MaxDatagramSize), tooLarge.MaxDatagramPayloadSize-datagramAckRoom))
			c.roomUntil.Store(time.Now().Add(datagramRoomMemory).UnixNano())
			return fmt.Errorf("transport: datagram of %d bytes exceeds current limit %d: %w",
				len(p), tooLarge.MaxDatagramPayloadSize, ErrDatagramTooLarge)
		}
		return fmt.Errorf("transport: send datagram to %s: %w", c.RemoteAddr(), err)
	}
	return nil
}

// DatagramRoom is the largest payload SendDatagram is expected to send now,
// leaving room for an ACK in its packet: MaxDatagramCeiling, unless a
// payload was refused as too large within the last 200 ms (path MTU
// discovery has not raised the packet size yet, or lowered it), then the
// limit that refusal reported less the ACK's room, and never below
// MaxDatagramSize. 0 when datagrams do not work (DatagramsEnabled). A
// caller that routes payloads by it (datagram up to it, a stream above)
// falls back to the stream when SendDatagram still refuses one.
func (c *Conn) DatagramRoom() int {
	if !c.datagrams {
		return 0
	}
	if time.Now().UnixNano() >= c.roomUntil.Load() {
		return MaxDatagramCeiling
	}
	return int(min(c.roomLimit.Load(), MaxDatagramCeiling))
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
