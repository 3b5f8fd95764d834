package replay

import (
	"bytes"
	"testing"

	"github.com/anoptic/broadside/netcode/wire"
)

// FuzzDecodeRecord checks the runner's zero-copy envelope decoder against
// wire.DecodeEnvelope: the same verdict and the same fields on every
// input. The seed corpus is testdata/fuzz/FuzzDecodeRecord.
func FuzzDecodeRecord(f *testing.F) {
	f.Add(tickRec(7))
	f.Add(cmdRec(3, 9, []byte{0x12, 50}))
	f.Add(wire.EncodeEnvelope(nil, wire.Envelope{Kind: wire.EnvelopeMigration, Tick: 4, Shard: BroadcastShard, ClientSeq: 2, Payload: bytes.Repeat([]byte{0xB5}, 60)}))
	f.Add(wire.EncodeEnvelope(nil, wire.Envelope{Kind: wire.EnvelopeControl}))
	f.Fuzz(func(t *testing.T, b []byte) {
		want, werr := wire.DecodeEnvelope(b)
		var got wire.Envelope
		gerr := decodeRecord(b, &got)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("wire says %v, runner says %v", werr, gerr)
		}
		if werr != nil {
			return
		}
		if got.Kind != want.Kind || got.Tick != want.Tick || got.Player != want.Player || got.ClientSeq != want.ClientSeq ||
			got.Shard != want.Shard || !bytes.Equal(got.Payload, want.Payload) || (got.Payload == nil) != (want.Payload == nil) {
			t.Fatalf("decoded %+v, wire %+v", got, want)
		}
	})
}
