package codec

import (
	"math/rand/v2"
	"testing"

	"github.com/anoptic/broadside/cmdlog/msg"
)

// TestDecodeLargeMixedReadResp: a read response of hundreds of entries,
// some with empty data, is accepted (a budget that charged table sizes
// rejected such legitimate buffers once).
func TestDecodeLargeMixedReadResp(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 200; trial++ {
		n := 1 + rng.IntN(300)
		m := msg.ReadResp{ReqID: 1, StableGP: 5}
		for i := 0; i < n; i++ {
			m.Entries = append(m.Entries, msg.Entry{Pos: uint64(i + 1), Record: msg.Record{
				ID: msg.RecordID{Client: rng.Uint64(), Seq: uint64(i)}, Data: make([]byte, rng.IntN(3)*rng.IntN(120))}})
		}
		b := Encode(nil, m)
		if _, err := Decode(b); err != nil {
			t.Fatalf("n=%d len=%d: %v", n, len(b), err)
		}
	}
}
