package wire

import (
	"fmt"
	"math"
	"math/bits"
	"unicode/utf8"

	"github.com/anoptic/broadside/netcode/wire/fb"
	flatbuffers "github.com/google/flatbuffers/go"
)

// ALPN is the application protocol of player connections (the session
// protocol of session.fbs and command.fbs over QUIC).
const ALPN = "broadside/1"

// ProtocolVersion is the session protocol version a Hello must name.
const ProtocolVersion = 1

// SessionIdentifier is the file identifier of session.fbs (root
// SessionFrame). A player's stream carries SessionFrames and GameCommands;
// Identifier tells them apart.
const SessionIdentifier = "BSSN"

// MaxSessionFrameSize is the largest SessionFrame DecodeSession accepts
// (a state update that does not fit a datagram goes on the stream).
const MaxSessionFrameSize = 1 << 20

// ReasonReplaced is the reason a server closes a player's connection with
// when a newer connection of the same player takes over: a client that
// reconnects on its own must not reconnect then (the two would take turns).
const ReasonReplaced = "replaced by a newer connection"

// MaxSessionString bounds tokens, names and reasons in session frames.
const MaxSessionString = 1024

var sessionIdent = []byte(SessionIdentifier)

// Identifier returns the file identifier of a FlatBuffers buffer ("" if it
// is too short to have one).
func Identifier(b []byte) string {
	if len(b) < 8 {
		return ""
	}
	return string(b[4:8])
}

// SessionMessage is one of Hello, Welcome, CommandResult, StateUpdate,
// StateAck, Goodbye.
type SessionMessage interface{ sessionBody() fb.SessionBody }

// Hello is a client's first frame.
type Hello struct {
	Token     string
	Protocol  uint16
	Spectator bool
	// Session is the client's session id: random per client process and
	// kept across its reconnections, so that the server gives a resent
	// command the same log id (0: none; the connection cannot resume).
	Session uint64
	// AcksInState says the client reads acknowledgements inside state
	// updates (StateUpdate.Acked): the server may send them there instead
	// of as CommandResults on the stream.
	AcksInState bool
}

// Welcome opens a session.
type Welcome struct {
	PlayerID       uint32
	Player         string
	Tick           uint64
	TickRate       uint16
	MaxCommandRate uint32
	// World is the game's description of the world (at most
	// MaxWelcomeWorld bytes).
	World []byte
}

// MaxWelcomeWorld bounds Welcome.World.
const MaxWelcomeWorld = 4096

// AckStatus is the outcome of a command.
type AckStatus uint8

// Command outcomes; the values are part of the wire format.
const (
	// AckDurable: the command is in the log, fsynced on every sequencing
	// replica.
	AckDurable = AckStatus(fb.AckStatusDurable)
	// AckInvalid: refused (e.g. the server is draining).
	AckInvalid = AckStatus(fb.AckStatusInvalid)
	// AckRateLimited: refused, above the player's rate limit.
	AckRateLimited = AckStatus(fb.AckStatusRateLimited)
	// AckReplicated: the command is in the log, in memory on every
	// sequencing replica but not fsynced (a log in memory durability):
	// it survives a replica crash, not the loss of all of them at once.
	AckReplicated = AckStatus(fb.AckStatusReplicated)
	// AckBusy: refused, not stored, because the log cannot store now (a
	// full or failing disk); the connection stays open and the client may
	// send the command again later (with a new sequence number).
	AckBusy = AckStatus(fb.AckStatusBusy)
)

// Valid reports whether s is a status of this protocol version.
func (s AckStatus) Valid() bool { return s <= AckBusy }

// Stored reports whether s says the command is in the log (durable or
// replicated), as opposed to refused.
func (s AckStatus) Stored() bool { return s == AckDurable || s == AckReplicated }

// String returns the status as reports print it: durable, replicated,
// invalid, rate_limited, busy, or AckStatus(n) for an unknown n.
func (s AckStatus) String() string {
	switch s {
	case AckDurable:
		return "durable"
	case AckReplicated:
		return "replicated"
	case AckInvalid:
		return "invalid"
	case AckRateLimited:
		return "rate_limited"
	case AckBusy:
		return "busy"
	}
	return fmt.Sprintf("AckStatus(%d)", uint8(s))
}

// CommandResult tells a client what became of its command Seq (schema
// table CommandAck).
type CommandResult struct {
	Seq    uint64
	Status AckStatus
}

