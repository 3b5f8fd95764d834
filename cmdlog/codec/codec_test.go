package codec

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/netcode/wire"
	"github.com/anoptic/broadside/netcode/wire/fb"
	"github.com/anoptic/broadside/netcode/wire/wiretest"
	flatbuffers "github.com/google/flatbuffers/go"
	"pgregory.net/rapid"
)

func recs(n, size int) []msg.Record {
	rs := make([]msg.Record, n)
	for i := range rs {
		data := make([]byte, size)
		for j := range data {
			data[j] = byte(i + j)
		}
		rs[i] = msg.Record{ID: msg.RecordID{Client: uint64(i + 1), Seq: uint64(1000 + i)}, Data: data}
	}
	return rs
}

func entries(n, size int) []msg.Entry {
	es := make([]msg.Entry, n)
	for i, r := range recs(n, size) {
		es[i] = msg.Entry{Pos: uint64(100 + i), Record: r}
	}
	return es
}

var ids = []msg.RecordID{{Client: 1, Seq: 1}, {Client: 2, Seq: math.MaxUint64}, {Client: math.MaxUint64, Seq: 0}}

var fullView = msg.ViewRecord{
	Number: 7, Members: []msg.NodeID{1, 2, 3}, Leader: 2, StartGP: 999,
	Dedup: []msg.ClientMark{{Client: 9, Mark: 10, Above: []uint64{12, 15}, View: 6}, {Client: 11}},
}

var changingView = msg.ViewRecord{
	Number: 7, Members: []msg.NodeID{1, 2, 3}, Leader: 2,
	Change: &msg.ViewChange{Epoch: 8, Flusher: 3, NewMembers: []msg.NodeID{3, 4, 5}},
}

// roundTripCases holds at least one message of every kind, with empty and
// non-empty lists, nil and set ViewRecord.Change, and extreme values.
var roundTripCases = []msg.Message{
	msg.Append{},
	msg.Append{View: 3, Records: []msg.Record{}},
	msg.Append{View: 3, Records: recs(1, 100)},
	msg.Append{View: 3, Records: recs(64, 100)},
	msg.Append{View: 1, Records: []msg.Record{{ID: msg.RecordID{Client: 1, Seq: 1}}, {Data: []byte{0}}}},
	msg.Append{View: 3, Records: recs(2, 10), Floors: ids},
	msg.AppendAck{View: 3, IDs: ids},
	msg.AppendAck{},
	msg.AppendReject{View: 4, Reason: msg.RejectWrongView, IDs: ids[:1]},
	msg.AppendReject{Reason: msg.RejectSealed},
	msg.AppendReject{Reason: msg.RejectNoView, IDs: []msg.RecordID{}},
	msg.Store{Epoch: 5, Batch: 9, Entries: entries(3, 10), Truncate: true, TruncateAbove: 102},
	msg.Store{Epoch: 5, Batch: 10},
	msg.Store{Entries: []msg.Entry{{Pos: 1}}},
	msg.StoreAck{Epoch: 5, Batch: 9},
	msg.StoreReject{Epoch: 6, Batch: 9},
	msg.GC{View: 3, FromGP: 10, ToGP: 12, IDs: ids},
	msg.GC{},
	msg.GCAck{View: 3, LastOrderedGP: 12},
	msg.StableGP{Epoch: 3, GP: math.MaxUint64},
	msg.Heartbeat{View: 3, LastOrderedGP: 12, StableGP: 10},
	msg.HeartbeatAck{View: 3, LastOrderedGP: 11},
	msg.Read{ReqID: 1, From: 100, Max: math.MaxUint32},
	msg.ReadResp{ReqID: 1, Err: msg.ReadOK, StableGP: 200, Trimmed: 50, Entries: entries(5, 33)},
	msg.ReadResp{ReqID: 2, Err: msg.ReadTrimmed, Trimmed: 50},
	msg.ReadResp{ReqID: 3, Err: msg.ReadNotOwner},
	msg.CheckTail{ReqID: 77},
	msg.TailResp{ReqID: 77, OK: true, View: 3, Tail: 120, StableGP: 120},
	msg.TailResp{ReqID: 78},
	msg.Trim{ReqID: 5, UpTo: 1 << 40},
	msg.TrimAck{ReqID: 5, TrimmedTo: 1 << 40},
	msg.Seal{View: 3},
	msg.SealAck{View: 3},
	msg.StartView{View: fullView},
	msg.StartView{View: changingView},
	msg.StartView{},
	msg.StartView{View: msg.ViewRecord{Change: &msg.ViewChange{}}},
	msg.Join{},
	msg.Join{LastStartedView: 7},
	msg.CoordGet{ReqID: 1},
	msg.CoordCAS{ReqID: 2, ExpectRev: 0, View: fullView},
	msg.CoordCAS{ReqID: 3, ExpectRev: 4, View: changingView},
	msg.CoordResp{ReqID: 2, OK: true, Rev: 1, View: fullView},
	msg.CoordResp{ReqID: 3, OK: false, Rev: 4, View: changingView},
	msg.CoordResp{},
}

