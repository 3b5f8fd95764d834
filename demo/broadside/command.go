package broadside

import (
	"errors"
	"fmt"

	"github.com/anoptic/broadside/netcode/wire"
)

// Player command payloads (replay.Command.Payload when Player != 0). The
// first byte is 0x10 | kind (the high nibble is the format version); the
// length is exact for each kind:
//
//	Join      0x11               spawn the player's ship (once per player)
//	Throttle  0x12 value:int8    -100 (full astern, capped at MaxReverse) … 100 (full ahead)
//	Rudder    0x13 value:int8    -100 (hard to starboard) … 100 (hard to port)
//	Fire      0x14 side:uint8    1 port, 2 starboard
//
// The acting player is the authenticated replay.Command.Player; a payload
// never names a player or a ship.

// CommandKind is the kind of a player command.
type CommandKind uint8

// Player command kinds.
const (
	KindJoin CommandKind = 1 + iota
	KindThrottle
	KindRudder
	KindFire
)

// Side is a ship's side, for broadsides.
type Side uint8

// Sides of a ship.
const (
	Port      Side = 1 // left, counter-clockwise of the heading
	Starboard Side = 2 // right
)

const commandVersion = 0x10

// ErrInvalidCommand is wrapped by every error of DecodeCommand and
// EncodeCommand.
var ErrInvalidCommand = errors.New("broadside: invalid command")

// PlayerCommand is a decoded player command.
type PlayerCommand struct {
	Kind CommandKind
	// Value is the throttle or rudder setting in percent, [-100, 100].
	Value int8
	// Side is the side to fire.
	Side Side
}

// Join returns the command that spawns the player's ship.
func Join() PlayerCommand { return PlayerCommand{Kind: KindJoin} }

// Throttle returns the command that sets the throttle to percent.
func Throttle(percent int8) PlayerCommand { return PlayerCommand{Kind: KindThrottle, Value: percent} }

// Rudder returns the command that sets the rudder to percent (positive to
// port).
func Rudder(percent int8) PlayerCommand { return PlayerCommand{Kind: KindRudder, Value: percent} }

// Fire returns the command that fires a broadside from side.
func Fire(side Side) PlayerCommand { return PlayerCommand{Kind: KindFire, Side: side} }

// String describes c for logs and tests.
func (c PlayerCommand) String() string {
	switch c.Kind {
	case KindJoin:
		return "join"
	case KindThrottle:
		return fmt.Sprintf("throttle %d", c.Value)
	case KindRudder:
		return fmt.Sprintf("rudder %d", c.Value)
	case KindFire:
		if c.Side == Port {
			return "fire port"
		}
		return "fire starboard"
	}
	return fmt.Sprintf("kind %d", c.Kind)
}

func (c PlayerCommand) validate() error {
	switch c.Kind {
	case KindJoin:
		if c.Value != 0 || c.Side != 0 {
			return fmt.Errorf("%w: join with arguments", ErrInvalidCommand)
		}
	case KindThrottle, KindRudder:
		if c.Value < -100 || c.Value > 100 || c.Side != 0 {
			return fmt.Errorf("%w: %s value %d out of [-100, 100]", ErrInvalidCommand, c, c.Value)
		}
	case KindFire:
		if c.Side != Port && c.Side != Starboard || c.Value != 0 {
			return fmt.Errorf("%w: fire side %d", ErrInvalidCommand, c.Side)
		}
	default:
		return fmt.Errorf("%w: kind %d", ErrInvalidCommand, c.Kind)
	}
	return nil
}

// AppendCommand appends c's payload to b.
func AppendCommand(b []byte, c PlayerCommand) ([]byte, error) {
	if err := c.validate(); err != nil {
		return b, err
	}
	b = append(b, commandVersion|byte(c.Kind))
	switch c.Kind {
	case KindThrottle, KindRudder:
		b = append(b, byte(c.Value))
	case KindFire:
		b = append(b, byte(c.Side))
	}
	return b, nil
}

