package codec

import (
	"fmt"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/netcode/wire"
	"github.com/anoptic/broadside/netcode/wire/fb"
	flatbuffers "github.com/google/flatbuffers/go"
)

// Decode verifies b as a Frame and decodes its message. The message owns all
// its memory (nothing aliases b). Errors wrap ErrMalformed; Decode never
// panics, whatever b holds.
func Decode(b []byte) (msg.Message, error) { return decode(b, false) }

// DecodeShared is Decode without the copy of record data: the Data of
// records and entries are sub-slices of b (each capped at its length), so
// the caller hands b over and must never reuse or change it. A receiver
// that reads each frame into a fresh buffer saves one copy of every
// record this way.
func DecodeShared(b []byte) (msg.Message, error) { return decode(b, true) }

func decode(b []byte, share bool) (msg.Message, error) {
	if len(b) > MaxMessageSize {
		return nil, fmt.Errorf("codec: %d bytes exceeds MaxMessageSize %d: %w", len(b), MaxMessageSize, ErrMalformed)
	}
	if err := wire.VerifyFrame(b); err != nil {
		return nil, fmt.Errorf("codec: %w", err)
	}
	// From here on every field read below has been verified.
	var f fb.Frame
	f.Init(b, flatbuffers.GetUOffsetT(b))
	var t flatbuffers.Table
	f.Body(&t)
	typ := f.BodyType()
	m, err := decodeBody(typ, t, share)
	if err != nil {
		return nil, fmt.Errorf("codec: %s: %w", msg.Kind(typ), err)
	}
	return m, nil
}