func TestRoundTripCoversEveryKind(t *testing.T) {
	seen := map[msg.Kind]bool{}
	for _, m := range roundTripCases {
		seen[m.Kind()] = true
	}
	for k := msg.KindAppend; k.Valid(); k++ {
		if !seen[k] {
			t.Errorf("no round-trip case for %s", k)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	for i, m := range roundTripCases {
		t.Run(fmt.Sprintf("%02d-%s", i, m.Kind()), func(t *testing.T) {
			b := Encode(nil, m)
			got, err := Decode(b)
			if err != nil {
				t.Fatal(err)
			}
			if !equalMsg(got, m) {
				t.Fatalf("got %+v\nwant %+v", got, m)
			}
			if reflect.TypeOf(got) != reflect.TypeOf(m) {
				t.Fatalf("got type %T, want %T", got, m)
			}
		})
	}
}

// TestBodyMatchesKinds checks that the wire's Body union values are the
// msg.Kind values: the kind byte on the wire is the union type.
func TestBodyMatchesKinds(t *testing.T) {
	n := 0
	for k := msg.KindAppend; k.Valid(); k++ {
		n++
		if got := fb.EnumNamesBody[fb.Body(k)]; got != k.String() {
			t.Errorf("Body %d is %q, msg.Kind %d is %s", k, got, k, k)
		}
	}
	if len(fb.EnumNamesBody) != n+1 {
		t.Errorf("Body has %d types, msg has %d kinds", len(fb.EnumNamesBody)-1, n)
	}
}

func TestEmptySlicesDecodeNil(t *testing.T) {
	m, err := Decode(Encode(nil, msg.Append{Records: []msg.Record{{Data: []byte{}}}}))
	if err != nil {
		t.Fatal(err)
	}
	if d := m.(msg.Append).Records[0].Data; d != nil {
		t.Errorf("empty Data decoded as %#v, want nil", d)
	}
	m, err = Decode(Encode(nil, msg.AppendAck{IDs: []msg.RecordID{}}))
	if err != nil || m.(msg.AppendAck).IDs != nil {
		t.Errorf("empty IDs decoded as %#v, %v", m, err)
	}
}

func TestDecodeCopies(t *testing.T) {
	want := msg.Append{View: 1, Records: recs(3, 10)}
	b := Encode(nil, want)
	m, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	clear(b)
	if !equalMsg(m, want) {
		t.Fatalf("decoded message changed with the buffer: %+v", m)
	}
	// Data slices share an arena but are capped: appending to one must not
	// clobber the next.
	got := m.(msg.Append)
	_ = append(got.Records[0].Data, 0xEE)
	if !bytes.Equal(got.Records[1].Data, want.Records[1].Data) {
		t.Errorf("append to Records[0].Data overwrote Records[1].Data")
	}
}

func TestEncodeAppends(t *testing.T) {
	m := msg.Seal{View: 9}
	b := Encode([]byte("xyz"), m)
	if string(b[:3]) != "xyz" {
		t.Fatalf("prefix overwritten")
	}
	if got, err := Decode(b[3:]); err != nil || got != m {
		t.Errorf("got %v, %v", got, err)
	}
}

func TestEncodeUnsupportedPanics(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "*msg.Seal") {
			t.Errorf("recovered %v", r)
		}
	}()
	Encode(nil, &msg.Seal{})
}

func TestEncodeAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	dst := make([]byte, 0, 64<<10)
	for _, m := range []msg.Message{msg.Append{View: 1, Records: recs(64, 100)}, msg.StartView{View: fullView}, msg.Join{}} {
		Encode(dst[:0], m) // warm the pool
		if n := testing.AllocsPerRun(100, func() { dst = Encode(dst[:0], m) }); n != 0 {
			t.Errorf("Encode(%s): %v allocs per call, want 0", m.Kind(), n)
		}
	}
}

// equalMsg compares messages as Decode promises to preserve them: deeply,
// with nil and empty slices equal.
func equalMsg(a, b msg.Message) bool {
	return equalValue(reflect.ValueOf(a), reflect.ValueOf(b))
}

func equalValue(a, b reflect.Value) bool {
	if a.Type() != b.Type() {
		return false
	}
	switch a.Kind() {
	case reflect.Slice:
		if a.Len() != b.Len() {
			return false
		}
		for i := range a.Len() {
			if !equalValue(a.Index(i), b.Index(i)) {
				return false
			}
		}
		return true
	case reflect.Pointer:
		if a.IsNil() || b.IsNil() {
			return a.IsNil() == b.IsNil()
		}
		return equalValue(a.Elem(), b.Elem())
	case reflect.Struct:
		for i := range a.NumField() {
			if !equalValue(a.Field(i), b.Field(i)) {
				return false
			}
		}
		return true
	default:
		return a.Equal(b)
	}
}

// Property: Decode(Encode(m)) == m for random messages of every kind.

func genRecordID(t *rapid.T) msg.RecordID {
	return msg.RecordID{Client: rapid.Uint64().Draw(t, "client"), Seq: rapid.Uint64().Draw(t, "seq")}
}

func genData(t *rapid.T) []byte {
	return rapid.SliceOfN(rapid.Byte(), 0, 200).Draw(t, "data")
}

var (
	genIDs     = rapid.SliceOfN(rapid.Custom(genRecordID), 0, 10)
	genNodeIDs = rapid.SliceOfN(rapid.Map(rapid.Uint32(), func(x uint32) msg.NodeID { return msg.NodeID(x) }), 0, 7)
	genRecords = rapid.SliceOfN(rapid.Custom(func(t *rapid.T) msg.Record {
		return msg.Record{ID: genRecordID(t), Data: genData(t)}
	}), 0, 10)
	genEntries = rapid.SliceOfN(rapid.Custom(func(t *rapid.T) msg.Entry {
		return msg.Entry{Pos: rapid.Uint64().Draw(t, "pos"), Record: msg.Record{ID: genRecordID(t), Data: genData(t)}}
	}), 0, 10)
	genView = rapid.Custom(func(t *rapid.T) msg.ViewRecord {
		v := msg.ViewRecord{
			Number:  rapid.Uint64().Draw(t, "number"),
			Members: genNodeIDs.Draw(t, "members"),
			Leader:  msg.NodeID(rapid.Uint32().Draw(t, "leader")),
			StartGP: rapid.Uint64().Draw(t, "startGP"),
			Dedup: rapid.SliceOfN(rapid.Custom(func(t *rapid.T) msg.ClientMark {
				return msg.ClientMark{Client: rapid.Uint64().Draw(t, "client"), Mark: rapid.Uint64().Draw(t, "mark"),
					Above: rapid.SliceOfN(rapid.Uint64(), 0, 5).Draw(t, "above"), View: rapid.Uint64().Draw(t, "lease")}
			}), 0, 5).Draw(t, "dedup"),
		}
		if rapid.Bool().Draw(t, "changing") {
			v.Change = &msg.ViewChange{Epoch: rapid.Uint64().Draw(t, "epoch"),
				Flusher: msg.NodeID(rapid.Uint32().Draw(t, "flusher")), NewMembers: genNodeIDs.Draw(t, "new")}
		}
		return v
	})
)

