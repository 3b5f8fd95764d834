package wire

import (
	"fmt"

	"github.com/anoptic/broadside/netcode/wire/fb"
)

// File identifiers of the root tables (the file_identifier of each schema).
const (
	FrameIdentifier       = "BSCL" // cmdlog.fbs, root Frame
	EnvelopeIdentifier    = "BSEV" // envelope.fbs, root Envelope
	GameCommandIdentifier = "BSGC" // command.fbs, root GameCommand
)

// The per-table functions below mirror the schemas field by field: field ids
// are 0-based in declaration order, a union takes two ids (type, value).
// Every field a decoder reads must be verified here with its exact size:
// this is what makes the generated accessors safe on verified input.

// VerifyFrame verifies buf as a cmdlog Frame (cmdlog.fbs): the header, the
// Frame, a body of a known type, and every field of the body that the
// generated accessors can read.
func VerifyFrame(buf []byte) error {
	v := NewVerifier(buf)
	root, err := v.Root("Frame", FrameIdentifier)
	if err != nil {
		return fmt.Errorf("wire: %w", err)
	}
	typ, body, err := root.Union(0, 1, bodyNames)
	if err != nil {
		return fmt.Errorf("wire: %w", err)
	}
	if typ == 0 {
		return fmt.Errorf("wire: Frame: field 1: no body: %w", ErrMalformed)
	}
	if err := verifyBody(fb.Body(typ), body); err != nil {
		return fmt.Errorf("wire: Frame: field 1: %w", err)
	}
	return nil
}

// VerifyEnvelope verifies buf as a record Envelope (envelope.fbs). It checks
// structure only; DecodeEnvelope also checks the kind.
func VerifyEnvelope(buf []byte) error {
	v := NewVerifier(buf)
	t, err := v.Root("Envelope", EnvelopeIdentifier)
	if err == nil {
		err = firstError(
			t.Field(0, 1, 1), // kind
			t.Field(1, 8, 8), // tick
			t.Field(2, 4, 4), // player
			t.Field(3, 8, 8), // client_seq
			t.Field(4, 4, 4), // shard
			vector(t, 5, 1),  // payload
			t.Field(6, 8, 8), // epoch
			t.Field(7, 4, 4), // source
		)
	}
	if err != nil {
		return fmt.Errorf("wire: %w", err)
	}
	return nil
}

// VerifyGameCommand verifies buf as a GameCommand (command.fbs). It checks
// structure only; DecodeGameCommand also checks the kind.
func VerifyGameCommand(buf []byte) error {
	v := NewVerifier(buf)
	t, err := v.Root("GameCommand", GameCommandIdentifier)
	if err == nil {
		err = firstError(
			t.Field(0, 8, 8), // seq
			t.Field(1, 1, 1), // kind
			t.Field(2, 4, 4), // value
			t.Field(3, 1, 1), // side
			t.Field(4, 8, 8), // ack_tick
			t.Field(5, 4, 4), // player
			t.Field(6, 8, 8), // settled
		)
	}
	if err != nil {
		return fmt.Errorf("wire: %w", err)
	}
	return nil
}

