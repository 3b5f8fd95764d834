// Package codec encodes and decodes cmdlog protocol messages (package
// cmdlog/msg) as FlatBuffers Frames (netcode/wire/cmdlog.fbs).
//
// Encode is append-style and allocation-free when dst has room (and m is
// already boxed in the msg.Message interface). Decode verifies the whole
// buffer with wire.VerifyFrame before reading anything, never panics, and
// copies everything it returns out of the buffer, so the caller may reuse
// the buffer at once.
//
// Decoding is canonical up to empty slices: a nil and an empty slice encode
// the same way (the field is omitted) and both decode as nil. Record and
// Entry data decoded from one message share one backing array, each slice
// capped at its own length, so appending to one never overwrites another.
//
// # Limits
//
// Decode rejects, with an error wrapping ErrMalformed:
//   - a buffer larger than MaxMessageSize;
//   - any list (records, entries, ids, members, dedup marks, a mark's
//     above list) longer than MaxItems;
//   - a record whose data is larger than MaxRecordData;
//   - buffers whose tables and vectors reference more bytes than the buffer
//     holds (shared sub-objects; see wire.Verifier), so the memory Decode
//     allocates is linear in the buffer's size;
//   - unknown enum values (RejectReason, ReadErr).
//
// Encode does not check these limits: a caller that builds a larger message
// gets a frame its peer will refuse. EncodeTo, which the mesh writes with,
// checks them (CheckLimits and the size) and refuses such a message with
// ErrTooLarge. Cores keep batches well below them.
package codec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/netcode/wire"
	"github.com/anoptic/broadside/netcode/wire/fb"
	flatbuffers "github.com/google/flatbuffers/go"
)

// ErrMalformed is wrapped by every error Decode returns. It is
// wire.ErrMalformed, so errors.Is works with either name.
var ErrMalformed = wire.ErrMalformed

// Decode limits (see the package documentation).
const (
	// MaxMessageSize is the largest encoded message Decode accepts.
	MaxMessageSize = 16 << 20
	// MaxItems is the longest list of any kind in one message.
	MaxItems = 1 << 16
	// MaxRecordData is the largest Data of one Record or Entry.
	MaxRecordData = 1 << 20
)

// ErrTooLarge is wrapped by EncodeTo's errors for a message Decode would
// reject for its size or its lists: EncodeTo never writes one.
var ErrTooLarge = errors.New("codec: message exceeds the decoder's limits")

// CheckLimits reports (wrapping ErrTooLarge) whether m has a list longer
// than MaxItems or a record larger than MaxRecordData, which Decode
// rejects. EncodeTo checks it, and the size, before writing.
func CheckLimits(m msg.Message) error {
	items := func(what string, n int) error {
		if n > MaxItems {
			return fmt.Errorf("codec: %s: %d %s, over MaxItems: %w", m.Kind(), n, what, ErrTooLarge)
		}
		return nil
	}
	view := func(v msg.ViewRecord) error {
		if err := items("dedup marks", len(v.Dedup)); err != nil {
			return err
		}
		for _, d := range v.Dedup {
			if err := items("ids above a mark", len(d.Above)); err != nil {
				return err
			}
		}
		return nil
	}
	records := func(rs []msg.Record) error {
		if err := items("records", len(rs)); err != nil {
			return err
		}
		for _, r := range rs {
			if len(r.Data) > MaxRecordData {
				return fmt.Errorf("codec: %s: a record of %d bytes, over MaxRecordData: %w", m.Kind(), len(r.Data), ErrTooLarge)
			}
		}
		return nil
	}
	switch m := m.(type) {
	case msg.StartView:
		return view(m.View)
	case msg.CoordCAS:
		return view(m.View)
	case msg.CoordResp:
		return view(m.View)
	case msg.Append:
		if err := items("floors", len(m.Floors)); err != nil {
			return err
		}
		return records(m.Records)
	case msg.Store:
		return items("entries", len(m.Entries))
	case msg.ReadResp:
		return items("entries", len(m.Entries))
	case msg.GC:
		return items("ids", len(m.IDs))
	}
	return nil
}

