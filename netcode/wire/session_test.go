package wire

import (
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
)

var sessionSamples = []SessionMessage{
	Hello{Token: "v1.abc.def", Protocol: 1},
	Hello{Token: "", Spectator: true},
	Hello{Token: "v1.abc.def", Protocol: 1, Session: 0xfeedface12345678},
	Hello{Token: "v1.abc.def", Protocol: 1, Session: 9, AcksInState: true},
	Welcome{PlayerID: 7, Player: "ada", Tick: 99, TickRate: 30, MaxCommandRate: 60},
	Welcome{PlayerID: 8, Player: "bo", TickRate: 30, World: []byte{1, 2, 3}},
	CommandResult{Seq: 12, Status: AckDurable},
	CommandResult{Seq: 13, Status: AckRateLimited},
	CommandResult{Seq: 14, Status: AckReplicated},
	CommandResult{Seq: 15, Status: AckInvalid},
	StateUpdate{Tick: 100, BaseTick: 98, LastAppliedSeq: 12, Payload: []byte{1, 2, 3}},
	StateUpdate{Tick: 1},
	StateUpdate{Tick: 101, BaseTick: 98, LastAppliedSeq: 12, Payload: []byte{4}, Acked: AckWindow{From: 13, Bits: 0b1011, Status: AckDurable}},
	StateUpdate{Tick: 102, Acked: AckWindow{From: math.MaxUint64 - 63, Bits: 1 << 63, Status: AckReplicated}},
	Goodbye{Code: 0x103, Reason: "rate limited"},
	StateAck{Tick: 12345},
}

func TestSessionRoundTrip(t *testing.T) {
	for _, m := range sessionSamples {
		b := EncodeSession(nil, m)
		if Identifier(b) != SessionIdentifier {
			t.Fatalf("%T: identifier %q", m, Identifier(b))
		}
		got, err := DecodeSession(b)
		if err != nil {
			t.Fatalf("%T: %v", m, err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Fatalf("round trip %+v -> %+v", m, got)
		}
	}
}

// TestAckStatuses checks that every status of the protocol decodes and
// that an unknown one is refused, and that replicated is never called
// durable.
func TestAckStatuses(t *testing.T) {
	for st := 0; st < 256; st++ {
		m, err := DecodeSession(EncodeSession(nil, CommandResult{Seq: 1, Status: AckStatus(st)}))
		if AckStatus(st).Valid() {
			if err != nil || m.(CommandResult).Status != AckStatus(st) {
				t.Fatalf("status %d: %v %+v", st, err, m)
			}
			continue
		}
		if !errors.Is(err, ErrMalformed) {
			t.Fatalf("unknown status %d decoded: %v %+v", st, err, m)
		}
	}
	if AckReplicated.String() != "replicated" || AckDurable.String() != "durable" || !AckReplicated.Stored() || AckRateLimited.Stored() {
		t.Fatalf("statuses: %s %s", AckReplicated, AckDurable)
	}
	if AckBusy.Stored() || AckBusy.String() != "busy" {
		t.Fatalf("busy: stored %v, %s", AckBusy.Stored(), AckBusy)
	}
	if AckStatus(5).Valid() {
		t.Fatal("status 5 is not in the schema")
	}
}

func TestSessionRejectsOtherRoots(t *testing.T) {
	gc := EncodeGameCommand(nil, GameCommand{Seq: 1, Kind: CommandFire, Side: 1})
	if _, err := DecodeSession(gc); !errors.Is(err, ErrMalformed) {
		t.Fatalf("a GameCommand decoded as a session frame: %v", err)
	}
	if Identifier(gc) != GameCommandIdentifier {
		t.Fatalf("identifier %q", Identifier(gc))
	}
}

func TestSessionRandomFlipsNeverPanic(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 20000; i++ {
		m := sessionSamples[rng.IntN(len(sessionSamples))]
		b := EncodeSession(nil, m)
		for k := 0; k < 1+rng.IntN(3); k++ {
			b[rng.IntN(len(b))] ^= byte(1 + rng.IntN(255))
		}
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("panic on %x: %v", b, r)
				}
			}()
			DecodeSession(b)
		}()
	}
}