func genMessage(t *rapid.T) msg.Message {
	u64 := func(label string) uint64 { return rapid.Uint64().Draw(t, label) }
	switch k := msg.Kind(rapid.IntRange(int(msg.KindAppend), int(msg.KindCoordResp)).Draw(t, "kind")); k {
	case msg.KindAppend:
		return msg.Append{View: u64("view"), Records: genRecords.Draw(t, "records"), Floors: genIDs.Draw(t, "floors")}
	case msg.KindAppendAck:
		return msg.AppendAck{View: u64("view"), IDs: genIDs.Draw(t, "ids")}
	case msg.KindAppendReject:
		return msg.AppendReject{View: u64("view"), IDs: genIDs.Draw(t, "ids"),
			Reason: msg.RejectReason(rapid.IntRange(int(msg.RejectWrongView), int(msg.RejectNoView)).Draw(t, "reason"))}
	case msg.KindStore:
		return msg.Store{Epoch: u64("epoch"), Batch: u64("batch"), Entries: genEntries.Draw(t, "entries"),
			Truncate: rapid.Bool().Draw(t, "truncate"), TruncateAbove: u64("above")}
	case msg.KindStoreAck:
		return msg.StoreAck{Epoch: u64("epoch"), Batch: u64("batch")}
	case msg.KindStoreReject:
		return msg.StoreReject{Epoch: u64("epoch"), Batch: u64("batch")}
	case msg.KindGC:
		return msg.GC{View: u64("view"), FromGP: u64("from"), ToGP: u64("to"), IDs: genIDs.Draw(t, "ids")}
	case msg.KindGCAck:
		return msg.GCAck{View: u64("view"), LastOrderedGP: u64("gp")}
	case msg.KindStableGP:
		return msg.StableGP{Epoch: u64("epoch"), GP: u64("gp")}
	case msg.KindHeartbeat:
		return msg.Heartbeat{View: u64("view"), LastOrderedGP: u64("gp"), StableGP: u64("stable")}
	case msg.KindHeartbeatAck:
		return msg.HeartbeatAck{View: u64("view"), LastOrderedGP: u64("gp")}
	case msg.KindRead:
		return msg.Read{ReqID: u64("req"), From: u64("from"), Max: rapid.Uint32().Draw(t, "max")}
	case msg.KindReadResp:
		return msg.ReadResp{ReqID: u64("req"), Err: msg.ReadErr(rapid.IntRange(0, int(msg.ReadNotOwner)).Draw(t, "err")),
			StableGP: u64("stable"), Trimmed: u64("trimmed"), Entries: genEntries.Draw(t, "entries")}
	case msg.KindCheckTail:
		return msg.CheckTail{ReqID: u64("req")}
	case msg.KindTailResp:
		return msg.TailResp{ReqID: u64("req"), OK: rapid.Bool().Draw(t, "ok"), View: u64("view"), Tail: u64("tail"),
			StableGP: u64("stable")}
	case msg.KindTrim:
		return msg.Trim{ReqID: u64("req"), UpTo: u64("upTo")}
	case msg.KindTrimAck:
		return msg.TrimAck{ReqID: u64("req"), TrimmedTo: u64("to")}
	case msg.KindSeal:
		return msg.Seal{View: u64("view")}
	case msg.KindSealAck:
		return msg.SealAck{View: u64("view")}
	case msg.KindStartView:
		return msg.StartView{View: genView.Draw(t, "view")}
	case msg.KindJoin:
		return msg.Join{LastStartedView: u64("view")}
	case msg.KindCoordGet:
		return msg.CoordGet{ReqID: u64("req")}
	case msg.KindCoordCAS:
		return msg.CoordCAS{ReqID: u64("req"), ExpectRev: u64("rev"), View: genView.Draw(t, "view")}
	case msg.KindCoordResp:
		return msg.CoordResp{ReqID: u64("req"), OK: rapid.Bool().Draw(t, "ok"), Rev: u64("rev"), View: genView.Draw(t, "view")}
	default:
		panic(fmt.Sprintf("kind %s", k))
	}
}

func TestRoundTripProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := genMessage(t)
		prefix := rapid.SliceOfN(rapid.Byte(), 0, 9).Draw(t, "prefix")
		b := Encode(append([]byte(nil), prefix...), m)
		if !bytes.Equal(b[:len(prefix)], prefix) {
			t.Fatalf("Encode overwrote dst")
		}
		got, err := Decode(b[len(prefix):])
		if err != nil {
			t.Fatalf("Decode(Encode(%+v)): %v", m, err)
		}
		if !equalMsg(got, m) {
			t.Fatalf("got %+v\nwant %+v", got, m)
		}
		shared, err := DecodeShared(b[len(prefix):])
		if err != nil || !equalMsg(shared, m) {
			t.Fatalf("DecodeShared: got %+v, %v\nwant %+v", shared, err, m)
		}
	})
}

