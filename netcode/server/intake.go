package server

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
	ErrProtocol = errors.New("server: protocol error")
	// ErrFlood: the player kept sending far above its rate limit.
	ErrFlood = errors.New("server: command flood")
	// ErrImpersonation: a command named another player.
	ErrImpersonation = errors.New("server: command for another player")
	// ErrOversized: a message larger than its type allows (counted, and
	// coded, as a frame too large, not as a protocol error).
	ErrOversized = fmt.Errorf("server: oversized message: %w", transport.ErrFrameTooLarge)
)

// CodeOf returns the application error code a connection closed for err
// gets.
func CodeOf(err error) transport.ErrorCode {
	switch {
	case errors.Is(err, ErrStaleToken):
		return CodeStaleToken
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
	// AckRate bounds the state acknowledgements a client may send per
	// second (default 240, a burst of as many): a client acknowledges
	// at most one per tick; far more is a flood.
	AckRate rate.Limit
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
	if l.AckRate <= 0 {
		l.AckRate = 240
	}
}

// Intake validates one player's command frames: it is the pure part of a
// session, without I/O, so it can be tested and fuzzed directly. It is not
// safe for concurrent use (one per connection).
type Intake struct {
	player    uint32
	spectator bool
	limits    IntakeLimits
	limiter   *rate.Limiter
	acks      *rate.Limiter
	lastSeq   uint64
	ackTick   uint64
	// refused counts rate-limited commands in the current one-second
	// window starting at windowStart.
	refused     int
	windowStart time.Time
}

// NewIntake returns the intake of an authenticated player.
func NewIntake(player uint32, limits IntakeLimits) *Intake {
	limits.defaults()
	return &Intake{player: player, limits: limits, limiter: rate.NewLimiter(limits.Rate, limits.Burst),
		acks: rate.NewLimiter(limits.AckRate, max(1, int(limits.AckRate)))}
}

// Spectate makes the intake refuse commands: a spectator only
// acknowledges state.
func (in *Intake) Spectate() { in.spectator = true }

// Verdict is what to do with one command frame.
type Verdict struct {
	// Append is set when the command goes to the log: the envelope to
	// append, stamped with the authenticated player.
	Append   []byte
	Command  wire.GameCommand
	Refusal  wire.AckStatus // when Append is nil and Err is nil: tell the client
	Err      error          // close the connection with CodeOf(Err)
	Accepted bool
	// StateAck, when non-zero, is a newer tick whose state the client
	// holds (Append is nil).
	StateAck uint64
}

// Frame judges one frame received at time now. frame is not retained.
func (in *Intake) Frame(frame []byte, now time.Time) Verdict {
	switch wire.Identifier(frame) {
	case wire.GameCommandIdentifier:
	case wire.SessionIdentifier:
		return in.session(frame, now)
	default:
		return Verdict{Err: fmt.Errorf("%w: unknown message type %q", ErrProtocol, wire.Identifier(frame))}
	}
	if in.spectator {
		return Verdict{Err: fmt.Errorf("%w: a spectator sent a command", ErrProtocol)}
	}
	if len(frame) > wire.MaxGameCommandSize {
		return Verdict{Err: fmt.Errorf("%w: GameCommand of %d bytes exceeds %d", ErrOversized, len(frame), wire.MaxGameCommandSize)}
	}
	cmd, err := wire.DecodeGameCommand(frame)
	if err != nil {
		return Verdict{Err: fmt.Errorf("%w: %v", ErrProtocol, err)}
	}
	// Commands are canonical: what the log stores is the encoding of the
	// decoded fields, and a frame longer than that carries bytes no field
	// accounts for (padding, junk, a covert payload): refused, never
	// stored.
	canon := wire.EncodeGameCommand(nil, cmd)
	if len(frame) != len(canon) {
		return Verdict{Err: fmt.Errorf("%w: GameCommand of %d bytes is not its canonical encoding (%d bytes): trailing or junk bytes", ErrProtocol, len(frame), len(canon))}
	}
	if cmd.Kind == wire.CommandAck {
		// An acknowledgement of state, sent as a command: never logged.
		return in.stateAck(cmd.AckTick, now)
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
	// The envelope carries the command's canonical encoding (the same
	// fields the client sent, but Settled: what the client holds is no
	// part of the game), stamped with the authenticated player.
	if cmd.Settled != 0 {
		game := cmd
		game.Settled = 0
		canon = wire.EncodeGameCommand(canon[:0], game)
	}
	env := wire.EncodeEnvelope(nil, wire.Envelope{
		Kind:      wire.EnvelopePlayerCommand,
		Player:    in.player,
		ClientSeq: cmd.Seq,
		Payload:   canon,
	})
	return Verdict{Append: env, Command: cmd, Accepted: true}
}

// session judges a session frame after the hello: only state
// acknowledgements are expected.
func (in *Intake) session(frame []byte, now time.Time) Verdict {
	m, err := wire.DecodeSession(frame)
	if err != nil {
		return Verdict{Err: fmt.Errorf("%w: %v", ErrProtocol, err)}
	}
	ack, ok := m.(wire.StateAck)
	if !ok {
		return Verdict{Err: fmt.Errorf("%w: unexpected %T after hello", ErrProtocol, m)}
	}
	return in.stateAck(ack.Tick, now)
}

func (in *Intake) stateAck(tick uint64, now time.Time) Verdict {
	if !in.acks.AllowN(now, 1) {
		return Verdict{Err: fmt.Errorf("%w: state acknowledgements above %.0f/s", ErrFlood, float64(in.limits.AckRate))}
	}
	if tick <= in.ackTick {
		return Verdict{} // stale or repeated: nothing to do
	}
	in.ackTick = tick
	return Verdict{StateAck: tick}
}