// maxPooledBuilder is the largest builder buffer an encoder keeps for reuse.
const maxPooledBuilder = 1 << 20

// encoder is a pooled builder with scratch space for table offsets.
type encoder struct {
	b    *flatbuffers.Builder
	offs []flatbuffers.UOffsetT
}

var encoders = sync.Pool{New: func() any {
	return &encoder{b: flatbuffers.NewBuilder(1024), offs: make([]flatbuffers.UOffsetT, 0, 64)}
}}

var frameIdent = []byte(wire.FrameIdentifier)

// Encode appends the encoding of m to dst and returns the extended slice.
// m must be one of the message types of package msg, as a value (not a
// pointer); any other type is a bug of the caller and panics.
func Encode(dst []byte, m msg.Message) []byte {
	e := encoders.Get().(*encoder)
	b := e.b
	b.Reset()
	typ, body := e.body(m)
	fb.FrameStart(b)
	fb.FrameAddBody(b, body)
	fb.FrameAddBodyType(b, typ)
	b.FinishWithFileIdentifier(fb.FrameEnd(b), frameIdent)
	dst = append(dst, b.FinishedBytes()...)
	if cap(b.Bytes) <= maxPooledBuilder && cap(e.offs) <= MaxItems {
		e.offs = e.offs[:0]
		encoders.Put(e)
	}
	return dst
}

// EncodeTo encodes m and hands the encoding to write (a frame writer, say)
// without copying it out of the encoder first; the bytes are valid only
// during the call. It returns write's error.
func EncodeTo(m msg.Message, write func([]byte) error) error {
	return encodeTo(m, false, write)
}

// FrameHeader is the length of the header EncodeFramed puts before an
// encoding: its length, 4 bytes big-endian (netcode/transport's frames).
const FrameHeader = 4

// EncodeFramed is EncodeTo for a writer of whole frames: write gets the
// encoding preceded by its length (FrameHeader bytes, big-endian), the
// frame a transport.Stream reads, built in the encoder's own buffer
// (FlatBuffers builds back to front, so the header fits in front of the
// encoding without a copy).
func EncodeFramed(m msg.Message, write func(frame []byte) error) error {
	return encodeTo(m, true, write)
}

func encodeTo(m msg.Message, framed bool, write func([]byte) error) error {
	if err := CheckLimits(m); err != nil {
		return err
	}
	e := encoders.Get().(*encoder)
	b := e.b
	b.Reset()
	typ, body := e.body(m)
	fb.FrameStart(b)
	fb.FrameAddBody(b, body)
	fb.FrameAddBodyType(b, typ)
	b.FinishWithFileIdentifier(fb.FrameEnd(b), frameIdent)
	var err error
	switch out := b.FinishedBytes(); {
	case len(out) > MaxMessageSize:
		err = fmt.Errorf("codec: %s encodes to %d bytes, over MaxMessageSize: %w", m.Kind(), len(out), ErrTooLarge)
	case !framed:
		err = write(out)
	case b.Head() >= FrameHeader:
		frame := b.Bytes[b.Head()-FrameHeader:]
		binary.BigEndian.PutUint32(frame, uint32(len(out)))
		err = write(frame)
	default: // no room in front (the builder's buffer is exactly full)
		frame := binary.BigEndian.AppendUint32(make([]byte, 0, FrameHeader+len(out)), uint32(len(out)))
		err = write(append(frame, out...))
	}
	if cap(b.Bytes) <= maxPooledBuilder && cap(e.offs) <= MaxItems {
		e.offs = e.offs[:0]
		encoders.Put(e)
	}
	return err
}