// Malformed input.

// buildFrame finishes a Frame with the given body in b.
func buildFrame(b *flatbuffers.Builder, typ fb.Body, body flatbuffers.UOffsetT) []byte {
	fb.FrameStart(b)
	fb.FrameAddBody(b, body)
	fb.FrameAddBodyType(b, typ)
	b.FinishWithFileIdentifier(fb.FrameEnd(b), []byte(wire.FrameIdentifier))
	return b.FinishedBytes()
}

// sharedRecords builds an Append whose n record offsets all point to one
// record with size bytes of data: a small buffer that would decode to n*size
// bytes.
func sharedRecords(n, size int) []byte {
	b := flatbuffers.NewBuilder(0)
	data := b.CreateByteVector(make([]byte, size))
	fb.RecordStart(b)
	fb.RecordAddData(b, data)
	rec := fb.RecordEnd(b)
	fb.AppendStartRecordsVector(b, n)
	for range n {
		b.PrependUOffsetT(rec)
	}
	vec := b.EndVector(n)
	fb.AppendStart(b)
	fb.AppendAddRecords(b, vec)
	return buildFrame(b, fb.BodyAppend, fb.AppendEnd(b))
}

func TestDecodeRejects(t *testing.T) {
	manyIDs := make([]msg.RecordID, MaxItems+1)
	bigData := []msg.Record{{Data: make([]byte, MaxRecordData+1)}}
	withReason := func(r msg.RejectReason) []byte { return Encode(nil, msg.AppendReject{Reason: r}) }
	noBody := func() []byte {
		b := flatbuffers.NewBuilder(0)
		fb.FrameStart(b)
		b.FinishWithFileIdentifier(fb.FrameEnd(b), []byte(wire.FrameIdentifier))
		return b.FinishedBytes()
	}()
	for _, c := range []struct {
		name string
		b    []byte
		want string
	}{
		{"nil", nil, "too short"},
		{"too large", make([]byte, MaxMessageSize+1), "MaxMessageSize"},
		{"envelope, not frame", wire.EncodeEnvelope(nil, wire.Envelope{Tick: 1}), "file identifier"},
		{"no body", noBody, "no body"},
		{"too many ids", Encode(nil, msg.AppendAck{IDs: manyIDs}), "MaxItems"},
		{"too much data", Encode(nil, msg.Append{Records: bigData}), "MaxRecordData"},
		{"reject reason 0", withReason(0), "reject reason"},
		{"reject reason 5", withReason(5), "reject reason"},
		{"read error 3", Encode(nil, msg.ReadResp{Err: 3}), "read error"},
		{"shared records", sharedRecords(1000, 100), "shared"},
	} {
		m, err := Decode(c.b)
		if err == nil || !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, %v; want error containing %q wrapping ErrMalformed", c.name, m, err, c.want)
		}
	}
}

// checkDecode asserts Decode's contract on arbitrary bytes: no panic; errors
// wrap ErrMalformed; whatever it accepts passed VerifyFrame and survives a
// re-encoding unchanged.
func checkDecode(t testing.TB, b []byte) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("Decode panicked on %q: %v", b, r)
		}
	}()
	m, err := Decode(b)
	if sm, serr := DecodeShared(b); (serr == nil) != (err == nil) || (err == nil && !equalMsg(sm, m)) {
		t.Fatalf("DecodeShared disagrees with Decode on %q: %+v, %v against %+v, %v", b, sm, serr, m, err)
	}
	if err != nil {
		if !errors.Is(err, ErrMalformed) {
			t.Fatalf("error %v does not wrap ErrMalformed", err)
		}
		return
	}
	if verr := wire.VerifyFrame(b); verr != nil {
		t.Fatalf("Decode accepted %q that VerifyFrame rejects: %v", b, verr)
	}
	again, err := Decode(Encode(nil, m))
	if err != nil || !equalMsg(again, m) {
		t.Fatalf("re-encoding %+v: got %+v, %v", m, again, err)
	}
}

