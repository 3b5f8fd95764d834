package replay_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/netcode/wire"
	"github.com/anoptic/broadside/replay"
)

// splitRecords cuts fuzz input into log records: a u16 length, then that
// many bytes, repeated.
func splitRecords(data []byte) []msg.Entry {
	var out []msg.Entry
	for len(data) >= 2 {
		n := int(binary.LittleEndian.Uint16(data))
		data = data[2:]
		n = min(n, len(data))
		out = append(out, msg.Entry{Pos: uint64(len(out) + 1), Record: msg.Record{ID: msg.RecordID{Client: 5, Seq: uint64(len(out) + 1)}, Data: data[:n]}})
		data = data[n:]
	}
	return out
}

func joinRecords(recs ...[]byte) []byte {
	var b []byte
	for _, r := range recs {
		b = binary.LittleEndian.AppendUint16(b, uint16(len(r)))
		b = append(b, r...)
	}
	return b
}

// fuzzSeeds are well-formed logs: joins, orders, ticks and a migration.
func fuzzSeeds() [][]byte {
	join, _ := broadside.EncodeCommand(broadside.Join())
	fire, _ := broadside.EncodeCommand(broadside.Fire(broadside.Port))
	rudder, _ := broadside.EncodeCommand(broadside.Rudder(-40))
	mig := wire.EncodeEnvelope(nil, wire.Envelope{Kind: wire.EnvelopeMigration, Tick: 2, Shard: replay.BroadcastShard,
		Payload: append([]byte{0xB5, 2, 0, 0, 1, 0, 2, 0, 0, 0, 0, 0, 0, 0}, make([]byte, 44)...)})
	return [][]byte{
		joinRecords(cmdRec(1, 1, join), cmdRec(2, 1, join), tickRec(1), cmdRec(1, 2, fire), tickRec(2), mig, cmdRec(2, 2, rudder), tickRec(3), tickRec(7)),
		joinRecords(tickRec(1), []byte("garbage"), tickRec(3), cmdRec(0, 1, join), tickRec(2)),
	}
}

// FuzzRunnerRecords feeds arbitrary log records to a Runner over a
// Broadside sector: records come from players and other servers, so
// nothing in them may crash the runner or the sim, and the same records
// must always give the same hash. The seed corpus is
// testdata/fuzz/FuzzRunnerRecords.
func FuzzRunnerRecords(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	cfg := testWorld(1)
	f.Fuzz(func(t *testing.T, data []byte) {
		entries := splitRecords(data)
		var hashes [2]uint64
		for k := range hashes {
			sec, err := broadside.NewSector(cfg, 0)
			if err != nil {
				t.Fatal(err)
			}
			r, err := replay.NewRunner(replay.RunnerConfig{Sim: sec, Source: replay.NewSliceSource(entries, 1), MaxTickGap: 64})
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Run(context.Background()); err != nil {
				t.Fatalf("runner failed on log records: %v", err)
			}
			hashes[k] = sec.Hash()
		}
		if hashes[0] != hashes[1] {
			t.Fatal("the same records gave different hashes")
		}
	})
}

// TestWriteRunnerFuzzCorpus regenerates the seed corpora of
// FuzzRunnerRecords and FuzzDecodeRecord when BROADSIDE_WRITE_CORPUS is
// set.
func TestWriteRunnerFuzzCorpus(t *testing.T) {
	if os.Getenv("BROADSIDE_WRITE_CORPUS") == "" {
		t.Skip("set BROADSIDE_WRITE_CORPUS=1 to regenerate testdata/fuzz/{FuzzRunnerRecords,FuzzDecodeRecord}")
	}
	write := func(target string, seeds [][]byte) {
		dir := filepath.Join("testdata", "fuzz", target)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for k, s := range seeds {
			body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", s)
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed%d", k)), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	write("FuzzRunnerRecords", fuzzSeeds())
	fire, _ := broadside.EncodeCommand(broadside.Fire(broadside.Starboard))
	write("FuzzDecodeRecord", [][]byte{
		tickRec(12), cmdRec(7, 3, fire),
		wire.EncodeEnvelope(nil, wire.Envelope{Kind: wire.EnvelopeMigration, Tick: 9, Shard: replay.BroadcastShard, ClientSeq: 4, Payload: make([]byte, 58)}),
		wire.EncodeEnvelope(nil, wire.Envelope{Kind: wire.EnvelopeControl, Tick: 1}),
		tickRec(12)[:10],
	})
}