// body builds the union value for m and returns its type and offset.
func (e *encoder) body(m msg.Message) (fb.Body, flatbuffers.UOffsetT) {
	b := e.b
	switch m := m.(type) {
	case msg.Append:
		recs := e.records(m.Records)
		floors := e.ids(m.Floors)
		fb.AppendStart(b)
		fb.AppendAddView(b, m.View)
		fb.AppendAddRecords(b, recs)
		if floors != 0 {
			fb.AppendAddFloors(b, floors)
		}
		return fb.BodyAppend, fb.AppendEnd(b)
	case msg.AppendAck:
		ids := e.ids(m.IDs)
		fb.AppendAckStart(b)
		fb.AppendAckAddView(b, m.View)
		fb.AppendAckAddIds(b, ids)
		return fb.BodyAppendAck, fb.AppendAckEnd(b)
	case msg.AppendReject:
		ids := e.ids(m.IDs)
		fb.AppendRejectStart(b)
		fb.AppendRejectAddView(b, m.View)
		fb.AppendRejectAddIds(b, ids)
		fb.AppendRejectAddReason(b, byte(m.Reason))
		return fb.BodyAppendReject, fb.AppendRejectEnd(b)
	case msg.Store:
		entries := e.entries(m.Entries)
		fb.StoreStart(b)
		fb.StoreAddEpoch(b, m.Epoch)
		fb.StoreAddBatch(b, m.Batch)
		fb.StoreAddTruncateAbove(b, m.TruncateAbove)
		fb.StoreAddEntries(b, entries)
		fb.StoreAddTruncate(b, m.Truncate)
		return fb.BodyStore, fb.StoreEnd(b)
	case msg.StoreAck:
		fb.StoreAckStart(b)
		fb.StoreAckAddEpoch(b, m.Epoch)
		fb.StoreAckAddBatch(b, m.Batch)
		return fb.BodyStoreAck, fb.StoreAckEnd(b)
	case msg.StoreReject:
		fb.StoreRejectStart(b)
		fb.StoreRejectAddEpoch(b, m.Epoch)
		fb.StoreRejectAddBatch(b, m.Batch)
		return fb.BodyStoreReject, fb.StoreRejectEnd(b)
	case msg.GC:
		ids := e.ids(m.IDs)
		fb.GCStart(b)
		fb.GCAddView(b, m.View)
		fb.GCAddFromGp(b, m.FromGP)
		fb.GCAddToGp(b, m.ToGP)
		fb.GCAddIds(b, ids)
		return fb.BodyGC, fb.GCEnd(b)
	case msg.GCAck:
		fb.GCAckStart(b)
		fb.GCAckAddView(b, m.View)
		fb.GCAckAddLastOrderedGp(b, m.LastOrderedGP)
		return fb.BodyGCAck, fb.GCAckEnd(b)
	case msg.StableGP:
		fb.StableGPStart(b)
		fb.StableGPAddEpoch(b, m.Epoch)
		fb.StableGPAddGp(b, m.GP)
		return fb.BodyStableGP, fb.StableGPEnd(b)
	case msg.Heartbeat:
		fb.HeartbeatStart(b)
		fb.HeartbeatAddView(b, m.View)
		fb.HeartbeatAddLastOrderedGp(b, m.LastOrderedGP)
		fb.HeartbeatAddStableGp(b, m.StableGP)
		return fb.BodyHeartbeat, fb.HeartbeatEnd(b)
	case msg.HeartbeatAck:
		fb.HeartbeatAckStart(b)
		fb.HeartbeatAckAddView(b, m.View)
		fb.HeartbeatAckAddLastOrderedGp(b, m.LastOrderedGP)
		return fb.BodyHeartbeatAck, fb.HeartbeatAckEnd(b)
	case msg.Read:
		fb.ReadStart(b)
		fb.ReadAddReqId(b, m.ReqID)
		fb.ReadAddFrom(b, m.From)
		fb.ReadAddMax(b, m.Max)
		return fb.BodyRead, fb.ReadEnd(b)
	case msg.ReadResp:
		entries := e.entries(m.Entries)
		fb.ReadRespStart(b)
		fb.ReadRespAddReqId(b, m.ReqID)
		fb.ReadRespAddStableGp(b, m.StableGP)
		fb.ReadRespAddTrimmed(b, m.Trimmed)
		fb.ReadRespAddEntries(b, entries)
		fb.ReadRespAddErr(b, byte(m.Err))
		return fb.BodyReadResp, fb.ReadRespEnd(b)
	case msg.CheckTail:
		fb.CheckTailStart(b)
		fb.CheckTailAddReqId(b, m.ReqID)
		return fb.BodyCheckTail, fb.CheckTailEnd(b)
	case msg.TailResp:
		fb.TailRespStart(b)
		fb.TailRespAddReqId(b, m.ReqID)
		fb.TailRespAddView(b, m.View)
		fb.TailRespAddTail(b, m.Tail)
		fb.TailRespAddStableGp(b, m.StableGP)
		fb.TailRespAddOk(b, m.OK)
		return fb.BodyTailResp, fb.TailRespEnd(b)
	case msg.Trim:
		fb.TrimStart(b)
		fb.TrimAddReqId(b, m.ReqID)
		fb.TrimAddUpTo(b, m.UpTo)
		return fb.BodyTrim, fb.TrimEnd(b)
	case msg.TrimAck:
		fb.TrimAckStart(b)
		fb.TrimAckAddReqId(b, m.ReqID)
		fb.TrimAckAddTrimmedTo(b, m.TrimmedTo)
		return fb.BodyTrimAck, fb.TrimAckEnd(b)
	case msg.Seal:
		fb.SealStart(b)
		fb.SealAddView(b, m.View)
		return fb.BodySeal, fb.SealEnd(b)
	case msg.SealAck:
		fb.SealAckStart(b)
		fb.SealAckAddView(b, m.View)
		return fb.BodySealAck, fb.SealAckEnd(b)
	case msg.StartView:
		view := e.viewRecord(&m.View)
		fb.StartViewStart(b)
		fb.StartViewAddView(b, view)
		return fb.BodyStartView, fb.StartViewEnd(b)
	case msg.Join:
		fb.JoinStart(b)
		fb.JoinAddLastStartedView(b, m.LastStartedView)
		return fb.BodyJoin, fb.JoinEnd(b)
	case msg.CoordGet:
		fb.CoordGetStart(b)
		fb.CoordGetAddReqId(b, m.ReqID)
		return fb.BodyCoordGet, fb.CoordGetEnd(b)
	case msg.CoordCAS:
		view := e.viewRecord(&m.View)
		fb.CoordCASStart(b)
		fb.CoordCASAddReqId(b, m.ReqID)
		fb.CoordCASAddExpectRev(b, m.ExpectRev)
		fb.CoordCASAddView(b, view)
		return fb.BodyCoordCAS, fb.CoordCASEnd(b)
	case msg.CoordResp:
		view := e.viewRecord(&m.View)
		fb.CoordRespStart(b)
		fb.CoordRespAddReqId(b, m.ReqID)
		fb.CoordRespAddRev(b, m.Rev)
		fb.CoordRespAddView(b, view)
		fb.CoordRespAddOk(b, m.OK)
		return fb.BodyCoordResp, fb.CoordRespEnd(b)
	}
	panic(fmt.Sprintf("codec: Encode: unsupported message type %T", m))
}

