package broadside

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/anoptic/broadside/netcode/wire"
	"github.com/anoptic/broadside/replay"
)

func TestCommandRoundTrip(t *testing.T) {
	cmds := []PlayerCommand{Join(), Fire(Port), Fire(Starboard)}
	for v := -100; v <= 100; v++ {
		cmds = append(cmds, Throttle(int8(v)), Rudder(int8(v)))
	}
	for _, c := range cmds {
		b, err := EncodeCommand(c)
		if err != nil {
			t.Fatalf("%v: %v", c, err)
		}
		got, err := DecodeCommand(b)
		if err != nil || got != c {
			t.Fatalf("%v → % x → %v, %v", c, b, got, err)
		}
	}
}

func TestDecodeCommandRejects(t *testing.T) {
	for _, b := range [][]byte{
		nil,
		{},
		{0x11, 0},          // join with an argument
		{0x12},             // throttle without value
		{0x12, 101},        // throttle out of range
		{0x12, 0x9b},       // -101
		{0x13, 0x80},       // -128
		{0x13, 1, 2},       // trailing byte
		{0x14, 0},          // no side
		{0x14, 3},          // no such side
		{0x10},             // kind 0
		{0x15, 1},          // kind 5
		{0x21},             // version 2
		{0x01, 1},          // version 0
		{0xB5, 1, 0, 0, 1}, // a migration header
	} {
		if c, err := DecodeCommand(b); !errors.Is(err, ErrInvalidCommand) {
			t.Errorf("DecodeCommand(% x) = %v, %v", b, c, err)
		}
	}
	for _, c := range []PlayerCommand{{}, {Kind: KindThrottle, Value: 101}, {Kind: KindFire, Side: 9}, {Kind: KindJoin, Value: 1}, {Kind: 9}} {
		if _, err := EncodeCommand(c); !errors.Is(err, ErrInvalidCommand) {
			t.Errorf("EncodeCommand(%+v) = %v", c, err)
		}
	}
}

// FuzzDecodeCommand checks that DecodeCommand never panics and accepts
// exactly the canonical encodings. Seed corpus: testdata/fuzz/FuzzDecodeCommand.
func FuzzDecodeCommand(f *testing.F) {
	for _, c := range []PlayerCommand{Join(), Throttle(-100), Rudder(37), Fire(Starboard)} {
		b, _ := EncodeCommand(c)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := DecodeCommand(b)
		if err != nil {
			return
		}
		again, err := EncodeCommand(c)
		if wire.Identifier(b) == wire.GameCommandIdentifier {
			// A client's GameCommand maps onto the game's own encoding.
			if c2, err2 := DecodeCommand(again); err != nil || err2 != nil || c2 != c {
				t.Fatalf("% x decodes to %v, which does not survive re-encoding (%v, %v)", b, c, err, err2)
			}
			return
		}
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("% x decodes to %v which encodes to % x (%v)", b, c, again, err)
		}
	})
}

// FuzzDecodeMigration checks that the migration decoder never panics, that
// what it accepts re-encodes to the same bytes, and that a sector applying
// it keeps a consistent state. Seed corpus: testdata/fuzz/FuzzDecodeMigration.
func FuzzDecodeMigration(f *testing.F) {
	cfg := Config{Seed: 1, Width: 2000, Height: 2000, SectorsX: 2, SectorsY: 1}
	st := shipState{id: ShipID(1), player: 1, x: 1_200_000, y: 500_000, speed: 100, heading: 9, hull: 50, portReady: 3}
	f.Add(appendShipMigration(nil, 0, 1, 10, &st))
	f.Add(appendBallMigration(nil, 0, 1, 10, &ballState{id: ballID(0, 4), owner: ShipID(1), x0: 999_000, y0: 5_000, vx: 4000, spawnTick: 8, lifetime: 75}))
	geo, err := newGeometry(cfg)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var m migration
		if decodeMigration(b, geo, &m) != nil {
			return
		}
		var again []byte
		if m.kind == kindShip {
			again = appendShipMigration(nil, m.from, m.to, m.departed, &m.ship)
		} else {
			again = appendBallMigration(nil, m.from, m.to, m.departed, &m.ball)
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("% x re-encodes to % x", b, again)
		}
		s, err := NewSector(cfg, m.to)
		if err != nil {
			t.Fatal(err)
		}
		join, _ := EncodeCommand(Join())
		s.Step(1, []replay.Command{{Pos: 1, Player: 1, Payload: join}}, nil)
		s.Step(m.departed+1, []replay.Command{{Pos: 2, Payload: b}}, nil)
		s.Step(m.departed+2, nil, nil)
		if s.Hash() != s.Tables().RecomputeHash() {
			t.Fatal("hash drifted")
		}
		if err := s.Restored(); err != nil {
			t.Fatalf("state inconsistent after migration: %v", err)
		}
	})
}