// StateUpdate is the world state at Tick as a delta against BaseTick (0:
// full), with the last command of the client applied by then.
type StateUpdate struct {
	Tick           uint64
	BaseTick       uint64
	LastAppliedSeq uint64
	Payload        []byte
	// Acked acknowledges commands of the client (zero: none), for a
	// client whose Hello set AcksInState. The server repeats each in
	// every update until the client acknowledges the tick of one that
	// carried it: a lost datagram is repaired by the next.
	Acked AckWindow
}

// AckWindowSize is how many consecutive sequence numbers an AckWindow spans.
const AckWindowSize = 64

// AckWindow acknowledges up to AckWindowSize commands with consecutive-ish
// sequence numbers in one state update: bit i of Bits set says command
// From+i is stored in the log as Status says (AckDurable or
// AckReplicated), exactly what a CommandResult of that status says. The
// zero value acknowledges nothing.
type AckWindow struct {
	From   uint64
	Bits   uint64
	Status AckStatus
}

// Empty reports whether w acknowledges nothing.
func (w AckWindow) Empty() bool { return w.Bits == 0 }

// Has reports whether w acknowledges seq.
func (w AckWindow) Has(seq uint64) bool {
	return w.Bits != 0 && seq >= w.From && seq-w.From < AckWindowSize && w.Bits&(1<<(seq-w.From)) != 0
}

// Add sets seq in w and reports whether it fits (From is set by the first
// seq added to an empty window; seq must be in [From, From+64)).
func (w *AckWindow) Add(seq uint64) bool {
	if w.Bits == 0 {
		w.From = seq
	}
	if seq < w.From || seq-w.From >= AckWindowSize {
		return false
	}
	w.Bits |= 1 << (seq - w.From)
	return true
}

// Results appends to dst the CommandResults w stands for, in sequence order.
func (w AckWindow) Results(dst []CommandResult) []CommandResult {
	for b := w.Bits; b != 0; b &= b - 1 {
		dst = append(dst, CommandResult{Seq: w.From + uint64(bits.TrailingZeros64(b)), Status: w.Status})
	}
	return dst
}

// valid checks a decoded window: empty and all zero, or a stored status
// and a range of positive sequence numbers that does not wrap.
func (w AckWindow) valid() error {
	if w.Bits == 0 {
		if w.From != 0 || w.Status != 0 {
			return fmt.Errorf("wire: StateUpdate: empty ack window from %d, status %d: %w", w.From, w.Status, ErrMalformed)
		}
		return nil
	}
	if !w.Status.Stored() {
		return fmt.Errorf("wire: StateUpdate: ack window status %d: %w", w.Status, ErrMalformed)
	}
	if w.From == 0 || w.From > math.MaxUint64-(AckWindowSize-1) {
		return fmt.Errorf("wire: StateUpdate: ack window from %d: %w", w.From, ErrMalformed)
	}
	return nil
}

// StateAck tells the server the client holds the state of Tick.
type StateAck struct {
	Tick uint64
}

// Goodbye says why the server closes a session.
type Goodbye struct {
	Code   uint64
	Reason string
}

func (Hello) sessionBody() fb.SessionBody         { return fb.SessionBodyHello }
func (Welcome) sessionBody() fb.SessionBody       { return fb.SessionBodyWelcome }
func (CommandResult) sessionBody() fb.SessionBody { return fb.SessionBodyCommandAck }
func (StateUpdate) sessionBody() fb.SessionBody   { return fb.SessionBodyStateUpdate }
func (Goodbye) sessionBody() fb.SessionBody       { return fb.SessionBodyGoodbye }
func (StateAck) sessionBody() fb.SessionBody      { return fb.SessionBodyStateAck }