// data creates a byte vector, or returns 0 (field omitted) for empty data.
func (e *encoder) data(d []byte) flatbuffers.UOffsetT {
	if len(d) == 0 {
		return 0
	}
	return e.b.CreateByteVector(d)
}

// tableVector creates a vector of the table offsets e.offs[start:] and
// drops them from the scratch space.
func (e *encoder) tableVector(start int) flatbuffers.UOffsetT {
	offs := e.offs[start:]
	e.b.StartVector(4, len(offs), 4)
	for i := len(offs) - 1; i >= 0; i-- {
		e.b.PrependUOffsetT(offs[i])
	}
	e.offs = e.offs[:start]
	return e.b.EndVector(len(offs))
}

func (e *encoder) records(rs []msg.Record) flatbuffers.UOffsetT {
	if len(rs) == 0 {
		return 0
	}
	b, start := e.b, len(e.offs)
	for i := range rs {
		r := &rs[i]
		data := e.data(r.Data)
		fb.RecordStart(b)
		fb.RecordAddId(b, fb.CreateRecordID(b, r.ID.Client, r.ID.Seq))
		fb.RecordAddData(b, data)
		e.offs = append(e.offs, fb.RecordEnd(b))
	}
	return e.tableVector(start)
}

func (e *encoder) entries(es []msg.Entry) flatbuffers.UOffsetT {
	if len(es) == 0 {
		return 0
	}
	b, start := e.b, len(e.offs)
	for i := range es {
		en := &es[i]
		data := e.data(en.Record.Data)
		fb.EntryStart(b)
		fb.EntryAddId(b, fb.CreateRecordID(b, en.Record.ID.Client, en.Record.ID.Seq))
		fb.EntryAddPos(b, en.Pos)
		fb.EntryAddData(b, data)
		e.offs = append(e.offs, fb.EntryEnd(b))
	}
	return e.tableVector(start)
}