func decodeBody(typ fb.Body, t flatbuffers.Table, share bool) (msg.Message, error) {
	switch typ {
	case fb.BodyAppend:
		var x fb.Append
		x.Init(t.Bytes, t.Pos)
		recs, err := decodeRecords(t, share)
		if err != nil {
			return nil, err
		}
		floors, err := decodeIDs(t, vtAppendFloors)
		if err != nil {
			return nil, err
		}
		return msg.Append{View: x.View(), Records: recs, Floors: floors}, nil
	case fb.BodyAppendAck:
		var x fb.AppendAck
		x.Init(t.Bytes, t.Pos)
		ids, err := decodeIDs(t, vtAppendAckIDs)
		if err != nil {
			return nil, err
		}
		return msg.AppendAck{View: x.View(), IDs: ids}, nil
	case fb.BodyAppendReject:
		var x fb.AppendReject
		x.Init(t.Bytes, t.Pos)
		ids, err := decodeIDs(t, vtAppendRejectIDs)
		if err != nil {
			return nil, err
		}
		reason := msg.RejectReason(x.Reason())
		if reason < msg.RejectWrongView || reason > msg.RejectBusy {
			return nil, fmt.Errorf("unknown reject reason %d: %w", reason, ErrMalformed)
		}
		return msg.AppendReject{View: x.View(), Reason: reason, IDs: ids}, nil
	case fb.BodyStore:
		var x fb.Store
		x.Init(t.Bytes, t.Pos)
		entries, err := decodeEntries(t, vtStoreEntries, share)
		if err != nil {
			return nil, err
		}
		return msg.Store{Epoch: x.Epoch(), Batch: x.Batch(), Entries: entries,
			Truncate: x.Truncate(), TruncateAbove: x.TruncateAbove()}, nil
	case fb.BodyStoreAck:
		var x fb.StoreAck
		x.Init(t.Bytes, t.Pos)
		return msg.StoreAck{Epoch: x.Epoch(), Batch: x.Batch()}, nil
	case fb.BodyStoreReject:
		var x fb.StoreReject
		x.Init(t.Bytes, t.Pos)
		return msg.StoreReject{Epoch: x.Epoch(), Batch: x.Batch()}, nil
	case fb.BodyGC:
		var x fb.GC
		x.Init(t.Bytes, t.Pos)
		ids, err := decodeIDs(t, vtGCIDs)
		if err != nil {
			return nil, err
		}
		return msg.GC{View: x.View(), FromGP: x.FromGp(), ToGP: x.ToGp(), IDs: ids}, nil
	case fb.BodyGCAck:
		var x fb.GCAck
		x.Init(t.Bytes, t.Pos)
		return msg.GCAck{View: x.View(), LastOrderedGP: x.LastOrderedGp()}, nil
	case fb.BodyStableGP:
		var x fb.StableGP
		x.Init(t.Bytes, t.Pos)
		return msg.StableGP{Epoch: x.Epoch(), GP: x.Gp()}, nil
	case fb.BodyHeartbeat:
		var x fb.Heartbeat
		x.Init(t.Bytes, t.Pos)
		return msg.Heartbeat{View: x.View(), LastOrderedGP: x.LastOrderedGp(), StableGP: x.StableGp()}, nil
	case fb.BodyHeartbeatAck:
		var x fb.HeartbeatAck
		x.Init(t.Bytes, t.Pos)
		return msg.HeartbeatAck{View: x.View(), LastOrderedGP: x.LastOrderedGp()}, nil
	case fb.BodyRead:
		var x fb.Read
		x.Init(t.Bytes, t.Pos)
		return msg.Read{ReqID: x.ReqId(), From: x.From(), Max: x.Max()}, nil
	case fb.BodyReadResp:
		var x fb.ReadResp
		x.Init(t.Bytes, t.Pos)
		entries, err := decodeEntries(t, vtReadRespEntries, share)
		if err != nil {
			return nil, err
		}
		readErr := msg.ReadErr(x.Err())
		if readErr > msg.ReadNotOwner {
			return nil, fmt.Errorf("unknown read error %d: %w", readErr, ErrMalformed)
		}
		return msg.ReadResp{ReqID: x.ReqId(), Err: readErr, StableGP: x.StableGp(),
			Trimmed: x.Trimmed(), Entries: entries}, nil
	case fb.BodyCheckTail:
		var x fb.CheckTail
		x.Init(t.Bytes, t.Pos)
		return msg.CheckTail{ReqID: x.ReqId()}, nil
	case fb.BodyTailResp:
		var x fb.TailResp
		x.Init(t.Bytes, t.Pos)
		return msg.TailResp{ReqID: x.ReqId(), OK: x.Ok(), View: x.View(), Tail: x.Tail(),
			StableGP: x.StableGp()}, nil
	case fb.BodyTrim:
		var x fb.Trim
		x.Init(t.Bytes, t.Pos)
		return msg.Trim{ReqID: x.ReqId(), UpTo: x.UpTo()}, nil
	case fb.BodyTrimAck:
		var x fb.TrimAck
		x.Init(t.Bytes, t.Pos)
		return msg.TrimAck{ReqID: x.ReqId(), TrimmedTo: x.TrimmedTo()}, nil
	case fb.BodySeal:
		var x fb.Seal
		x.Init(t.Bytes, t.Pos)
		return msg.Seal{View: x.View()}, nil
	case fb.BodySealAck:
		var x fb.SealAck
		x.Init(t.Bytes, t.Pos)
		return msg.SealAck{View: x.View()}, nil
	case fb.BodyStartView:
		var x fb.StartView
		x.Init(t.Bytes, t.Pos)
		var vr fb.ViewRecord
		view, err := decodeViewRecord(x.View(&vr))
		if err != nil {
			return nil, err
		}
		return msg.StartView{View: view}, nil
	case fb.BodyJoin:
		var x fb.Join
		x.Init(t.Bytes, t.Pos)
		return msg.Join{LastStartedView: x.LastStartedView()}, nil
	case fb.BodyCoordGet:
		var x fb.CoordGet
		x.Init(t.Bytes, t.Pos)
		return msg.CoordGet{ReqID: x.ReqId()}, nil
	case fb.BodyCoordCAS:
		var x fb.CoordCAS
		x.Init(t.Bytes, t.Pos)
		var vr fb.ViewRecord
		view, err := decodeViewRecord(x.View(&vr))
		if err != nil {
			return nil, err
		}
		return msg.CoordCAS{ReqID: x.ReqId(), ExpectRev: x.ExpectRev(), View: view}, nil
	case fb.BodyCoordResp:
		var x fb.CoordResp
		x.Init(t.Bytes, t.Pos)
		var vr fb.ViewRecord
		view, err := decodeViewRecord(x.View(&vr))
		if err != nil {
			return nil, err
		}
		return msg.CoordResp{ReqID: x.ReqId(), OK: x.Ok(), Rev: x.Rev(), View: view}, nil
	}
	// VerifyFrame accepts only known body types.
	return nil, fmt.Errorf("unknown body type %d: %w", typ, ErrMalformed)
}

