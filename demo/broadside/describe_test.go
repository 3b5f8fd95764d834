package broadside

import (
	"strconv"
	"testing"

	"github.com/anoptic/broadside/replay/world"
)

// TestDescribeRecordLayout checks the describer's record layout against
// the game's own views after a bot match: if sector.go's layout changes,
// this fails.
func TestDescribeRecordLayout(t *testing.T) {
	cfg := Config{Seed: 1, Width: 4000, Height: 4000, SectorsX: 2, SectorsY: 2, Islands: 12}
	m, err := NewBotMatch(cfg, 40, 4, world.LocalConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for range 300 {
		if err := m.Step(); err != nil {
			t.Fatal(err)
		}
	}
	balls := 0
	for i := range cfg.Sectors() {
		s := m.Sector(i)
		tables := s.Tables().Tables()
		ids := map[uint32]int{}
		for i, tb := range tables {
			ids[tb.ID()] = i
			if _, ok := sectorLayout[tb.ID()]; !ok {
				t.Fatalf("table %d is not in the describer's layout", tb.ID())
			}
			for _, f := range sectorLayout[tb.ID()].fields {
				if f.off+f.size > tb.RecordSize() {
					t.Fatalf("table %d field %s beyond its %d-byte records", tb.ID(), f.name, tb.RecordSize())
				}
			}
		}
		ships, motion, ballT := tables[ids[3]], tables[ids[5]], tables[ids[4]]
		slot := ships.NextLive(0)
		s.Ships(func(v ShipView) {
			r, mv := ships.Row(slot), motion.Row(slot)
			if r.U64(0) != uint64(v.ID) || r.U32(8) != v.Player || r.I16(16) != v.Hull || mv.I32(0) != v.X || mv.I32(4) != v.Y || mv.I32(8) != v.Speed || mv.U16(12) != uint16(v.Heading) {
				t.Fatalf("ship slot %d does not match its view %+v", slot, v)
			}
			if e, f := s.DescribeRecord(3, slot, 16); e != "ship:"+strconv.FormatUint(uint64(v.Player), 10) || f != "hull" {
				t.Fatalf("describe: %q %q", e, f)
			}
			slot = ships.NextLive(slot + 1)
		})
		slot = ballT.NextLive(0)
		s.Balls(func(v BallView) {
			r := ballT.Row(slot)
			if r.U64(0) != uint64(v.ID) || r.U64(8) != uint64(v.Owner) || r.I32(24) != v.VX || r.I32(28) != v.VY || r.U32(40) != v.Lifetime {
				t.Fatalf("ball slot %d does not match its view %+v", slot, v)
			}
			balls++
			slot = ballT.NextLive(slot + 1)
		})
	}
	if balls == 0 {
		t.Fatal("no cannonball to check")
	}
}