func (e *encoder) ids(ids []msg.RecordID) flatbuffers.UOffsetT {
	if len(ids) == 0 {
		return 0
	}
	b := e.b
	b.StartVector(16, len(ids), 8)
	for i := len(ids) - 1; i >= 0; i-- {
		fb.CreateRecordID(b, ids[i].Client, ids[i].Seq)
	}
	return b.EndVector(len(ids))
}

func (e *encoder) nodeIDs(ids []msg.NodeID) flatbuffers.UOffsetT {
	if len(ids) == 0 {
		return 0
	}
	b := e.b
	b.StartVector(4, len(ids), 4)
	for i := len(ids) - 1; i >= 0; i-- {
		b.PrependUint32(uint32(ids[i]))
	}
	return b.EndVector(len(ids))
}

func (e *encoder) uint64s(xs []uint64) flatbuffers.UOffsetT {
	if len(xs) == 0 {
		return 0
	}
	b := e.b
	b.StartVector(8, len(xs), 8)
	for i := len(xs) - 1; i >= 0; i-- {
		b.PrependUint64(xs[i])
	}
	return b.EndVector(len(xs))
}

func (e *encoder) viewRecord(v *msg.ViewRecord) flatbuffers.UOffsetT {
	b := e.b
	var dedup flatbuffers.UOffsetT
	if len(v.Dedup) > 0 {
		start := len(e.offs)
		for i := range v.Dedup {
			d := &v.Dedup[i]
			above := e.uint64s(d.Above)
			fb.ClientMarkStart(b)
			fb.ClientMarkAddClient(b, d.Client)
			fb.ClientMarkAddMark(b, d.Mark)
			fb.ClientMarkAddAbove(b, above)
			fb.ClientMarkAddView(b, d.View)
			e.offs = append(e.offs, fb.ClientMarkEnd(b))
		}
		dedup = e.tableVector(start)
	}
	var change flatbuffers.UOffsetT
	if c := v.Change; c != nil {
		members := e.nodeIDs(c.NewMembers)
		fb.ViewChangeStart(b)
		fb.ViewChangeAddEpoch(b, c.Epoch)
		fb.ViewChangeAddNewMembers(b, members)
		fb.ViewChangeAddFlusher(b, uint32(c.Flusher))
		change = fb.ViewChangeEnd(b)
	}
	members := e.nodeIDs(v.Members)
	fb.ViewRecordStart(b)
	fb.ViewRecordAddNumber(b, v.Number)
	fb.ViewRecordAddStartGp(b, v.StartGP)
	fb.ViewRecordAddMembers(b, members)
	fb.ViewRecordAddDedup(b, dedup)
	fb.ViewRecordAddChange(b, change)
	fb.ViewRecordAddLeader(b, uint32(v.Leader))
	return fb.ViewRecordEnd(b)
}