func TestSinTable(t *testing.T) {
	for a := 0; a < 65536; a += 16 {
		want := math.Sin(float64(a) * 2 * math.Pi / 65536)
		got := float64(Sin(Angle(a))) / One
		if math.Abs(got-want) > 1.0/One {
			t.Fatalf("Sin(%d) = %v, want %v", a, got, want)
		}
		wantCos := math.Cos(float64(a) * 2 * math.Pi / 65536)
		if got := float64(Cos(Angle(a))) / One; math.Abs(got-wantCos) > 1.0/One {
			t.Fatalf("Cos(%d) = %v, want %v", a, got, wantCos)
		}
	}
	if Sin(Deg90) != One || Cos(0) != One || Sin(0) != 0 || Sin(Deg270) != -One {
		t.Fatal("exact values")
	}
}

func TestAtan2(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	for k := 0; k < 100000; k++ {
		x, y := int64(r.Int32N(2_000_000)-1_000_000), int64(r.Int32N(2_000_000)-1_000_000)
		if k < 8 { // the axes and diagonals
			x, y = []int64{1, 1, 0, -1, -1, -1, 0, 1}[k], []int64{0, 1, 1, 1, 0, -1, -1, -1}[k]
		}
		want := math.Atan2(float64(y), float64(x)) * 65536 / (2 * math.Pi)
		got := float64(Atan2(y, x))
		d := math.Mod(got-want+2*65536, 65536)
		if d > 32768 {
			d -= 65536
		}
		if math.Abs(d) > 17 {
			t.Fatalf("Atan2(%d, %d) = %v, want %v", y, x, got, want)
		}
	}
	if Atan2(0, 0) != 0 || Atan2(1<<62, 1<<62) != Deg90/2 {
		t.Fatal("Atan2 edge cases")
	}
}

func TestIsqrt(t *testing.T) {
	for _, n := range []uint64{0, 1, 2, 3, 4, 15, 16, 17, 1 << 40, 1<<40 - 1, math.MaxUint64} {
		r := isqrt(n)
		if r*r > n || (r+1)*(r+1) <= n && r+1 != 1<<32 {
			t.Fatalf("isqrt(%d) = %d", n, r)
		}
	}
}

func TestBotCommand(t *testing.T) {
	own := ShipView{ID: ShipID(1), Player: 1, X: 1_000_000, Y: 1_000_000, Throttle: 80}
	if _, ok := BotCommand(nil, ShipView{Sunk: true}, nil); ok {
		t.Fatal("a sunk ship gave an order")
	}
	if c, _ := BotCommand(nil, ShipView{ID: ShipID(1)}, nil); c.Kind != KindThrottle || c.Value < 50 {
		t.Fatalf("stopped ship: %v", c)
	}
	abeam := ShipView{ID: ShipID(2), X: 1_000_000, Y: 1_150_000} // 150 m north, heading east: to port
	if c, _ := BotCommand([]ShipView{own, abeam}, own, nil); c != Fire(Port) {
		t.Fatalf("target abeam to port: %v", c)
	}
	reloading := own
	reloading.PortReload = 10
	if c, ok := BotCommand([]ShipView{abeam}, reloading, nil); c.Kind == KindFire {
		t.Fatalf("fired an unloaded side: %v %v", c, ok)
	}
	south := ShipView{ID: ShipID(3), X: 1_000_000, Y: 850_000}
	if c, _ := BotCommand([]ShipView{south}, own, nil); c != Fire(Starboard) {
		t.Fatalf("target abeam to starboard: %v", c)
	}
	farNorth := ShipView{ID: ShipID(4), X: 1_000_000, Y: 3_000_000}
	if c, _ := BotCommand([]ShipView{farNorth}, own, nil); c.Kind != KindRudder || c.Value <= 0 {
		t.Fatalf("distant target to port: %v", c)
	}
	farSouth := ShipView{ID: ShipID(4), X: 1_000_000, Y: -1_000_000}
	if c, _ := BotCommand([]ShipView{farSouth, {ID: ShipID(5), Sunk: true, X: own.X, Y: own.Y + 1}}, own, nil); c.Kind != KindRudder || c.Value >= 0 {
		t.Fatalf("distant target to starboard: %v", c)
	}
}

func TestDecodeWireGameCommand(t *testing.T) {
	cases := []struct {
		in   wire.GameCommand
		want PlayerCommand
		ok   bool
	}{
		{wire.GameCommand{Seq: 1, Kind: wire.CommandJoin}, Join(), true},
		{wire.GameCommand{Seq: 2, Kind: wire.CommandThrottle, Value: 250}, Throttle(100), true},
		{wire.GameCommand{Seq: 3, Kind: wire.CommandRudder, Value: -40}, Rudder(-40), true},
		{wire.GameCommand{Seq: 4, Kind: wire.CommandFire, Side: -1}, Fire(Port), true},
		{wire.GameCommand{Seq: 5, Kind: wire.CommandFire, Side: 1}, Fire(Starboard), true},
		{wire.GameCommand{Seq: 6, Kind: wire.CommandFire}, PlayerCommand{}, false},
		{wire.GameCommand{Seq: 7, Kind: wire.CommandAck, AckTick: 3}, PlayerCommand{}, false},
	}
	for _, tc := range cases {
		got, err := DecodeCommand(wire.EncodeGameCommand(nil, tc.in))
		if (err == nil) != tc.ok || (tc.ok && got != tc.want) {
			t.Errorf("%+v: got %+v, %v", tc.in, got, err)
		}
	}
}
