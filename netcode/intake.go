package netcode

import (
	"errors"
	"fmt"
	"time"

	"github.com/anoptic/broadside/netcode/transport"
	"github.com/anoptic/broadside/netcode/wire"
	"golang.org/x/time/rate"
)

// Intake errors: each closes the player's connection with its code.
var (
	// ErrProtocol: a frame that is not a well-formed message of the
	// session protocol (malformed, unknown type, out of order).
	ErrProtocol = errors.New("netcode: protocol error")
	// ErrFlood: the player kept sending far above its rate limit.
	ErrFlood = errors.New("netcode: command flood")
	// ErrImpersonation: a command named another player.
	ErrImpersonation = errors.New("netcode: command for another player")
)

// CodeOf returns the application error code a connection closed for err
// gets.
func CodeOf(err error) transport.ErrorCode {
	switch {
	case errors.Is(err, ErrBadToken), errors.Is(err, ErrImpersonation):
		return transport.CodeUnauthorized
	case errors.Is(err, ErrFlood):
		return transport.CodeRateLimited
	case errors.Is(err, transport.ErrFrameTooLarge):
		return transport.CodeFrameTooLarge
	case errors.Is(err, ErrProtocol):
		return transport.CodeProtocolError
	}
	return transport.CodeInternalError
}

// IntakeLimits bounds what one player may send.
type IntakeLimits struct {
	// Rate is the sustained commands per second a player may send
	// (default 60); Burst the bucket size (default 30).
	Rate  rate.Limit
	Burst int
	// FloodFactor: a player whose refused commands within one second
	// exceed FloodFactor times Rate is disconnected (default 4).
	FloodFactor float64
}

func (l *IntakeLimits) defaults() {
	if l.Rate <= 0 {
		l.Rate = 60
	}
	if l.Burst <= 0 {
		l.Burst = 30
	}
	if l.FloodFactor <= 0 {
		l.FloodFactor = 4
	}
}

// Intake validates one player's command frames: it is the pure part of a
// session, without I/O, so it can be tested and fuzzed directly. It is not
// safe for concurrent use (one per connection).
type Intake struct {
	player  uint32
	limits  IntakeLimits
	limiter *rate.Limiter
	lastSeq uint64
	// refused counts rate-limited commands in the current one-second
	// window starting at windowStart.
	refused     int
	windowStart time.Time
}

// NewIntake returns the intake of an authenticated player.
func NewIntake(player uint32, limits IntakeLimits) *Intake {
	limits.defaults()
	return &Intake{player: player, limits: limits, limiter: rate.NewLimiter(limits.Rate, limits.Burst)}
}

// Verdict is what to do with one command frame.
type Verdict struct {
	// Append is set when the command goes to the log: the envelope to
	// append, stamped with the authenticated player.
	Append   []byte
	Command  wire.GameCommand
	Refusal  wire.AckStatus // when Append is nil and Err is nil: tell the client
	Err      error          // close the connection with CodeOf(Err)
	Accepted bool
}

// Frame judges one frame received at time now. frame is not retained.
func (in *Intake) Frame(frame []byte, now time.Time) Verdict {
	switch wire.Identifier(frame) {
	case wire.GameCommandIdentifier:
	case wire.SessionIdentifier:
		return Verdict{Err: fmt.Errorf("%w: session frame after hello", ErrProtocol)}
	default:
		return Verdict{Err: fmt.Errorf("%w: unknown message type %q", ErrProtocol, wire.Identifier(frame))}
	}
	cmd, err := wire.DecodeGameCommand(frame)
	if err != nil {
		return Verdict{Err: fmt.Errorf("%w: %v", ErrProtocol, err)}
	}
	if cmd.Player != 0 && cmd.Player != in.player {
		return Verdict{Err: fmt.Errorf("%w: player %d sent a command for player %d", ErrImpersonation, in.player, cmd.Player)}
	}
	if cmd.Seq <= in.lastSeq {
		return Verdict{Err: fmt.Errorf("%w: command sequence %d after %d", ErrProtocol, cmd.Seq, in.lastSeq)}
	}
	in.lastSeq = cmd.Seq
	if !in.limiter.AllowN(now, 1) {
		if now.Sub(in.windowStart) >= time.Second {
			in.windowStart, in.refused = now, 0
		}
		in.refused++
		if float64(in.refused) > in.limits.FloodFactor*float64(in.limits.Rate) {
			return Verdict{Err: fmt.Errorf("%w: %d commands refused within a second (limit %.0f/s)", ErrFlood, in.refused, float64(in.limits.Rate))}
		}
		return Verdict{Command: cmd, Refusal: wire.AckRateLimited}
	}
	// The envelope carries the command as the client encoded it (after
	// verification), stamped with the authenticated player.
	env := wire.EncodeEnvelope(nil, wire.Envelope{
		Kind:      wire.EnvelopePlayerCommand,
		Player:    in.player,
		ClientSeq: cmd.Seq,
		Payload:   frame,
	})
	return Verdict{Append: env, Command: cmd, Accepted: true}
}
