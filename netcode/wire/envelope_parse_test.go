package wire

import (
	"reflect"
	"testing"

	"github.com/anoptic/broadside/netcode/wire/wiretest"
)

// checkParseEnvelope holds ParseEnvelope to VerifyEnvelope and the
// generated accessors: the same buffers accepted (by its own pass, not its
// fallback), the same error for the others, the same fields decoded.
func checkParseEnvelope(t testing.TB, b []byte) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("panic on %q: %v", b, r)
		}
	}()
	verr := VerifyEnvelope(b)
	var fast Envelope
	ok := parseEnvelope(b, &fast)
	if ok != (verr == nil) {
		t.Fatalf("parseEnvelope %v, VerifyEnvelope %v on %q", ok, verr, b)
	}
	var got Envelope
	err := ParseEnvelope(b, &got)
	if verr != nil {
		if err == nil || err.Error() != verr.Error() {
			t.Fatalf("ParseEnvelope error %v, VerifyEnvelope %v", err, verr)
		}
		return
	}
	var want Envelope
	readEnvelope(b, &want)
	if err != nil || !reflect.DeepEqual(got, want) || (got.Payload == nil) != (want.Payload == nil) {
		t.Fatalf("ParseEnvelope %q = %+v, %v; accessors %+v", b, got, err, want)
	}
}

func TestParseEnvelope(t *testing.T) {
	for _, s := range envelopeSeeds(wiretest.Fault) {
		checkParseEnvelope(t, s)
	}
	for _, e := range envelopeCases {
		checkParseEnvelope(t, EncodeEnvelope(nil, e))
	}
	// An empty payload vector is present and empty; every field at its
	// largest value.
	checkParseEnvelope(t, EncodeEnvelope(nil, Envelope{Kind: EnvelopeMigration, Tick: ^uint64(0), Player: ^uint32(0),
		ClientSeq: ^uint64(0), Shard: ^uint32(0), Payload: []byte{}, Epoch: ^uint64(0), Source: ^uint32(0)}))
}

func FuzzParseEnvelope(f *testing.F) {
	for _, s := range envelopeSeeds(wiretest.TableFault) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkParseEnvelope(t, b) })
}

// BenchmarkDecodeEnvelopeRecord decodes a player command's envelope as a
// replay does: the verifier then the generated accessors, against
// ParseEnvelope's one pass.
func BenchmarkDecodeEnvelopeRecord(b *testing.B) {
	rec := EncodeEnvelope(nil, Envelope{Kind: EnvelopePlayerCommand, Player: 17, ClientSeq: 4242, Payload: make([]byte, 40)})
	b.Run("verify+accessors", func(b *testing.B) {
		var e Envelope
		for b.Loop() {
			if err := VerifyEnvelope(rec); err != nil {
				b.Fatal(err)
			}
			readEnvelope(rec, &e)
		}
	})
	b.Run("parse", func(b *testing.B) {
		var e Envelope
		for b.Loop() {
			if err := ParseEnvelope(rec, &e); err != nil {
				b.Fatal(err)
			}
		}
	})
}
