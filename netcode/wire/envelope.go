package wire

import (
	"fmt"
	"strconv"

	"github.com/anoptic/broadside/netcode/wire/fb"
	flatbuffers "github.com/google/flatbuffers/go"
)

// MaxEnvelopeSize is the largest encoded Envelope DecodeEnvelope accepts. An
// envelope is one command-log record, and cmdlog/codec limits a record's
// data to the same 1 MiB.
const MaxEnvelopeSize = 1 << 20

// EnvelopeKind says what a command-log record means to the simulation.
type EnvelopeKind uint8

// Envelope kinds; the values are part of the wire format (envelope.fbs).
const (
	// EnvelopeTick marks the end of tick Tick: records ordered after the
	// previous tick marker and before it are the tick's inputs.
	EnvelopeTick = EnvelopeKind(fb.EnvelopeKindTick)
	// EnvelopePlayerCommand carries a GameCommand from Player, stamped by
	// the server from the authenticated connection.
	EnvelopePlayerCommand = EnvelopeKind(fb.EnvelopeKindPlayerCommand)
	// EnvelopeMigration carries an entity moving to sim shard Shard.
	EnvelopeMigration = EnvelopeKind(fb.EnvelopeKindMigration)
	// EnvelopeControl carries an engine control record.
	EnvelopeControl = EnvelopeKind(fb.EnvelopeKindControl)
)

// Valid reports whether k is a known kind.
func (k EnvelopeKind) Valid() bool { return k <= EnvelopeControl }

// String returns the schema name of k, or EnvelopeKind(n) for an unknown n.
func (k EnvelopeKind) String() string {
	if k.Valid() {
		return fb.EnvelopeKind(k).String()
	}
	return "EnvelopeKind(" + strconv.Itoa(int(k)) + ")"
}

// Envelope is one record the game server appends to the command log
// (envelope.fbs).
type Envelope struct {
	Kind      EnvelopeKind
	Tick      uint64 // the tick a Tick record closes, or the tick it was issued in
	Player    uint32 // authenticated player of a PlayerCommand
	ClientSeq uint64 // the player's command sequence number
	Shard     uint32 // sim shard a record is addressed to
	Payload   []byte // kind-specific bytes (a GameCommand for PlayerCommand)
	// Epoch is the fencing epoch of the sector lease a Migration was
	// produced under, or that a lease claim announces (0: unfenced).
	Epoch uint64
	// Source is the sim shard that produced a Migration with an Epoch.
	Source uint32
}

// EncodeEnvelope appends the encoding of e to dst and returns the extended
// slice. It does not check MaxEnvelopeSize.
func EncodeEnvelope(dst []byte, e Envelope) []byte {
	b := getBuilder()
	var payload flatbuffers.UOffsetT
	if len(e.Payload) > 0 {
		payload = b.CreateByteVector(e.Payload)
	}
	fb.EnvelopeStart(b)
	fb.EnvelopeAddTick(b, e.Tick)
	fb.EnvelopeAddClientSeq(b, e.ClientSeq)
	fb.EnvelopeAddEpoch(b, e.Epoch)
	fb.EnvelopeAddPayload(b, payload)
	fb.EnvelopeAddPlayer(b, e.Player)
	fb.EnvelopeAddShard(b, e.Shard)
	fb.EnvelopeAddSource(b, e.Source)
	fb.EnvelopeAddKind(b, fb.EnvelopeKind(e.Kind))
	return finish(dst, b, fb.EnvelopeEnd(b), envelopeIdent)
}

// DecodeEnvelope verifies b and decodes it. Payload is a copy (nil when
// empty), so the caller may reuse b. Errors wrap ErrMalformed.
func DecodeEnvelope(b []byte) (Envelope, error) {
	if len(b) > MaxEnvelopeSize {
		return Envelope{}, fmt.Errorf("wire: Envelope: %d bytes exceeds %d: %w", len(b), MaxEnvelopeSize, ErrMalformed)
	}
	if err := VerifyEnvelope(b); err != nil {
		return Envelope{}, err
	}
	var t fb.Envelope
	t.Init(b, flatbuffers.GetUOffsetT(b))
	e := Envelope{
		Kind:      EnvelopeKind(t.Kind()),
		Tick:      t.Tick(),
		Player:    t.Player(),
		ClientSeq: t.ClientSeq(),
		Shard:     t.Shard(),
		Epoch:     t.Epoch(),
		Source:    t.Source(),
	}
	if !e.Kind.Valid() {
		return Envelope{}, fmt.Errorf("wire: Envelope: field 0: unknown kind %d: %w", e.Kind, ErrMalformed)
	}
	if p := t.PayloadBytes(); len(p) > 0 {
		e.Payload = append([]byte(nil), p...)
	}
	return e, nil
}