// EncodeSession appends the encoding of m to dst.
func EncodeSession(dst []byte, m SessionMessage) []byte {
	b := getBuilder()
	var body flatbuffers.UOffsetT
	switch m := m.(type) {
	case Hello:
		tok := b.CreateString(m.Token)
		fb.HelloStart(b)
		fb.HelloAddToken(b, tok)
		fb.HelloAddProtocol(b, m.Protocol)
		fb.HelloAddSpectator(b, m.Spectator)
		fb.HelloAddSession(b, m.Session)
		fb.HelloAddAcksInState(b, m.AcksInState)
		body = fb.HelloEnd(b)
	case Welcome:
		name := b.CreateString(m.Player)
		var world flatbuffers.UOffsetT
		if len(m.World) > 0 {
			world = b.CreateByteVector(m.World)
		}
		fb.WelcomeStart(b)
		if len(m.World) > 0 {
			fb.WelcomeAddWorld(b, world)
		}
		fb.WelcomeAddTick(b, m.Tick)
		fb.WelcomeAddPlayer(b, name)
		fb.WelcomeAddPlayerId(b, m.PlayerID)
		fb.WelcomeAddMaxCommandRate(b, m.MaxCommandRate)
		fb.WelcomeAddTickRate(b, m.TickRate)
		body = fb.WelcomeEnd(b)
	case CommandResult:
		body = buildCommandAck(b, m)
	case StateUpdate:
		body = buildStateUpdate(b, m)
	case StateAck:
		fb.StateAckStart(b)
		fb.StateAckAddTick(b, m.Tick)
		body = fb.StateAckEnd(b)
	case Goodbye:
		reason := b.CreateString(m.Reason)
		fb.GoodbyeStart(b)
		fb.GoodbyeAddCode(b, m.Code)
		fb.GoodbyeAddReason(b, reason)
		body = fb.GoodbyeEnd(b)
	default:
		panic(fmt.Sprintf("wire: EncodeSession: unsupported type %T", m))
	}
	return finishSession(dst, b, body, m.sessionBody())
}

// AppendStateUpdate appends the encoding of u to dst: EncodeSession(dst,
// u) without boxing u in an interface (the fan-out encodes one per client
// per tick).
func AppendStateUpdate(dst []byte, u StateUpdate) []byte {
	b := getBuilder()
	return finishSession(dst, b, buildStateUpdate(b, u), fb.SessionBodyStateUpdate)
}

// AppendCommandResult appends the encoding of r to dst: EncodeSession(dst,
// r) without boxing r in an interface.
func AppendCommandResult(dst []byte, r CommandResult) []byte {
	b := getBuilder()
	return finishSession(dst, b, buildCommandAck(b, r), fb.SessionBodyCommandAck)
}

func buildCommandAck(b *flatbuffers.Builder, m CommandResult) flatbuffers.UOffsetT {
	fb.CommandAckStart(b)
	fb.CommandAckAddSeq(b, m.Seq)
	fb.CommandAckAddStatus(b, fb.AckStatus(m.Status))
	return fb.CommandAckEnd(b)
}

func buildStateUpdate(b *flatbuffers.Builder, m StateUpdate) flatbuffers.UOffsetT {
	var payload flatbuffers.UOffsetT
	if len(m.Payload) > 0 {
		payload = b.CreateByteVector(m.Payload)
	}
	fb.StateUpdateStart(b)
	fb.StateUpdateAddTick(b, m.Tick)
	fb.StateUpdateAddBaseTick(b, m.BaseTick)
	fb.StateUpdateAddLastAppliedSeq(b, m.LastAppliedSeq)
	fb.StateUpdateAddPayload(b, payload)
	fb.StateUpdateAddAckedFrom(b, m.Acked.From)
	fb.StateUpdateAddAcked(b, m.Acked.Bits)
	fb.StateUpdateAddAckedStatus(b, fb.AckStatus(m.Acked.Status))
	return fb.StateUpdateEnd(b)
}

// finishSession wraps body, of type typ, in a SessionFrame and appends
// the frame to dst.
func finishSession(dst []byte, b *flatbuffers.Builder, body flatbuffers.UOffsetT, typ fb.SessionBody) []byte {
	fb.SessionFrameStart(b)
	fb.SessionFrameAddBody(b, body)
	fb.SessionFrameAddBodyType(b, typ)
	return finish(dst, b, fb.SessionFrameEnd(b), sessionIdent)
}

var sessionBodyNames = []string{"NONE", "Hello", "Welcome", "CommandAck", "StateUpdate", "Goodbye", "StateAck"}

// VerifySession verifies buf as a SessionFrame (session.fbs) with a body
// of a known type.
func VerifySession(buf []byte) error {
	v := NewVerifier(buf)
	root, err := v.Root("SessionFrame", SessionIdentifier)
	if err != nil {
		return fmt.Errorf("wire: %w", err)
	}
	typ, t, err := root.Union(0, 1, sessionBodyNames)
	if err != nil {
		return fmt.Errorf("wire: %w", err)
	}
	switch fb.SessionBody(typ) {
	case fb.SessionBodyNONE:
		err = fmt.Errorf("SessionFrame: field 1: no body: %w", ErrMalformed)
	case fb.SessionBodyHello:
		err = firstError(stringField(t, 0), t.Field(1, 2, 2), t.Field(2, 1, 1), t.Field(3, 8, 8), t.Field(4, 1, 1))
	case fb.SessionBodyWelcome:
		err = firstError(t.Field(0, 4, 4), stringField(t, 1), t.Field(2, 8, 8), t.Field(3, 2, 2), t.Field(4, 4, 4), vector(t, 5, 1))
	case fb.SessionBodyCommandAck:
		err = firstError(t.Field(0, 8, 8), t.Field(1, 1, 1))
	case fb.SessionBodyStateUpdate:
		err = firstError(t.Field(0, 8, 8), t.Field(1, 8, 8), t.Field(2, 8, 8), vector(t, 3, 1), t.Field(4, 8, 8), t.Field(5, 8, 8), t.Field(6, 1, 1))
	case fb.SessionBodyGoodbye:
		err = firstError(t.Field(0, 8, 8), stringField(t, 1))
	case fb.SessionBodyStateAck:
		err = t.Field(0, 8, 8)
	}
	if err != nil {
		return fmt.Errorf("wire: %w", err)
	}
	return nil
}

