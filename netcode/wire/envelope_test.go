package wire

import (
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/anoptic/broadside/netcode/wire/wiretest"
	"pgregory.net/rapid"
)

var envelopeCases = []Envelope{
	{},
	{Kind: EnvelopeTick, Tick: 1},
	{Kind: EnvelopePlayerCommand, Tick: 7, Player: 42, ClientSeq: 9, Shard: 3, Payload: []byte("fire port")},
	{Kind: EnvelopeMigration, Tick: 100, Shard: 2, Payload: make([]byte, 1000)},
	{Kind: EnvelopeMigration, Tick: 100, Shard: math.MaxUint32, ClientSeq: 5, Epoch: 77, Source: 3, Payload: []byte{9}},
	{Kind: EnvelopeControl, Payload: []byte{0}},
	{Kind: EnvelopeControl, Tick: math.MaxUint64, Player: math.MaxUint32, ClientSeq: math.MaxUint64,
		Shard: math.MaxUint32, Payload: []byte{1, 2, 3}, Epoch: math.MaxUint64, Source: math.MaxUint32},
}

var gameCommandCases = []GameCommand{
	{},
	{Seq: 1, Kind: CommandThrottle, Value: 3},
	{Seq: 2, Kind: CommandRudder, Value: -15},
	{Seq: 3, Kind: CommandFire, Side: -1},
	{Seq: 4, Kind: CommandJoin},
	{Seq: 5, Kind: CommandAck, AckTick: 12345},
	{Seq: 6, Kind: CommandFire, Side: 1, Player: 77},
	{Seq: 9, Kind: CommandRudder, Value: 4, Settled: 7},
	{Seq: math.MaxUint64, Kind: CommandAck, Value: math.MinInt32, Side: math.MinInt8, AckTick: math.MaxUint64},
}

func TestEnvelopeRoundTrip(t *testing.T) {
	for _, e := range envelopeCases {
		got, err := DecodeEnvelope(EncodeEnvelope(nil, e))
		if err != nil {
			t.Fatalf("%+v: %v", e, err)
		}
		if !reflect.DeepEqual(got, e) {
			t.Errorf("got %+v, want %+v", got, e)
		}
	}
}

func TestEnvelopeEmptyPayloadIsNil(t *testing.T) {
	got, err := DecodeEnvelope(EncodeEnvelope(nil, Envelope{Payload: []byte{}}))
	if err != nil || got.Payload != nil {
		t.Errorf("got %#v, %v; want nil payload", got.Payload, err)
	}
}

func TestEnvelopeAppends(t *testing.T) {
	prefix := []byte("prefix")
	b := EncodeEnvelope(append([]byte(nil), prefix...), envelopeCases[2])
	if string(b[:len(prefix)]) != string(prefix) {
		t.Fatalf("prefix overwritten: %q", b[:len(prefix)])
	}
	if got, err := DecodeEnvelope(b[len(prefix):]); err != nil || !reflect.DeepEqual(got, envelopeCases[2]) {
		t.Errorf("got %+v, %v", got, err)
	}
}

func TestDecodeEnvelopeCopiesPayload(t *testing.T) {
	b := EncodeEnvelope(nil, envelopeCases[2])
	e, err := DecodeEnvelope(b)
	if err != nil {
		t.Fatal(err)
	}
	clear(b)
	if string(e.Payload) != "fire port" {
		t.Errorf("payload aliases the buffer: %q", e.Payload)
	}
}

func TestGameCommandRoundTrip(t *testing.T) {
	for _, c := range gameCommandCases {
		got, err := DecodeGameCommand(EncodeGameCommand(nil, c))
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		if got != c {
			t.Errorf("got %+v, want %+v", got, c)
		}
	}
}

func TestEnvelopeProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		e := Envelope{
			Kind:      EnvelopeKind(rapid.IntRange(0, int(EnvelopeControl)).Draw(t, "kind")),
			Tick:      rapid.Uint64().Draw(t, "tick"),
			Player:    rapid.Uint32().Draw(t, "player"),
			ClientSeq: rapid.Uint64().Draw(t, "seq"),
			Shard:     rapid.Uint32().Draw(t, "shard"),
			Payload:   rapid.SliceOfN(rapid.Byte(), 1, 300).Draw(t, "payload"),
		}
		got, err := DecodeEnvelope(EncodeEnvelope(nil, e))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, e) {
			t.Fatalf("got %+v, want %+v", got, e)
		}
	})
}

func TestGameCommandProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := GameCommand{
			Seq:     rapid.Uint64().Draw(t, "seq"),
			Kind:    CommandKind(rapid.IntRange(0, int(CommandAck)).Draw(t, "kind")),
			Value:   rapid.Int32().Draw(t, "value"),
			Side:    rapid.Int8().Draw(t, "side"),
			AckTick: rapid.Uint64().Draw(t, "ack"),
			Player:  rapid.Uint32().Draw(t, "player"),
		}
		got, err := DecodeGameCommand(EncodeGameCommand(nil, c))
		if err != nil {
			t.Fatal(err)
		}
		if got != c {
			t.Fatalf("got %+v, want %+v", got, c)
		}
	})
}

func TestDecodeRejects(t *testing.T) {
	badEnvelope := EncodeEnvelope(nil, Envelope{Kind: 4, Tick: 1})
	badCommand := EncodeGameCommand(nil, GameCommand{Kind: 5})
	big := EncodeEnvelope(nil, Envelope{Payload: make([]byte, MaxEnvelopeSize)})
	for name, err := range map[string]error{
		"envelope kind":            second(DecodeEnvelope(badEnvelope)),
		"envelope too big":         second(DecodeEnvelope(big)),
		"command as envelope":      second(DecodeEnvelope(EncodeGameCommand(nil, gameCommandCases[1]))),
		"nil envelope":             second(DecodeEnvelope(nil)),
		"command kind":             second(DecodeGameCommand(badCommand)),
		"envelope as command":      second(DecodeGameCommand(EncodeEnvelope(nil, envelopeCases[1]))),
		"command too big":          second(DecodeGameCommand(make([]byte, MaxGameCommandSize+1))),
		"garbage as game command":  second(DecodeGameCommand([]byte("BSGCBSGCBSGCBSGC"))),
		"verify envelope, garbage": VerifyEnvelope([]byte{0xff, 0xff, 0xff, 0xff, 'B', 'S', 'E', 'V', 0, 0, 0, 0}),
	} {
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: got %v, want ErrMalformed", name, err)
		}
	}
}

func second[T any](_ T, err error) error { return err }

// TestMutationsNeverPanic runs the decoders on every structural mutation of
// valid encodings; whatever they accept must re-encode to the same value.
func TestMutationsNeverPanic(t *testing.T) {
	for _, e := range envelopeCases {
		for _, b := range wiretest.Mutations(EncodeEnvelope(nil, e)) {
			checkEnvelope(t, b)
		}
	}
	for _, c := range gameCommandCases {
		for _, b := range wiretest.Mutations(EncodeGameCommand(nil, c)) {
			checkGameCommand(t, b)
		}
	}
}

// TestRandomFlipsNeverPanic flips random bytes of valid encodings.
func TestRandomFlipsNeverPanic(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	n := 100_000
	if testing.Short() {
		n = 10_000
	}
	env, cmd := make([][]byte, len(envelopeCases)), make([][]byte, len(gameCommandCases))
	for i, e := range envelopeCases {
		env[i] = EncodeEnvelope(nil, e)
	}
	for i, c := range gameCommandCases {
		cmd[i] = EncodeGameCommand(nil, c)
	}
	for i := range n {
		flips := 1 + rng.IntN(4)
		if i%2 == 0 {
			checkEnvelope(t, wiretest.Flip(rng, env[rng.IntN(len(env))], flips))
		} else {
			checkGameCommand(t, wiretest.Flip(rng, cmd[rng.IntN(len(cmd))], flips))
		}
	}
}