// EncodeCommand returns c's payload.
func EncodeCommand(c PlayerCommand) ([]byte, error) {
	return AppendCommand(make([]byte, 0, 2), c)
}

// CommandRecord returns c as player's command number seq in its log
// envelope: the record a server appends for it.
func CommandRecord(player uint32, seq uint64, c PlayerCommand) ([]byte, error) {
	payload, err := EncodeCommand(c)
	if err != nil {
		return nil, err
	}
	return wire.EncodeEnvelope(nil, wire.Envelope{Kind: wire.EnvelopePlayerCommand, Player: player, ClientSeq: seq, Payload: payload}), nil
}

// DecodeCommand decodes and validates a player command payload. It accepts
// exactly the encodings EncodeCommand produces and never panics.
func DecodeCommand(b []byte) (PlayerCommand, error) {
	if len(b) == 0 {
		return PlayerCommand{}, fmt.Errorf("%w: empty", ErrInvalidCommand)
	}
	if wire.Identifier(b) == wire.GameCommandIdentifier {
		return fromGameCommand(b)
	}
	if b[0]&0xf0 != commandVersion {
		return PlayerCommand{}, fmt.Errorf("%w: version %#x", ErrInvalidCommand, b[0]>>4)
	}
	c := PlayerCommand{Kind: CommandKind(b[0] & 0x0f)}
	want := 2
	if c.Kind == KindJoin {
		want = 1
	}
	if len(b) != want {
		return PlayerCommand{}, fmt.Errorf("%w: %d bytes for kind %d", ErrInvalidCommand, len(b), c.Kind)
	}
	switch c.Kind {
	case KindThrottle, KindRudder:
		c.Value = int8(b[1])
	case KindFire:
		c.Side = Side(b[1])
	}
	if err := c.validate(); err != nil {
		return PlayerCommand{}, err
	}
	return c, nil
}

// fromGameCommand decodes a command as game clients send it to the server
// (netcode/wire GameCommand, which the server appends unchanged inside the
// record envelope) into the game's command. Values are clamped to the
// game's ranges; a Fire side is negative for port, positive for starboard.
func fromGameCommand(b []byte) (PlayerCommand, error) {
	gc, err := wire.DecodeGameCommand(b)
	if err != nil {
		return PlayerCommand{}, fmt.Errorf("%w: %v", ErrInvalidCommand, err)
	}
	clamp := func(v int32) int8 { return int8(max(-100, min(100, v))) }
	var c PlayerCommand
	switch gc.Kind {
	case wire.CommandJoin:
		c = Join()
	case wire.CommandThrottle:
		c = Throttle(clamp(gc.Value))
	case wire.CommandRudder:
		c = Rudder(clamp(gc.Value))
	case wire.CommandFire:
		switch {
		case gc.Side < 0:
			c = Fire(Port)
		case gc.Side > 0:
			c = Fire(Starboard)
		default:
			return PlayerCommand{}, fmt.Errorf("%w: fire without a side", ErrInvalidCommand)
		}
	default:
		return PlayerCommand{}, fmt.Errorf("%w: %s is not a game action", ErrInvalidCommand, gc.Kind)
	}
	if err := c.validate(); err != nil {
		return PlayerCommand{}, err
	}
	return c, nil
}

// ToGameCommand returns c as a game client sends it (netcode/wire
// GameCommand): the inverse of what DecodeCommand does with one.
func ToGameCommand(c PlayerCommand) wire.GameCommand {
	switch c.Kind {
	case KindJoin:
		return wire.GameCommand{Kind: wire.CommandJoin}
	case KindThrottle:
		return wire.GameCommand{Kind: wire.CommandThrottle, Value: int32(c.Value)}
	case KindRudder:
		return wire.GameCommand{Kind: wire.CommandRudder, Value: int32(c.Value)}
	case KindFire:
		side := int8(1)
		if c.Side == Port {
			side = -1
		}
		return wire.GameCommand{Kind: wire.CommandFire, Side: side}
	}
	return wire.GameCommand{}
}