func checkItems(what string, n int) error {
	if n > MaxItems {
		return fmt.Errorf("%d %s exceed MaxItems %d: %w", n, what, MaxItems, ErrMalformed)
	}
	return nil
}

// arena hands out sub-slices of one allocation for record data, or (shared)
// capped sub-slices of the decoded buffer itself.
type arena struct {
	buf    []byte
	shared bool
}

func newArena(total int, shared bool) arena {
	if shared {
		return arena{shared: true}
	}
	return arena{buf: make([]byte, total)}
}

// take returns d, copied into the arena unless shared, capped at its
// length.
func (a *arena) take(d []byte) []byte {
	if len(d) == 0 {
		return nil
	}
	if a.shared {
		return d[:len(d):len(d)]
	}
	n := copy(a.buf, d)
	out := a.buf[:n:n]
	a.buf = a.buf[n:]
	return out
}

func checkData(i, n int) error {
	if n > MaxRecordData {
		return fmt.Errorf("record %d: %d bytes of data exceed MaxRecordData %d: %w", i, n, MaxRecordData, ErrMalformed)
	}
	return nil
}

func recordID(id *fb.RecordID) msg.RecordID {
	if id == nil {
		return msg.RecordID{}
	}
	return msg.RecordID{Client: id.Client(), Seq: id.Seq()}
}

// Vtable offsets (4 + 2 * field id, see cmdlog.fbs) of the list fields the
// decoder walks itself, to keep the element accessors on the stack.
// TestVtableOffsets checks them against the generated code.
const (
	vtAppendRecords    = 6  // Append.records, field 1
	vtAppendFloors     = 8  // Append.floors, field 2
	vtAppendAckIDs     = 6  // AppendAck.ids, field 1
	vtAppendRejectIDs  = 8  // AppendReject.ids, field 2
	vtStoreEntries     = 8  // Store.entries, field 2
	vtGCIDs            = 10 // GC.ids, field 3
	vtReadRespEntries  = 12 // ReadResp.entries, field 4
	recordIDStructSize = 16
)

// vectorField returns the position of the first element and the length of
// the vector in the field at vtable offset vt of the verified table tab
// (0, 0 if the field is absent).
func vectorField(tab flatbuffers.Table, vt flatbuffers.VOffsetT) (flatbuffers.UOffsetT, int) {
	o := flatbuffers.UOffsetT(tab.Offset(vt))
	if o == 0 {
		return 0, 0
	}
	return tab.Vector(o), tab.VectorLen(o)
}

func decodeRecords(tab flatbuffers.Table, share bool) ([]msg.Record, error) {
	start, n := vectorField(tab, vtAppendRecords)
	if n == 0 {
		return nil, nil
	}
	if err := checkItems("records", n); err != nil {
		return nil, err
	}
	var r fb.Record
	total := 0
	for i := range n {
		r.Init(tab.Bytes, tab.Indirect(start+flatbuffers.UOffsetT(4*i)))
		l := r.DataLength()
		if err := checkData(i, l); err != nil {
			return nil, err
		}
		total += l
	}
	data := newArena(total, share)
	recs := make([]msg.Record, n)
	var id fb.RecordID
	for i := range recs {
		r.Init(tab.Bytes, tab.Indirect(start+flatbuffers.UOffsetT(4*i)))
		recs[i] = msg.Record{ID: recordID(r.Id(&id)), Data: data.take(r.DataBytes())}
	}
	return recs, nil
}