func firstError(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// vector verifies a vector of scalars of size bytes (aligned to size).
func vector(t Table, id, size int) error {
	_, err := t.Vector(id, size, size)
	return err
}

// recordIDSize is the size of the RecordID struct (two ulongs).
const recordIDSize = 16

// bodyNames[k] is the table name of Body union type k.
var bodyNames = func() []string {
	names := make([]string, len(fb.EnumNamesBody))
	for k, name := range fb.EnumNamesBody {
		names[k] = name
	}
	return names
}()

// verifyBody verifies a table of Body union type typ. (A switch, not a
// table of functions: direct calls let the Verifier stay on the stack.)
func verifyBody(typ fb.Body, t Table) error {
	switch typ {
	case fb.BodyAppend:
		return verifyAppend(t)
	case fb.BodyAppendAck:
		return verifyAppendAck(t)
	case fb.BodyAppendReject:
		return verifyAppendReject(t)
	case fb.BodyStore:
		return verifyStore(t)
	case fb.BodyStoreAck, fb.BodyStoreReject, fb.BodyGCAck, fb.BodyStableGP,
		fb.BodyHeartbeatAck, fb.BodyTrim, fb.BodyTrimAck:
		return verifyTwoUlongs(t)
	case fb.BodyHeartbeat:
		return firstError(t.Field(0, 8, 8), t.Field(1, 8, 8), t.Field(2, 8, 8))
	case fb.BodyGC:
		return verifyGC(t)
	case fb.BodyRead:
		return verifyRead(t)
	case fb.BodyReadResp:
		return verifyReadResp(t)
	case fb.BodyCheckTail, fb.BodySeal, fb.BodySealAck, fb.BodyCoordGet, fb.BodyJoin:
		return verifyOneUlong(t)
	case fb.BodyTailResp:
		return verifyTailResp(t)
	case fb.BodyStartView:
		return verifyStartView(t)
	case fb.BodyCoordCAS:
		return verifyCoordCAS(t)
	case fb.BodyCoordResp:
		return verifyCoordResp(t)
	}
	return fmt.Errorf("%s: no verifier for body type %d: %w", t.errName(), typ, ErrMalformed)
}

// verifyOneUlong verifies CheckTail, Seal, SealAck, CoordGet: { ulong }.
func verifyOneUlong(t Table) error { return t.Field(0, 8, 8) }

// verifyTwoUlongs verifies StoreAck, StoreReject, GCAck, StableGP,
// Heartbeat, HeartbeatAck, Trim, TrimAck: { ulong; ulong }.
func verifyTwoUlongs(t Table) error {
	return firstError(t.Field(0, 8, 8), t.Field(1, 8, 8))
}

// verifyRecord verifies Record { id: RecordID; data: [ubyte] }.
func verifyRecord(t Table) error {
	return firstError(t.Field(0, recordIDSize, 8), vector(t, 1, 1))
}

// verifyEntry verifies Entry { pos: ulong; id: RecordID; data: [ubyte] }.
func verifyEntry(t Table) error {
	return firstError(t.Field(0, 8, 8), t.Field(1, recordIDSize, 8), vector(t, 2, 1))
}

// verifyEntries verifies the [Entry] field id.
func verifyEntries(t Table, id int) error {
	vec, err := t.Vector(id, 4, 4)
	for i := 0; err == nil && i < vec.Len(); i++ {
		var et Table
		if et, err = t.VectorTable(vec, i, "Entry"); err == nil {
			err = verifyEntry(et)
		}
		if err != nil {
			return t.ElementError(id, i, err)
		}
	}
	return err
}

// verifyRecordIDs verifies a [RecordID] field.
func verifyRecordIDs(t Table, id int) error {
	_, err := t.Vector(id, recordIDSize, 8)
	return err
}

// verifyAppend verifies Append { view: ulong; records: [Record];
// floors: [RecordID] }.
func verifyAppend(t Table) error {
	if err := firstError(t.Field(0, 8, 8), verifyRecordIDs(t, 2)); err != nil {
		return err
	}
	const id = 1
	vec, err := t.Vector(id, 4, 4)
	for i := 0; err == nil && i < vec.Len(); i++ {
		var rt Table
		if rt, err = t.VectorTable(vec, i, "Record"); err == nil {
			err = verifyRecord(rt)
		}
		if err != nil {
			return t.ElementError(id, i, err)
		}
	}
	return err
}

// verifyAppendAck verifies AppendAck { view: ulong; ids: [RecordID] }.
func verifyAppendAck(t Table) error {
	return firstError(t.Field(0, 8, 8), verifyRecordIDs(t, 1))
}

// verifyAppendReject verifies AppendReject { view: ulong; reason: ubyte;
// ids: [RecordID] }.
func verifyAppendReject(t Table) error {
	return firstError(t.Field(0, 8, 8), t.Field(1, 1, 1), verifyRecordIDs(t, 2))
}

// verifyStore verifies Store { epoch, batch: ulong; entries: [Entry];
// truncate: bool; truncate_above: ulong }.
func verifyStore(t Table) error {
	if err := firstError(t.Field(0, 8, 8), t.Field(1, 8, 8), t.Field(3, 1, 1), t.Field(4, 8, 8)); err != nil {
		return err
	}
	return verifyEntries(t, 2)
}

// verifyGC verifies GC { view, from_gp, to_gp: ulong; ids: [RecordID] }.
func verifyGC(t Table) error {
	return firstError(t.Field(0, 8, 8), t.Field(1, 8, 8), t.Field(2, 8, 8), verifyRecordIDs(t, 3))
}

// verifyRead verifies Read { req_id, from: ulong; max: uint }.
func verifyRead(t Table) error {
	return firstError(t.Field(0, 8, 8), t.Field(1, 8, 8), t.Field(2, 4, 4))
}

// verifyReadResp verifies ReadResp { req_id: ulong; err: ubyte; stable_gp,
// trimmed: ulong; entries: [Entry] }.
func verifyReadResp(t Table) error {
	if err := firstError(t.Field(0, 8, 8), t.Field(1, 1, 1), t.Field(2, 8, 8), t.Field(3, 8, 8)); err != nil {
		return err
	}
	return verifyEntries(t, 4)
}

// verifyTailResp verifies TailResp { req_id: ulong; ok: bool; view, tail,
// stable_gp: ulong }.
func verifyTailResp(t Table) error {
	return firstError(t.Field(0, 8, 8), t.Field(1, 1, 1), t.Field(2, 8, 8), t.Field(3, 8, 8), t.Field(4, 8, 8))
}

// verifyClientMark verifies ClientMark { client, mark: ulong; above: [ulong];
// view: ulong }.
func verifyClientMark(t Table) error {
	return firstError(t.Field(0, 8, 8), t.Field(1, 8, 8), vector(t, 2, 8), t.Field(3, 8, 8))
}

// verifyViewChange verifies ViewChange { epoch: ulong; flusher: uint;
// new_members: [uint] }.
func verifyViewChange(t Table) error {
	return firstError(t.Field(0, 8, 8), t.Field(1, 4, 4), vector(t, 2, 4))
}

// verifyViewRecord verifies ViewRecord { number: ulong; members: [uint];
// leader: uint; start_gp: ulong; dedup: [ClientMark]; change: ViewChange }.
func verifyViewRecord(t Table) error {
	if err := firstError(t.Field(0, 8, 8), vector(t, 1, 4), t.Field(2, 4, 4), t.Field(3, 8, 8)); err != nil {
		return err
	}
	const dedup, change = 4, 5
	vec, err := t.Vector(dedup, 4, 4)
	for i := 0; err == nil && i < vec.Len(); i++ {
		var mt Table
		if mt, err = t.VectorTable(vec, i, "ClientMark"); err == nil {
			err = verifyClientMark(mt)
		}
		if err != nil {
			return t.ElementError(dedup, i, err)
		}
	}
	if err != nil {
		return err
	}
	ct, ok, err := t.NestedTable(change, "ViewChange")
	if !ok || err != nil {
		return err
	}
	if err := verifyViewChange(ct); err != nil {
		return t.FieldError(change, err)
	}
	return nil
}

// verifyViewRecordField verifies the optional ViewRecord in field id.
func verifyViewRecordField(t Table, id int) error {
	vt, ok, err := t.NestedTable(id, "ViewRecord")
	if !ok || err != nil {
		return err
	}
	if err := verifyViewRecord(vt); err != nil {
		return t.FieldError(id, err)
	}
	return nil
}

// verifyStartView verifies StartView { view: ViewRecord }.
func verifyStartView(t Table) error {
	return verifyViewRecordField(t, 0)
}

// verifyCoordCAS verifies CoordCAS { req_id, expect_rev: ulong; view:
// ViewRecord }.
func verifyCoordCAS(t Table) error {
	if err := firstError(t.Field(0, 8, 8), t.Field(1, 8, 8)); err != nil {
		return err
	}
	return verifyViewRecordField(t, 2)
}

// verifyCoordResp verifies CoordResp { req_id: ulong; ok: bool; rev: ulong;
// view: ViewRecord }.
func verifyCoordResp(t Table) error {
	if err := firstError(t.Field(0, 8, 8), t.Field(1, 1, 1), t.Field(2, 8, 8)); err != nil {
		return err
	}
	return verifyViewRecordField(t, 3)
}