func stringField(t Table, id int) error {
	s, err := t.String(id)
	if err == nil && s.Len() > MaxSessionString {
		err = t.errorf(id, "string of %d bytes exceeds %d", s.Len(), MaxSessionString)
	}
	return err
}

// DecodeSession verifies b and decodes it. Strings must be UTF-8; byte
// slices are copies. Errors wrap ErrMalformed.
func DecodeSession(b []byte) (SessionMessage, error) {
	if len(b) > MaxSessionFrameSize {
		return nil, fmt.Errorf("wire: SessionFrame: %d bytes exceeds %d: %w", len(b), MaxSessionFrameSize, ErrMalformed)
	}
	if err := VerifySession(b); err != nil {
		return nil, err
	}
	var root fb.SessionFrame
	root.Init(b, flatbuffers.GetUOffsetT(b))
	var tab flatbuffers.Table
	root.Body(&tab)
	str := func(s []byte) (string, error) {
		if !utf8.Valid(s) {
			return "", fmt.Errorf("wire: SessionFrame: string is not UTF-8: %w", ErrMalformed)
		}
		return string(s), nil
	}
	switch root.BodyType() {
	case fb.SessionBodyHello:
		var x fb.Hello
		x.Init(tab.Bytes, tab.Pos)
		tok, err := str(x.Token())
		return Hello{Token: tok, Protocol: x.Protocol(), Spectator: x.Spectator(), Session: x.Session(), AcksInState: x.AcksInState()}, err
	case fb.SessionBodyWelcome:
		var x fb.Welcome
		x.Init(tab.Bytes, tab.Pos)
		name, err := str(x.Player())
		w := Welcome{PlayerID: x.PlayerId(), Player: name, Tick: x.Tick(), TickRate: x.TickRate(), MaxCommandRate: x.MaxCommandRate()}
		if world := x.WorldBytes(); len(world) > 0 {
			if len(world) > MaxWelcomeWorld {
				return nil, fmt.Errorf("wire: Welcome: world of %d bytes exceeds %d: %w", len(world), MaxWelcomeWorld, ErrMalformed)
			}
			w.World = append([]byte(nil), world...)
		}
		return w, err
	case fb.SessionBodyCommandAck:
		var x fb.CommandAck
		x.Init(tab.Bytes, tab.Pos)
		st := AckStatus(x.Status())
		if !st.Valid() {
			return nil, fmt.Errorf("wire: CommandAck: unknown status %d: %w", st, ErrMalformed)
		}
		return CommandResult{Seq: x.Seq(), Status: st}, nil
	case fb.SessionBodyStateUpdate:
		var x fb.StateUpdate
		x.Init(tab.Bytes, tab.Pos)
		u := StateUpdate{Tick: x.Tick(), BaseTick: x.BaseTick(), LastAppliedSeq: x.LastAppliedSeq(),
			Acked: AckWindow{From: x.AckedFrom(), Bits: x.Acked(), Status: AckStatus(x.AckedStatus())}}
		if err := u.Acked.valid(); err != nil {
			return nil, err
		}
		if p := x.PayloadBytes(); len(p) > 0 {
			u.Payload = append([]byte(nil), p...)
		}
		return u, nil
	case fb.SessionBodyGoodbye:
		var x fb.Goodbye
		x.Init(tab.Bytes, tab.Pos)
		reason, err := str(x.Reason())
		return Goodbye{Code: x.Code(), Reason: reason}, err
	case fb.SessionBodyStateAck:
		var x fb.StateAck
		x.Init(tab.Bytes, tab.Pos)
		return StateAck{Tick: x.Tick()}, nil
	}
	return nil, fmt.Errorf("wire: SessionFrame: unknown body: %w", ErrMalformed)
}
