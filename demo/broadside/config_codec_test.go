package broadside

import (
	"errors"
	"testing"
)

func TestConfigBinaryRoundTrip(t *testing.T) {
	for _, c := range []Config{
		DefaultConfig(),
		{Seed: 1<<63 + 5, Width: 1000, Height: 100_000, SectorsX: 1, SectorsY: 16, Islands: 0},
		{Seed: 7, Width: 8000, Height: 8000, SectorsX: 16, SectorsY: 16, Islands: 1000, MaxPlayers: 1 << 20, MaxBallsPerSector: 1 << 22},
	} {
		b, err := c.MarshalBinary()
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		var d Config
		if err := d.UnmarshalBinary(b); err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		if d != c {
			t.Fatalf("round trip: %+v, want %+v", d, c)
		}
	}
}

func TestConfigMarshalRejectsInvalid(t *testing.T) {
	bad := DefaultConfig()
	bad.SectorsX = 0
	if _, err := bad.MarshalBinary(); err == nil {
		t.Fatal("an invalid config was encoded")
	}
}

func TestConfigUnmarshalRejects(t *testing.T) {
	good, err := DefaultConfig().MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	mutate := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	cases := map[string][]byte{
		"empty":          nil,
		"short":          good[:39],
		"long":           append(append([]byte(nil), good...), 0),
		"magic":          mutate(func(b []byte) []byte { b[0] = 'X'; return b }),
		"version":        mutate(func(b []byte) []byte { b[4] = 2; return b }),
		"reserved":       mutate(func(b []byte) []byte { b[6] = 1; return b }),
		"zero sectors":   mutate(func(b []byte) []byte { b[24], b[25] = 0, 0; return b }),
		"tiny world":     mutate(func(b []byte) []byte { b[16], b[17], b[18], b[19] = 1, 0, 0, 0; return b }),
		"negative width": mutate(func(b []byte) []byte { b[19] = 0x80; return b }),
		"huge islands":   mutate(func(b []byte) []byte { b[31] = 0xff; return b }),
	}
	for name, b := range cases {
		c := DefaultConfig()
		c.Seed = 99
		if err := c.UnmarshalBinary(b); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%s: err = %v, want ErrBadConfig", name, err)
		}
		if c.Seed != 99 {
			t.Errorf("%s: config changed on error", name)
		}
	}
}

func FuzzConfigUnmarshal(f *testing.F) {
	good, _ := DefaultConfig().MarshalBinary()
	f.Add(good)
	f.Add([]byte("BSCF"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var c Config
		if err := c.UnmarshalBinary(b); err != nil {
			return
		}
		again, err := c.MarshalBinary()
		if err != nil {
			t.Fatalf("decoded config does not re-encode: %v", err)
		}
		var d Config
		if err := d.UnmarshalBinary(again); err != nil || d != c {
			t.Fatalf("re-encoding does not round trip: %v %+v %+v", err, d, c)
		}
	})
}
