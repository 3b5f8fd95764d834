package broadside

import (
	"fmt"
	"slices"

	"github.com/anoptic/broadside/lineage"
)

// applyDeltaReference is applyDelta as it was before it merged in one
// pass (session 17): decode the changes, then merge them with the base.
// The tests and fuzz targets check that applyDelta accepts exactly the
// updates it accepts and rebuilds the same frames.
func applyDeltaReference(base *Frame, tick uint64, payload []byte, sc *deltaScratch, reuse *Frame) (*Frame, error) {
	if sc == nil {
		sc = &deltaScratch{}
	}
	r := &stateReader{b: payload}
	if v := r.byte1(); r.err == nil && v != stateFormat {
		return nil, fmt.Errorf("%w: format %d, want %d", ErrBadState, v, stateFormat)
	}
	var dt uint64
	var baseShips []ShipView
	var baseBalls []BallView
	if base != nil {
		if tick <= base.Tick {
			return nil, fmt.Errorf("%w: tick %d is not after base tick %d", ErrBadState, tick, base.Tick)
		}
		dt = tick - base.Tick
		baseShips, baseBalls = base.Ships, base.Balls
	}
	out := &Frame{Tick: tick}
	var shipsMem []ShipView
	var ballsMem []BallView
	if reuse != nil {
		shipsMem, ballsMem = reuse.Ships[:0], reuse.Balls[:0]
		*reuse = Frame{Tick: tick}
		out = reuse
	}

	removed := r.ids(sc.removed[:0], maxStateShips)
	n := int(r.uvarint(maxStateShips))
	ships := slices.Grow(sc.ships[:0], min(n, len(r.b)))
	defer func() { sc.ships = ships[:0] }()
	var prev lineage.EntityID
	bi := 0
	for k := 0; k < n && r.err == nil; k++ {
		d := r.uvarint(1<<63 - 1)
		if k > 0 && d == 0 || uint64(prev)+d < uint64(prev) {
			r.fail("ship ids not increasing")
			break
		}
		prev += lineage.EntityID(d)
		mask := r.byte1()
		var b ShipView
		for bi < len(baseShips) && baseShips[bi].ID < prev {
			bi++
		}
		if mask&shipFull != 0 {
			if mask != shipFull {
				r.fail("full ship with other mask bits")
				break
			}
			mask = 0xFE
		} else {
			if bi == len(baseShips) || baseShips[bi].ID != prev {
				r.fail("change to ship %d not in the base", prev)
				break
			}
			b = carried(baseShips[bi], dt)
		}
		v := b
		v.ID = prev
		if mask&shipIdentity != 0 {
			v.Player = uint32(r.uvarint(1<<32 - 1))
			v.Sector = int(r.uvarint(16 * 16))
		}
		if mask&shipPos != 0 {
			v.X = int32(r.varint(int64(-1<<31)-int64(b.X), int64(1<<31-1)-int64(b.X)) + int64(b.X))
			v.Y = int32(r.varint(int64(-1<<31)-int64(b.Y), int64(1<<31-1)-int64(b.Y)) + int64(b.Y))
		}
		if mask&shipHeading != 0 {
			v.Heading = b.Heading + Angle(int16(r.varint(-1<<15, 1<<15-1)))
		}
		if mask&shipSpeed != 0 {
			v.Speed = int32(r.varint(int64(-1<<31)-int64(b.Speed), int64(1<<31-1)-int64(b.Speed)) + int64(b.Speed))
		}
		if mask&shipHull != 0 {
			v.Hull = int16(r.varint(-1<<15, 1<<15-1))
			switch r.byte1() {
			case 0:
				v.Sunk = false
			case 1:
				v.Sunk = true
			default:
				r.fail("sunk flag not 0 or 1")
			}
		}
		if mask&shipOrders != 0 {
			v.Throttle, v.Rudder = int8(r.byte1()), int8(r.byte1())
		}
		if mask&shipReload != 0 {
			v.PortReload = uint32(r.uvarint(1<<32 - 1))
			v.StarboardReload = uint32(r.uvarint(1<<32 - 1))
		}
		ships = append(ships, v)
	}
	if r.err != nil {
		return nil, r.err
	}
	// Merge: base ships not removed carry over; updated ones replace.
	out.Ships = slices.Grow(shipsMem, len(baseShips)+len(ships))
	ri, ui := 0, 0
	for _, b := range baseShips {
		if ri < len(removed) && removed[ri] < b.ID {
			return nil, fmt.Errorf("%w: removed ship %d not in the base", ErrBadState, removed[ri])
		}
		for ui < len(ships) && ships[ui].ID < b.ID {
			out.Ships = append(out.Ships, ships[ui])
			ui++
		}
		if ri < len(removed) && removed[ri] == b.ID {
			ri++
			if ui < len(ships) && ships[ui].ID == b.ID {
				return nil, fmt.Errorf("%w: ship %d both removed and updated", ErrBadState, b.ID)
			}
			continue
		}
		if ui < len(ships) && ships[ui].ID == b.ID {
			out.Ships = append(out.Ships, ships[ui])
			ui++
			continue
		}
		out.Ships = append(out.Ships, carried(b, dt))
	}
	if ri < len(removed) {
		return nil, fmt.Errorf("%w: removed ship %d not in the base", ErrBadState, removed[ri])
	}
	out.Ships = append(out.Ships, ships[ui:]...)
	if len(out.Ships) > maxStateShips {
		return nil, fmt.Errorf("%w: %d ships", ErrBadState, len(out.Ships))
	}

	removed = r.ids(removed[:0], maxStateBalls)
	defer func() { sc.removed = removed[:0] }()
	n = int(r.uvarint(maxStateBalls))
	balls := slices.Grow(sc.balls[:0], min(n, len(r.b)))
	defer func() { sc.balls = balls[:0] }()
	prev = 0
	for k := 0; k < n && r.err == nil; k++ {
		d := r.uvarint(1<<63 - 1)
		if k > 0 && d == 0 || uint64(prev)+d < uint64(prev) {
			r.fail("ball ids not increasing")
			break
		}
		prev += lineage.EntityID(d)
		v := BallView{ID: prev}
		v.Owner = lineage.EntityID(r.uvarint(1<<63 - 1))
		v.Sector = int(r.uvarint(16 * 16))
		v.X = int32(r.varint(-1<<31, 1<<31-1))
		v.Y = int32(r.varint(-1<<31, 1<<31-1))
		v.VX = int32(r.varint(-1<<31, 1<<31-1))
		v.VY = int32(r.varint(-1<<31, 1<<31-1))
		v.Age = uint32(r.uvarint(1<<32 - 1))
		v.Lifetime = uint32(r.uvarint(1<<32 - 1))
		balls = append(balls, v)
	}
	if r.err != nil {
		return nil, r.err
	}
	if len(r.b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the update", ErrBadState, len(r.b))
	}
	out.Balls = slices.Grow(ballsMem, len(baseBalls)+len(balls))
	ri, ui = 0, 0
	for _, b := range baseBalls {
		if ri < len(removed) && removed[ri] < b.ID {
			return nil, fmt.Errorf("%w: removed ball %d not in the base", ErrBadState, removed[ri])
		}
		for ui < len(balls) && balls[ui].ID < b.ID {
			out.Balls = append(out.Balls, balls[ui])
			ui++
		}
		if ri < len(removed) && removed[ri] == b.ID {
			ri++
			continue
		}
		if ui < len(balls) && balls[ui].ID == b.ID {
			return nil, fmt.Errorf("%w: new ball %d already in the base", ErrBadState, b.ID)
		}
		out.Balls = append(out.Balls, flown(b, dt))
	}
	if ri < len(removed) {
		return nil, fmt.Errorf("%w: removed ball %d not in the base", ErrBadState, removed[ri])
	}
	out.Balls = append(out.Balls, balls[ui:]...)
	if len(out.Balls) > maxStateBalls {
		return nil, fmt.Errorf("%w: %d balls", ErrBadState, len(out.Balls))
	}
	return out, nil
}