// validEncodings are small valid frames of every kind, for mutation.
func validEncodings() [][]byte {
	var out [][]byte
	for _, m := range roundTripCases {
		if b := Encode(nil, m); len(b) <= 2048 {
			out = append(out, b)
		}
	}
	return out
}

func TestMutationsNeverPanic(t *testing.T) {
	n := 0
	for _, b := range validEncodings() {
		for _, mb := range wiretest.Mutations(b) {
			checkDecode(t, mb)
			n++
		}
	}
	t.Logf("%d mutations", n)
}

// TestRandomFlipsNeverPanic flips 1 to 4 random bytes of valid encodings
// 100,000 times (10,000 with -short).
func TestRandomFlipsNeverPanic(t *testing.T) {
	n := 100_000
	if testing.Short() {
		n = 10_000
	}
	rng := rand.New(rand.NewPCG(7, 11))
	valid := validEncodings()
	for range n {
		checkDecode(t, wiretest.Flip(rng, valid[rng.IntN(len(valid))], 1+rng.IntN(4)))
	}
}

// fuzzSeeds returns valid encodings and one mutation of them per distinct
// key(Decode error).
func fuzzSeeds(key func(error) string) [][]byte {
	valid := validEncodings()
	var mutations [][]byte
	for _, b := range valid {
		mutations = append(mutations, wiretest.Mutations(b)...)
	}
	return append(valid, wiretest.DistinctErrors(mutations, func(b []byte) error {
		_, err := Decode(b)
		return err
	}, key, 0)...)
}

func FuzzDecode(f *testing.F) {
	for _, s := range fuzzSeeds(wiretest.TableFault) {
		f.Add(s)
	}
	f.Add(sharedRecords(1000, 100))
	f.Fuzz(func(t *testing.T, b []byte) { checkDecode(t, b) })
}

// TestWriteSeedCorpus regenerates testdata/fuzz/FuzzDecode/seed-* when
// BROADSIDE_WRITE_CORPUS=1.
func TestWriteSeedCorpus(t *testing.T) {
	if !wiretest.MaybeWriteCorpus(t, "FuzzDecode", fuzzSeeds(wiretest.Fault)) {
		t.Skip("set " + wiretest.CorpusEnv + "=1 to rewrite the seed corpus")
	}
}

// Benchmarks.

func BenchmarkEncodeAppend(b *testing.B) {
	for _, n := range []int{1, 64} {
		// Boxed once: cores hand messages around as msg.Message already, and
		// boxing a msg.Append would cost the benchmark an allocation per call.
		var m msg.Message = msg.Append{View: 3, Records: recs(n, 100)}
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) {
			dst := Encode(nil, m)
			b.SetBytes(int64(len(dst)))
			b.ReportAllocs()
			for b.Loop() {
				dst = Encode(dst[:0], m)
			}
		})
	}
}

