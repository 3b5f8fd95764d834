package broadside

import (
	"fmt"

	"github.com/anoptic/broadside/replay/table"
)

// The sector's tables and record fields by table id, as verify names a
// divergence (bsr.Describer). The layout mirrors the record constants of
// sector.go; TestDescribeRecordLayout checks it against the sectors'
// views.
type fieldSpan struct {
	off, size int
	name      string
	signed    bool
}

var sectorLayout = map[uint32]struct {
	name   string
	fields []fieldSpan
}{
	1: {"meta", []fieldSpan{{0, 8, "tick", false}, {8, 8, "balls fired", false}, {16, 8, "ships sunk", false},
		{24, 8, "entities migrated", false}, {32, 8, "last log position", false}}},
	2: {"players", []fieldSpan{{0, 4, "player", false}, {4, 1, "fire side", false}, {5, 1, "throttle", true}, {6, 1, "rudder", true},
		{8, 4, "ship slot", false}, {16, 8, "throttle order position", false}, {24, 8, "rudder order position", false},
		{32, 8, "fire order position", false}}},
	3: {"ships", []fieldSpan{{0, 8, "id", false}, {8, 4, "player", false}, {12, 4, "player slot", false}, {16, 2, "hull", true},
		{18, 1, "sunk", false}, {24, 8, "port guns ready", false}, {32, 8, "starboard guns ready", false},
		{40, 8, "respawn tick", false}, {48, 8, "fire order handled", false}}},
	4: {"balls", []fieldSpan{{0, 8, "id", false}, {8, 8, "owner", false}, {16, 4, "x at launch", true}, {20, 4, "y at launch", true},
		{24, 4, "vx", true}, {28, 4, "vy", true}, {32, 8, "launch tick", false}, {40, 4, "lifetime", false},
		{48, 8, "departure tick", false}, {56, 8, "arrival tick", false}}},
	5: {"motion", []fieldSpan{{0, 4, "x", true}, {4, 4, "y", true}, {8, 4, "speed", true}, {12, 2, "heading", false}}},
}

// FieldValues formats a divergence's recorded and re-simulated values of
// the field at offset of a record of table tableID, if the layout knows
// it (world.Game.FieldValues).
func FieldValues(tableID uint32, offset int, want, got []byte) (string, string, bool) {
	for _, f := range sectorLayout[tableID].fields {
		if f.off != offset || f.size > len(want) || f.size > len(got) {
			continue
		}
		val := func(b []byte) string {
			var v uint64
			for i := f.size - 1; i >= 0; i-- {
				v = v<<8 | uint64(b[i])
			}
			if f.signed {
				shift := 64 - 8*f.size
				return fmt.Sprint(int64(v<<shift) >> shift)
			}
			return fmt.Sprint(v)
		}
		return val(want), val(got), true
	}
	return "", "", false
}

// DescribeRecord names the entity in slot of table tableID and the field
// at offset of its record (bsr.Describer).
func (s *Sector) DescribeRecord(tableID uint32, slot, offset int) (entity, field string) {
	lay, ok := sectorLayout[tableID]
	if !ok {
		return "", ""
	}
	row := func(id uint32) []byte {
		for _, t := range s.Tables().Tables() {
			if t.ID() == id && slot < t.Slots() {
				return t.Row(slot)
			}
		}
		return nil
	}
	le := func(b []byte, off, n int) uint64 {
		var v uint64
		for i := n - 1; i >= 0; i-- {
			v = v<<8 | uint64(b[off+i])
		}
		return v
	}
	switch tableID {
	case 1:
		entity = fmt.Sprintf("sector %d", s.Index())
	case 2:
		if r := row(2); r != nil {
			entity = fmt.Sprintf("player %d", le(r, 0, 4))
		}
	case 3, 5:
		if r := row(3); r != nil {
			entity = fmt.Sprintf("ship:%d", le(r, 8, 4))
		}
	case 4:
		if r := row(4); r != nil {
			entity = fmt.Sprintf("ball %#x", le(r, 0, 8))
		}
	}
	if entity == "" {
		entity = fmt.Sprintf("%s slot %d", lay.name, slot)
	}
	if offset < 0 {
		return entity, ""
	}
	for _, f := range lay.fields {
		if offset >= f.off && offset < f.off+f.size {
			return entity, f.name
		}
	}
	return entity, fmt.Sprintf("byte %d", offset)
}

// FieldLayout returns the sector's record layouts (the start offset of
// every field, by table id) for the field sums of recordings
// (bsr.FieldLayouter): verify then names the field that diverged.
func (s *Sector) FieldLayout() table.Layout {
	l := table.Layout{}
	for id, lay := range sectorLayout {
		offs := make([]int, len(lay.fields))
		for i, f := range lay.fields {
			offs[i] = f.off
		}
		l[id] = offs
	}
	return l
}
