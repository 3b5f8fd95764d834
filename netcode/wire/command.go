package wire

import (
	"fmt"
	"strconv"

	"github.com/anoptic/broadside/netcode/wire/fb"
	flatbuffers "github.com/google/flatbuffers/go"
)

// MaxGameCommandSize is the largest encoded GameCommand DecodeGameCommand
// accepts. A GameCommand encodes to about 50 bytes; the slack leaves room
// for fields added later.
const MaxGameCommandSize = 1 << 10

// CommandKind is the action a GameCommand asks for.
type CommandKind uint8

// Command kinds; the values are part of the wire format (command.fbs).
const (
	CommandThrottle = CommandKind(fb.CommandKindThrottle)
	CommandRudder   = CommandKind(fb.CommandKindRudder)
	CommandFire     = CommandKind(fb.CommandKindFire)
	CommandJoin     = CommandKind(fb.CommandKindJoin)
	// CommandAck acknowledges the state the client holds up to AckTick.
	CommandAck = CommandKind(fb.CommandKindAck)
)

// Valid reports whether k is a known kind.
func (k CommandKind) Valid() bool { return k <= CommandAck }

// String returns the schema name of k, or CommandKind(n) for an unknown n.
func (k CommandKind) String() string {
	if k.Valid() {
		return fb.CommandKind(k).String()
	}
	return "CommandKind(" + strconv.Itoa(int(k)) + ")"
}

// GameCommand is what a game client sends to the server (command.fbs). The
// server never trusts a player id in it: the player is the authenticated
// connection's, stamped into the Envelope.
type GameCommand struct {
	Seq     uint64 // the client's command sequence number, from 1
	Kind    CommandKind
	Value   int32  // kind-specific argument (throttle level, rudder angle, ...)
	Side    int8   // kind-specific side (e.g. -1 port, +1 starboard for Fire)
	AckTick uint64 // for CommandAck: the last tick the client holds
	// Player is optional; when set it must be the sender's own id (the
	// server never trusts it otherwise).
	Player uint32
	// Settled, when not 0, says that every command of the session below it
	// has its verdict at the client, which will not send it again. It
	// bounds the session's dedup floor; the log never stores it.
	Settled uint64
}

// EncodeGameCommand appends the encoding of c to dst and returns the
// extended slice.
func EncodeGameCommand(dst []byte, c GameCommand) []byte {
	b := getBuilder()
	fb.GameCommandStart(b)
	fb.GameCommandAddSeq(b, c.Seq)
	fb.GameCommandAddAckTick(b, c.AckTick)
	fb.GameCommandAddPlayer(b, c.Player)
	fb.GameCommandAddSettled(b, c.Settled)
	fb.GameCommandAddValue(b, c.Value)
	fb.GameCommandAddKind(b, fb.CommandKind(c.Kind))
	fb.GameCommandAddSide(b, c.Side)
	return finish(dst, b, fb.GameCommandEnd(b), gameCommandIdent)
}

// DecodeGameCommand verifies b and decodes it. Errors wrap ErrMalformed.
func DecodeGameCommand(b []byte) (GameCommand, error) {
	if len(b) > MaxGameCommandSize {
		return GameCommand{}, fmt.Errorf("wire: GameCommand: %d bytes exceeds %d: %w", len(b), MaxGameCommandSize, ErrMalformed)
	}
	if err := VerifyGameCommand(b); err != nil {
		return GameCommand{}, err
	}
	var t fb.GameCommand
	t.Init(b, flatbuffers.GetUOffsetT(b))
	c := GameCommand{
		Seq:     t.Seq(),
		Kind:    CommandKind(t.Kind()),
		Value:   t.Value(),
		Side:    t.Side(),
		AckTick: t.AckTick(),
		Player:  t.Player(),
		Settled: t.Settled(),
	}
	if !c.Kind.Valid() {
		return GameCommand{}, fmt.Errorf("wire: GameCommand: field 1: unknown kind %d: %w", c.Kind, ErrMalformed)
	}
	return c, nil
}