// checkEnvelope asserts the envelope decoder's contract on arbitrary b: no
// panic; errors wrap ErrMalformed; an accepted buffer passed VerifyEnvelope
// and its value survives a re-encoding.
func checkEnvelope(t testing.TB, b []byte) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("panic on %q: %v", b, r)
		}
	}()
	verr := VerifyEnvelope(b)
	e, err := DecodeEnvelope(b)
	if err != nil {
		if !errors.Is(err, ErrMalformed) {
			t.Fatalf("error %v does not wrap ErrMalformed", err)
		}
		return
	}
	if verr != nil {
		t.Fatalf("DecodeEnvelope accepted %q that VerifyEnvelope rejects: %v", b, verr)
	}
	again, err := DecodeEnvelope(EncodeEnvelope(nil, e))
	if err != nil || !reflect.DeepEqual(again, e) {
		t.Fatalf("re-encoding %+v: got %+v, %v", e, again, err)
	}
}

func checkGameCommand(t testing.TB, b []byte) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("panic on %q: %v", b, r)
		}
	}()
	verr := VerifyGameCommand(b)
	c, err := DecodeGameCommand(b)
	if err != nil {
		if !errors.Is(err, ErrMalformed) {
			t.Fatalf("error %v does not wrap ErrMalformed", err)
		}
		return
	}
	if verr != nil {
		t.Fatalf("DecodeGameCommand accepted %q that VerifyGameCommand rejects: %v", b, verr)
	}
	again, err := DecodeGameCommand(EncodeGameCommand(nil, c))
	if err != nil || again != c {
		t.Fatalf("re-encoding %+v: got %+v, %v", c, again, err)
	}
}

func TestEncodeAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	dst := make([]byte, 0, 4096)
	e := envelopeCases[2]
	c := gameCommandCases[5]
	if n := testing.AllocsPerRun(100, func() { dst = EncodeEnvelope(dst[:0], e) }); n != 0 {
		t.Errorf("EncodeEnvelope: %v allocs", n)
	}
	if n := testing.AllocsPerRun(100, func() { dst = EncodeGameCommand(dst[:0], c) }); n != 0 {
		t.Errorf("EncodeGameCommand: %v allocs", n)
	}
}

func envelopeSeeds(key func(error) string) [][]byte {
	var valid, mutations [][]byte
	for _, e := range envelopeCases {
		b := EncodeEnvelope(nil, e)
		valid = append(valid, b)
		mutations = append(mutations, wiretest.Mutations(b)...)
	}
	return append(valid, wiretest.DistinctErrors(mutations, VerifyEnvelope, key, 0)...)
}

func gameCommandSeeds(key func(error) string) [][]byte {
	var valid, mutations [][]byte
	for _, c := range gameCommandCases {
		b := EncodeGameCommand(nil, c)
		valid = append(valid, b)
		mutations = append(mutations, wiretest.Mutations(b)...)
	}
	return append(valid, wiretest.DistinctErrors(mutations, VerifyGameCommand, key, 0)...)
}

func FuzzVerifyEnvelope(f *testing.F) {
	for _, s := range envelopeSeeds(wiretest.TableFault) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkEnvelope(t, b) })
}

func FuzzVerifyGameCommand(f *testing.F) {
	for _, s := range gameCommandSeeds(wiretest.TableFault) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkGameCommand(t, b) })
}

// TestWriteSeedCorpus regenerates testdata/fuzz/*/seed-* when
// BROADSIDE_WRITE_CORPUS=1.
func TestWriteSeedCorpus(t *testing.T) {
	if !wiretest.MaybeWriteCorpus(t, "FuzzVerifyEnvelope", envelopeSeeds(wiretest.Fault)) {
		t.Skip("set " + wiretest.CorpusEnv + "=1 to rewrite the seed corpora")
	}
	wiretest.MaybeWriteCorpus(t, "FuzzVerifyGameCommand", gameCommandSeeds(wiretest.Fault))
}
