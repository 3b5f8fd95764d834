package transport

import (
	"errors"
	"fmt"

	"github.com/quic-go/quic-go"
)

// ErrorCode is an application error code carried by a QUIC CONNECTION_CLOSE
// (connection level) or RESET_STREAM / STOP_SENDING (stream level) frame.
// Broadside uses one numbering for both, so a peer can tell why a link or a
// stream ended without parsing the reason string.
type ErrorCode uint64

// Application error codes shared by every Broadside protocol. Protocols built
// on this package may define further codes from CodeFirstProtocolSpecific up.
const (
	// CodeNormal is an orderly close: the peer is done and nothing went wrong.
	CodeNormal ErrorCode = 0x0
	// CodeProtocolError means the peer sent something that violates the
	// protocol spoken on the connection (malformed or unexpected message).
	CodeProtocolError ErrorCode = 0x1
	// CodeFrameTooLarge means the peer announced a frame above the receiver's
	// frame size limit.
	CodeFrameTooLarge ErrorCode = 0x2
	// CodeUnauthorized means the peer failed authentication or asked for
	// something it is not allowed to do.
	CodeUnauthorized ErrorCode = 0x3
	// CodeRateLimited means the peer exceeded a rate or quota.
	CodeRateLimited ErrorCode = 0x4
	// CodeShuttingDown means the local node is going away (Endpoint.Close);
	// the peer should reconnect elsewhere or later.
	CodeShuttingDown ErrorCode = 0x5
	// CodeInternalError means the closing side hit a bug or an unexpected
	// local failure; the peer did nothing wrong.
	CodeInternalError ErrorCode = 0x6

	// CodeFirstProtocolSpecific is the first code left to higher-level
	// protocols (cmdlog, netcode) for their own meanings.
	CodeFirstProtocolSpecific ErrorCode = 0x100
)

// String returns the constant's name, or the number for unknown codes.
func (c ErrorCode) String() string {
	switch c {
	case CodeNormal:
		return "normal"
	case CodeProtocolError:
		return "protocol error"
	case CodeFrameTooLarge:
		return "frame too large"
	case CodeUnauthorized:
		return "unauthorized"
	case CodeRateLimited:
		return "rate limited"
	case CodeShuttingDown:
		return "shutting down"
	case CodeInternalError:
		return "internal error"
	}
	return fmt.Sprintf("code %#x", uint64(c))
}

// ErrorCodeOf extracts the application error code from an error returned by a
// connection or stream operation (or from context.Cause of Conn.Context).
// It understands connection closes (*quic.ApplicationError) and stream
// cancellations (*quic.StreamError). remote reports whether the peer, rather
// than this side, chose the code. ok is false when err carries no
// application code (nil, idle timeout, handshake failure, local I/O error...).
func ErrorCodeOf(err error) (code ErrorCode, remote bool, ok bool) {
	var appErr *quic.ApplicationError
	if errors.As(err, &appErr) {
		return ErrorCode(appErr.ErrorCode), appErr.Remote, true
	}
	var streamErr *quic.StreamError
	if errors.As(err, &streamErr) {
		return ErrorCode(streamErr.ErrorCode), streamErr.Remote, true
	}
	return 0, false, false
}