func FuzzDecodeSession(f *testing.F) {
	for _, m := range sessionSamples {
		f.Add(EncodeSession(nil, m))
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeSession(b)
		if err != nil {
			return
		}
		again, err := DecodeSession(EncodeSession(nil, m))
		if err != nil || !reflect.DeepEqual(again, m) {
			t.Fatalf("re-encoding %+v: %v %+v", m, err, again)
		}
	})
}

// TestAppendSessionEqualsEncode: the unboxed encoders give EncodeSession's
// bytes, appended after what dst holds.
func TestAppendSessionEqualsEncode(t *testing.T) {
	prefix := []byte("xyz")
	for _, m := range sessionSamples {
		var got []byte
		switch m := m.(type) {
		case StateUpdate:
			got = AppendStateUpdate(append([]byte(nil), prefix...), m)
		case CommandResult:
			got = AppendCommandResult(append([]byte(nil), prefix...), m)
		default:
			continue
		}
		want := EncodeSession(append([]byte(nil), prefix...), m)
		if string(got) != string(want) {
			t.Fatalf("%+v: %x, EncodeSession %x", m, got, want)
		}
		if d, err := DecodeSession(got[len(prefix):]); err != nil || !reflect.DeepEqual(d, m) {
			t.Fatalf("%+v: decoded %+v, %v", m, d, err)
		}
	}
}

func BenchmarkAppendStateUpdate(b *testing.B) {
	u := StateUpdate{Tick: 100, BaseTick: 97, LastAppliedSeq: 12, Payload: make([]byte, 900)}
	b.Run("EncodeSession(nil)", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			_ = EncodeSession(nil, u)
		}
	})
	b.Run("AppendStateUpdate(reused)", func(b *testing.B) {
		b.ReportAllocs()
		var dst []byte
		for i := 0; i < b.N; i++ {
			dst = AppendStateUpdate(dst[:0], u)
		}
	})
}

// TestAckWindow: Add, Has and Results agree, the window spans 64 numbers
// from its first, and DecodeSession refuses windows that claim what no
// acknowledgement can (a refusal's status, seq 0, a wrapping range, an
// empty window with a start or a status).
func TestAckWindow(t *testing.T) {
	var w AckWindow
	if !w.Empty() || w.Has(0) || w.Has(1) {
		t.Fatalf("zero window: %+v", w)
	}
	w.Status = AckDurable
	for _, seq := range []uint64{10, 12, 73} {
		if !w.Add(seq) {
			t.Fatalf("add %d to %+v", seq, w)
		}
	}
	if w.Add(9) || w.Add(74) {
		t.Fatalf("added outside [10, 74): %+v", w)
	}
	for seq := uint64(0); seq < 200; seq++ {
		if want := seq == 10 || seq == 12 || seq == 73; w.Has(seq) != want {
			t.Fatalf("Has(%d) = %v in %+v", seq, !want, w)
		}
	}
	got := w.Results(nil)
	want := []CommandResult{{10, AckDurable}, {12, AckDurable}, {73, AckDurable}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("results %+v", got)
	}
	for _, bad := range []AckWindow{
		{From: 5, Bits: 1, Status: AckBusy},
		{From: 5, Bits: 1, Status: AckRateLimited},
		{From: 5, Bits: 1, Status: AckInvalid},
		{From: 0, Bits: 1, Status: AckDurable},
		{From: math.MaxUint64 - 62, Bits: 1, Status: AckDurable},
		{From: 5, Bits: 0, Status: 0},
		{From: 0, Bits: 0, Status: AckReplicated},
		{From: 5, Bits: 1, Status: 9},
	} {
		b := EncodeSession(nil, StateUpdate{Tick: 3, Acked: bad})
		if m, err := DecodeSession(b); !errors.Is(err, ErrMalformed) {
			t.Fatalf("window %+v decoded: %+v, %v", bad, m, err)
		}
	}
}