func decodeEntries(tab flatbuffers.Table, vt flatbuffers.VOffsetT, share bool) ([]msg.Entry, error) {
	start, n := vectorField(tab, vt)
	if n == 0 {
		return nil, nil
	}
	if err := checkItems("entries", n); err != nil {
		return nil, err
	}
	var en fb.Entry
	total := 0
	for i := range n {
		en.Init(tab.Bytes, tab.Indirect(start+flatbuffers.UOffsetT(4*i)))
		l := en.DataLength()
		if err := checkData(i, l); err != nil {
			return nil, err
		}
		total += l
	}
	data := newArena(total, share)
	entries := make([]msg.Entry, n)
	var id fb.RecordID
	for i := range entries {
		en.Init(tab.Bytes, tab.Indirect(start+flatbuffers.UOffsetT(4*i)))
		entries[i] = msg.Entry{Pos: en.Pos(),
			Record: msg.Record{ID: recordID(en.Id(&id)), Data: data.take(en.DataBytes())}}
	}
	return entries, nil
}

func decodeIDs(tab flatbuffers.Table, vt flatbuffers.VOffsetT) ([]msg.RecordID, error) {
	start, n := vectorField(tab, vt)
	if n == 0 {
		return nil, nil
	}
	if err := checkItems("ids", n); err != nil {
		return nil, err
	}
	ids := make([]msg.RecordID, n)
	var id fb.RecordID
	for i := range ids {
		id.Init(tab.Bytes, start+flatbuffers.UOffsetT(recordIDStructSize*i))
		ids[i] = recordID(&id)
	}
	return ids, nil
}

func decodeNodeIDs(what string, get func(int) uint32, n int) ([]msg.NodeID, error) {
	if n == 0 {
		return nil, nil
	}
	if err := checkItems(what, n); err != nil {
		return nil, err
	}
	ids := make([]msg.NodeID, n)
	for i := range ids {
		ids[i] = msg.NodeID(get(i))
	}
	return ids, nil
}

// decodeViewRecord decodes v; a nil v (absent field) is the zero record.
func decodeViewRecord(v *fb.ViewRecord) (msg.ViewRecord, error) {
	if v == nil {
		return msg.ViewRecord{}, nil
	}
	r := msg.ViewRecord{Number: v.Number(), Leader: msg.NodeID(v.Leader()), StartGP: v.StartGp()}
	var err error
	if r.Members, err = decodeNodeIDs("members", v.Members, v.MembersLength()); err != nil {
		return msg.ViewRecord{}, err
	}
	if n := v.DedupLength(); n > 0 {
		if err := checkItems("dedup marks", n); err != nil {
			return msg.ViewRecord{}, err
		}
		r.Dedup = make([]msg.ClientMark, n)
		var cm fb.ClientMark
		for i := range r.Dedup {
			v.Dedup(&cm, i)
			d := msg.ClientMark{Client: cm.Client(), Mark: cm.Mark(), View: cm.View()}
			if k := cm.AboveLength(); k > 0 {
				if err := checkItems("above ids", k); err != nil {
					return msg.ViewRecord{}, err
				}
				d.Above = make([]uint64, k)
				for j := range d.Above {
					d.Above[j] = cm.Above(j)
				}
			}
			r.Dedup[i] = d
		}
	}
	var ch fb.ViewChange
	if c := v.Change(&ch); c != nil {
		r.Change = &msg.ViewChange{Epoch: c.Epoch(), Flusher: msg.NodeID(c.Flusher())}
		if r.Change.NewMembers, err = decodeNodeIDs("new members", c.NewMembers, c.NewMembersLength()); err != nil {
			return msg.ViewRecord{}, err
		}
	}
	return r, nil
}