func BenchmarkDecodeAppend(b *testing.B) {
	for _, n := range []int{1, 64} {
		buf := Encode(nil, msg.Append{View: 3, Records: recs(n, 100)})
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) {
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Decode(buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkVerifyAppend(b *testing.B) {
	for _, n := range []int{1, 64} {
		buf := Encode(nil, msg.Append{View: 3, Records: recs(n, 100)})
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) {
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			for b.Loop() {
				if err := wire.VerifyFrame(buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestVtableOffsets checks the decoder's vtable offsets against the
// generated accessors.
func TestVtableOffsets(t *testing.T) {
	body := func(m msg.Message) flatbuffers.Table {
		b := Encode(nil, m)
		var f fb.Frame
		f.Init(b, flatbuffers.GetUOffsetT(b))
		var tab flatbuffers.Table
		if !f.Body(&tab) {
			t.Fatalf("%s: no body", m.Kind())
		}
		return tab
	}
	check := func(name string, tab flatbuffers.Table, vt flatbuffers.VOffsetT, want int) {
		if _, n := vectorField(tab, vt); n != want || want == 0 {
			t.Errorf("%s: vtable offset %d gives %d elements, accessor %d", name, vt, n, want)
		}
	}
	var (
		app fb.Append
		ack fb.AppendAck
		rej fb.AppendReject
		st  fb.Store
		gc  fb.GC
		rr  fb.ReadResp
	)
	tab := body(msg.Append{Records: recs(3, 1)})
	app.Init(tab.Bytes, tab.Pos)
	check("Append.records", tab, vtAppendRecords, app.RecordsLength())
	tab = body(msg.Append{Records: recs(1, 1), Floors: ids})
	app.Init(tab.Bytes, tab.Pos)
	check("Append.floors", tab, vtAppendFloors, app.FloorsLength())
	tab = body(msg.AppendAck{IDs: ids})
	ack.Init(tab.Bytes, tab.Pos)
	check("AppendAck.ids", tab, vtAppendAckIDs, ack.IdsLength())
	tab = body(msg.AppendReject{IDs: ids, Reason: msg.RejectSealed})
	rej.Init(tab.Bytes, tab.Pos)
	check("AppendReject.ids", tab, vtAppendRejectIDs, rej.IdsLength())
	tab = body(msg.Store{Entries: entries(2, 1)})
	st.Init(tab.Bytes, tab.Pos)
	check("Store.entries", tab, vtStoreEntries, st.EntriesLength())
	tab = body(msg.GC{IDs: ids})
	gc.Init(tab.Bytes, tab.Pos)
	check("GC.ids", tab, vtGCIDs, gc.IdsLength())
	tab = body(msg.ReadResp{Entries: entries(4, 1)})
	rr.Init(tab.Bytes, tab.Pos)
	check("ReadResp.entries", tab, vtReadRespEntries, rr.EntriesLength())
}

// TestEncodeToRefusesWhatDecodeRejects: EncodeTo never writes a message
// that Decode would reject for its lists or size (issue 16, finding 6: a
// view record with more than MaxItems dedup marks was written and could
// not be read back).
func TestEncodeToRefusesWhatDecodeRejects(t *testing.T) {
	marks := make([]msg.ClientMark, MaxItems+1)
	for i := range marks {
		marks[i] = msg.ClientMark{Client: uint64(i + 1), Mark: 1}
	}
	big := msg.ViewRecord{Number: 2, Members: []msg.NodeID{1}, Leader: 1, Dedup: marks}
	for _, m := range []msg.Message{msg.StartView{View: big}, msg.CoordCAS{View: big}, msg.CoordResp{View: big},
		msg.Append{Records: []msg.Record{{Data: make([]byte, MaxRecordData+1)}}}} {
		// Decode rejects it...
		if _, err := Decode(Encode(nil, m)); err == nil {
			t.Fatalf("%s: Decode accepted an over-limit message", m.Kind())
		}
		// ...so EncodeTo refuses it without writing.
		wrote := false
		err := EncodeTo(m, func([]byte) error { wrote = true; return nil })
		if !errors.Is(err, ErrTooLarge) || wrote {
			t.Fatalf("%s: EncodeTo = %v, wrote %v; want ErrTooLarge, nothing written", m.Kind(), err, wrote)
		}
	}
	ok := msg.StartView{View: msg.ViewRecord{Number: 2, Members: []msg.NodeID{1}, Leader: 1, Dedup: marks[:MaxItems]}}
	if err := EncodeTo(ok, func([]byte) error { return nil }); err != nil {
		t.Fatalf("EncodeTo at the limit: %v", err)
	}
}

// TestEncodeFramed: the frame EncodeFramed writes is the encoding's length
// (4 bytes, big-endian) and then exactly what Encode gives, for every kind
// and for sizes around the builder's buffer growth.
func TestEncodeFramed(t *testing.T) {
	cases := slices.Clone(roundTripCases)
	for n := 900; n < 1100; n += 7 {
		cases = append(cases, msg.Append{View: 1, Records: recs(1, n)})
	}
	for _, m := range cases {
		want := Encode(nil, m)
		var got []byte
		if err := EncodeFramed(m, func(frame []byte) error { got = slices.Clone(frame); return nil }); err != nil {
			t.Fatalf("%s: %v", m.Kind(), err)
		}
		if len(got) != FrameHeader+len(want) || binary.BigEndian.Uint32(got) != uint32(len(want)) || !bytes.Equal(got[FrameHeader:], want) {
			t.Fatalf("%s: frame of %d bytes, header %x; want %d bytes of encoding behind its length", m.Kind(), len(got), got[:min(len(got), FrameHeader)], len(want))
		}
	}
}
