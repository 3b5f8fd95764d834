package broadside

import "math"

// grid is a sector's uniform spatial grid. Ships are bucketed into it once
// per tick (a list per cell, threaded through the ships' entries: work in
// proportion to the ships, not the cells, and no allocation after the first
// ticks) so that each cannonball tests only the ships of the few cells its
// path touches. Islands are bucketed once, at creation. Points outside
// the grid are clamped to its edge cells, so nothing is ever missed, only
// searched more slowly.
type grid struct {
	x0, y0 int64 // origin, mm
	shift  uint  // cell side is 1<<shift mm
	nx, ny int

	// Ships of the current tick. ships is indexed by ship slot and kept
	// from tick to tick: a ship that stays in its cell and its fine box
	// (most ships, most ticks: a fine cell is ~50 ticks of top speed) is
	// only rewritten in place, and its buckets and bits are left alone.
	// Cell c's ships are ships[head[c]], ships[ships[head[c]].next], …
	// to -1 (doubly linked, so a ship leaving a cell is unlinked in place);
	// order lists the slots put this round, in the order put. The order in
	// a cell is not seen: touching sorts what it finds by position and id.
	head  []int32
	ships []gridShip
	// keep[slot] is where the ship in slot may stand with the cell and
	// box of its entry (put locates it again only when it leaves, about
	// one put in twenty-five); apart from ships, whose entries the hit
	// tests walk, to keep those one cache line each.
	keep  []keepRect
	order []int32
	prev  []int32 // the previous round's order (scratch of end)
	round uint32
	// cnt[c] is how many ships' boxes cover fine cell c (saturating at
	// 0xFFFF, which then stays: the bits stay set, which is only slower).
	cnt []uint16

	// Islands (inflated by ShipRadius) overlapping each cell.
	islStart []int32
	islItems []int32

	// A finer grid of bits (cells of 1<<fshift mm, a quarter of a cell's
	// side) over the same area, the prefilter of a cannonball's tests: a
	// bit of occ is set if a ship's box (its centre ± ShipRadius) overlaps
	// the fine cell, a bit of isl if an island's box does. A hit or a
	// splash is only possible in a fine cell whose bit is set, so a clear
	// bit answers in one load what the exact tests would answer in many;
	// a set bit sends the ball to the exact tests, which alone decide.
	fshift   uint
	fnx, fny int
	occ      []uint64
	// occ2 has the bits of occ set by two ships or more: a cell of occ
	// whose occ2 bit is clear was marked by one ship only, so a ball's
	// test may leave it out if that ship is the ball's owner (touching
	// skips the owner).
	occ2 []uint64
	isl  []uint64
	// islNear is isl for the islands inflated by ShipRadius, as islandsNear
	// lists them.
	islNear []uint64
	// islSat is the summed-area table, over the cells, of the set bits of
	// isl (a cell holds 4 × 4 fine cells): a box of cells without any is
	// known off every island in four reads.
	islSat []int32
}

// gridShip is a ship's entry: what a hit test needs without touching the
// table.
type gridShip struct {
	slot       int32
	x, y       int32
	prev, next int32   // the cell's neighbouring entries (by slot), or -1
	cell       int32   // the coarse cell it is bucketed in, -1 if none
	box        fineBox // shipBox(x, y), the cells it marked in occ
	round      uint32  // the grid round it was last put in
	id         uint64
	sunk       bool // a wreck, or sunk by an earlier ball of this tick
}

// keepRect is a half-open box of positions, in mm.
type keepRect struct{ vx0, vy0, vx1, vy1 int64 }

func (k *keepRect) holds(x, y int64) bool {
	return x >= k.vx0 && x < k.vx1 && y >= k.vy0 && y < k.vy1
}

// fineRect returns the positions in the fine cell of (x, y) (clamped as
// fineXY: the edge cells reach out without bound).
func (g *grid) fineRect(x, y int64) keepRect {
	cx, cy := g.fineXY(x, y)
	var k keepRect
	k.vx0, k.vx1 = stepSpan(cx, g.x0, g.fshift, g.fnx)
	k.vy0, k.vy1 = stepSpan(cy, g.y0, g.fshift, g.fny)
	return k
}

// stepSpan returns the values v whose cell (v-o)>>shift clamped to
// 0..n-1 is c, the cell of a value: lo ≤ v < hi (unbounded at the clamped
// ends).
func stepSpan(c int, o int64, shift uint, n int) (lo, hi int64) {
	lo, hi = o+int64(c)<<(shift&63), o+int64(c+1)<<(shift&63)
	if c == 0 {
		lo = math.MinInt64
	}
	if c == n-1 {
		hi = math.MaxInt64
	}
	return lo, hi
}

// keepOf returns the positions at which a ship has the cell (cx, cy) and
// the box b that it has at its position: the same coarse cell of its
// centre and the same fine cells of its sides (shipBox).
func (g *grid) keepOf(cx, cy int, b fineBox) keepRect {
	var k keepRect
	k.vx0, k.vx1 = stepSpan(cx, g.x0, g.shift, g.nx)
	k.vy0, k.vy1 = stepSpan(cy, g.y0, g.shift, g.ny)
	for _, a := range [...]struct {
		c   int32
		o   int64
		n   int
		lo  *int64
		hi  *int64
		off int64
	}{
		{b.x0, g.x0, g.fnx, &k.vx0, &k.vx1, ShipRadius}, {b.x1, g.x0, g.fnx, &k.vx0, &k.vx1, -ShipRadius},
		{b.y0, g.y0, g.fny, &k.vy0, &k.vy1, ShipRadius}, {b.y1, g.y0, g.fny, &k.vy0, &k.vy1, -ShipRadius},
	} {
		// The side at v - off (off = ±ShipRadius) is in fine cell a.c
		// while lo ≤ v - off < hi.
		lo, hi := stepSpan(int(a.c), a.o, g.fshift, a.n)
		if lo != math.MinInt64 {
			*a.lo = max(*a.lo, lo+a.off)
		}
		if hi != math.MaxInt64 {
			*a.hi = min(*a.hi, hi+a.off)
		}
	}
	return k
}

// newGrid covers r, extended by margin on every side.
func newGrid(r Rect, margin int32, islands []Island) *grid {
	x0, y0 := int64(r.X0)-int64(margin), int64(r.Y0)-int64(margin)
	w, h := int64(r.X1)-int64(r.X0)+2*int64(margin), int64(r.Y1)-int64(r.Y0)+2*int64(margin)
	// Cells of 65.536 m (larger for huge sectors: at most 256 a side), a
	// power of two so that locating a point is a shift.
	shift := uint(16)
	for max(w, h)>>shift > 256 {
		shift++
	}
	cell := int64(1) << shift
	g := &grid{x0: x0, y0: y0, shift: shift, nx: int((w + cell - 1) / cell), ny: int((h + cell - 1) / cell)}
	g.head = make([]int32, g.nx*g.ny)
	for c := range g.head {
		g.head[c] = -1
	}
	// Islands: bounding boxes inflated by the ship radius.
	perCell := make([][]int32, g.nx*g.ny)
	for k, is := range islands {
		rr := int64(is.Radius) + ShipRadius
		cx0, cy0 := g.cellXY(int64(is.X)-rr, int64(is.Y)-rr)
		cx1, cy1 := g.cellXY(int64(is.X)+rr, int64(is.Y)+rr)
		if int64(is.X)+rr < x0 || int64(is.Y)+rr < y0 || int64(is.X)-rr >= x0+w || int64(is.Y)-rr >= y0+h {
			continue // entirely outside: never clamp far islands into edge cells
		}
		for cy := cy0; cy <= cy1; cy++ {
			for cx := cx0; cx <= cx1; cx++ {
				perCell[cy*g.nx+cx] = append(perCell[cy*g.nx+cx], int32(k))
			}
		}
	}
	g.fshift = shift - 2
	fcell := int64(1) << g.fshift
	g.fnx, g.fny = int((w+fcell-1)/fcell), int((h+fcell-1)/fcell)
	g.occ = make([]uint64, (g.fnx*g.fny+63)/64)
	g.cnt = make([]uint16, g.fnx*g.fny)
	g.occ2 = make([]uint64, len(g.occ))
	g.isl = make([]uint64, len(g.occ))
	g.islNear = make([]uint64, len(g.occ))
	for _, is := range islands {
		r := int64(is.Radius)
		if int64(is.X)+r < x0 || int64(is.Y)+r < y0 || int64(is.X)-r >= x0+w || int64(is.Y)-r >= y0+h {
			continue
		}
		g.mark(g.isl, int64(is.X)-r, int64(is.Y)-r, int64(is.X)+r, int64(is.Y)+r)
	}
	for _, is := range islands { // as the cells' lists, above
		rr := int64(is.Radius) + ShipRadius
		if int64(is.X)+rr < x0 || int64(is.Y)+rr < y0 || int64(is.X)-rr >= x0+w || int64(is.Y)-rr >= y0+h {
			continue
		}
		g.mark(g.islNear, int64(is.X)-rr, int64(is.Y)-rr, int64(is.X)+rr, int64(is.Y)+rr)
	}
	g.islSat = make([]int32, (g.nx+1)*(g.ny+1))
	for cy := range g.ny {
		row := int32(0)
		for cx := range g.nx {
			for fy := cy << 2; fy < min(cy<<2+4, g.fny); fy++ {
				for fx := cx << 2; fx < min(cx<<2+4, g.fnx); fx++ {
					if c := fy*g.fnx + fx; g.isl[c>>6]&(1<<(uint(c)&63)) != 0 {
						row++
					}
				}
			}
			g.islSat[(cy+1)*(g.nx+1)+cx+1] = g.islSat[cy*(g.nx+1)+cx+1] + row
		}
	}
	g.islStart = make([]int32, len(perCell)+1)
	for c, items := range perCell {
		g.islStart[c+1] = g.islStart[c] + int32(len(items))
		g.islItems = append(g.islItems, items...)
	}
	return g
}

// cellXY returns the cell coordinates of (x, y), clamped to the grid.
func (g *grid) cellXY(x, y int64) (int, int) {
	cx, cy := max(x-g.x0, 0)>>(g.shift&63), max(y-g.y0, 0)>>(g.shift&63) // &63: no test for a shift ≥ 64
	return int(min(cx, int64(g.nx-1))), int(min(cy, int64(g.ny-1)))
}

// fineXY returns the fine cell coordinates of (x, y), clamped to the grid.
func (g *grid) fineXY(x, y int64) (int, int) {
	cx, cy := max(x-g.x0, 0)>>(g.fshift&63), max(y-g.y0, 0)>>(g.fshift&63)
	return int(min(cx, int64(g.fnx-1))), int(min(cy, int64(g.fny-1)))
}

// mark sets the bits of the fine cells the box x0..x1 × y0..y1 (closed)
// overlaps, clamped to the grid.
func (g *grid) mark(bits []uint64, x0, y0, x1, y1 int64) {
	cx0, cy0 := g.fineXY(x0, y0)
	cx1, cy1 := g.fineXY(x1, y1)
	for cy := cy0; cy <= cy1; cy++ {
		for c := cy*g.fnx + cx0; c <= cy*g.fnx+cx1; c++ {
			bits[c>>6] |= 1 << (uint(c) & 63)
		}
	}
}

// any reports whether a bit is set among the fine cells the box x0..x1 ×
// y0..y1 (closed, x0 ≤ x1, y0 ≤ y1) overlaps.
func (g *grid) any(bits []uint64, x0, y0, x1, y1 int64) bool {
	cx0, cy0 := g.fineXY(x0, y0)
	cx1, cy1 := g.fineXY(x1, y1)
	for cy := cy0; cy <= cy1; cy++ {
		for c := cy*g.fnx + cx0; c <= cy*g.fnx+cx1; c++ {
			if bits[c>>6]&(1<<(uint(c)&63)) != 0 {
				return true
			}
		}
	}
	return false
}

// mayTouch reports whether touching(ax, ay, bx, by, …) may find a ship:
// false means it finds none. The point of the segment nearest to a ship
// it touches (as segmentContact computes it: inside the segment's box)
// is within ShipRadius of the ship's centre on each axis, so inside the
// ship's box, and the fine cell of that point is both marked by the ship
// and among the segment's box's cells.
func (g *grid) mayTouch(ax, ay, bx, by int64) bool {
	cx0, cy0 := g.fineXY(ax, ay)
	cx1, cy1 := g.fineXY(bx, by)
	if dx, dy := cx1-cx0, cy1-cy0; dx >= -1 && dx <= 1 && dy >= -1 && dy <= 1 {
		// Most paths (one tick of flight) span one to four fine cells,
		// the corners of their box.
		c00, c01 := cy0*g.fnx+cx0, cy0*g.fnx+cx1
		c10, c11 := cy1*g.fnx+cx0, cy1*g.fnx+cx1
		return (g.occ[c00>>6]>>(uint(c00)&63)|g.occ[c01>>6]>>(uint(c01)&63)|
			g.occ[c10>>6]>>(uint(c10)&63)|g.occ[c11>>6]>>(uint(c11)&63))&1 != 0
	}
	return g.any(g.occ, min(ax, bx), min(ay, by), max(ax, bx), max(ay, by))
}

// shipBox returns the fine cells a ship at (x, y) marks in occ: its box,
// its centre ± ShipRadius.
func (g *grid) shipBox(x, y int32) fineBox {
	return g.fineBoxOf(int64(x)-ShipRadius, int64(y)-ShipRadius, int64(x)+ShipRadius, int64(y)+ShipRadius)
}

// markTwice sets the bits of b's cells in one, and in two those already
// set in one.
func markTwice(g *grid, one, two []uint64, b fineBox) {
	for cy := int(b.y0); cy <= int(b.y1); cy++ {
		c0, c1 := cy*g.fnx+int(b.x0), cy*g.fnx+int(b.x1)
		if w := c0 >> 6; w == c1>>6 { // most rows of a ship's box: one word
			m := ^uint64(0) << (uint(c0) & 63) & (^uint64(0) >> (63 - uint(c1)&63))
			two[w] |= one[w] & m
			one[w] |= m
			continue
		}
		for w := c0 >> 6; w <= c1>>6; w++ {
			m := ^uint64(0)
			if w == c0>>6 {
				m &= ^uint64(0) << (uint(c0) & 63)
			}
			if w == c1>>6 {
				m &= ^uint64(0) >> (63 - uint(c1)&63)
			}
			two[w] |= one[w] & m
			one[w] |= m
		}
	}
}

// anyBut reports whether a cell of b is marked in one by a box other than
// own: set in two (marked twice), or set in one and outside own. With own
// the cells one box marked (or nil), false means no box but own marked a
// cell of b.
func (g *grid) anyBut(one, two []uint64, b, own *fineBox) bool {
	// Most boxes have no cell marked at all (two's bits are in one's).
	marked := false
	for cy := int(b.y0); cy <= int(b.y1) && !marked; cy++ {
		marked = anyRange(one, cy*g.fnx+int(b.x0), cy*g.fnx+int(b.x1))
	}
	if !marked {
		return false
	}
	for cy := int(b.y0); cy <= int(b.y1); cy++ {
		row := cy * g.fnx
		if anyRange(two, row+int(b.x0), row+int(b.x1)) {
			return true
		}
		if own == nil || cy < int(own.y0) || cy > int(own.y1) {
			if anyRange(one, row+int(b.x0), row+int(b.x1)) {
				return true
			}
			continue
		}
		// The cells of the row left and right of own.
		if anyRange(one, row+int(b.x0), row+min(int(b.x1), int(own.x0)-1)) ||
			anyRange(one, row+max(int(b.x0), int(own.x1)+1), row+int(b.x1)) {
			return true
		}
	}
	return false
}

// anyRange reports whether a bit c0..c1 (inclusive; none if c1 < c0) is
// set.
func anyRange(bits []uint64, c0, c1 int) bool {
	if c1 < c0 {
		return false
	}
	w0, w1 := c0>>6, c1>>6
	lo := ^uint64(0) << (uint(c0) & 63)
	hi := ^uint64(0) >> (63 - uint(c1)&63)
	if w0 == w1 {
		return bits[w0]&lo&hi != 0
	}
	if bits[w0]&lo != 0 || bits[w1]&hi != 0 {
		return true
	}
	for w := w0 + 1; w < w1; w++ {
		if bits[w] != 0 {
			return true
		}
	}
	return false
}

// ownerBox returns the cells ship id, in slot, marked in occ this tick
// (false if that slot holds no such ship this tick).
func (g *grid) ownerBox(slot int32, id uint64) (fineBox, bool) {
	if slot < 0 || int(slot) >= len(g.ships) {
		return fineBox{}, false
	}
	if sh := &g.ships[slot]; sh.round == g.round && sh.cell >= 0 && sh.id == id {
		return sh.box, true
	}
	return fineBox{}, false
}

// mayTouchBut is mayTouch for a ball whose owner, which touching skips,
// marked the cells own: false means touching finds no ship. (The point of
// the segment nearest a ship touched is in the segment's box and in the
// ship's box, so its fine cell is a cell of both; that cell was marked by
// a ship other than the owner, so it is set in occ2 or outside own.)
// flyBalls does not call it: it rules out too few of the paths mayTouch
// lets through to pay for itself. The sleeper's anyButRows is the same
// test over the anchored boxes.
func (g *grid) mayTouchBut(ax, ay, bx, by int64, own *fineBox) bool {
	b := g.fineBoxOf(min(ax, bx), min(ay, by), max(ax, bx), max(ay, by))
	return g.anyBut(g.occ, g.occ2, &b, own)
}

// mayBeIsland reports whether (x, y), a point of the grid's area, may be
// on an island: false means splashes finds no island there. An island
// containing the point overlaps the area, so its box was marked.
func (g *grid) mayBeIsland(x, y int64) bool {
	cx, cy := g.fineXY(x, y)
	c := cy*g.fnx + cx
	return g.isl[c>>6]&(1<<(uint(c)&63)) != 0
}

// mayBeNearIsland reports whether (x, y), anywhere, may be inside an
// island's circle inflated by ShipRadius: false means none of the islands
// islandsNear(x, y) lists has it inside. (Such an island's box holds the
// point, and clamping keeps the order of coordinates, so the point's fine
// cell is among those the box marked.)
func (g *grid) mayBeNearIsland(x, y int64) bool {
	cx, cy := g.fineXY(x, y)
	c := cy*g.fnx + cx
	return g.islNear[c>>6]&(1<<(uint(c)&63)) != 0
}

// offIslands reports that no point of the box x0..x1 × y0..y1 (x0 ≤ x1,
// y0 ≤ y1) may be on an island: mayBeIsland is false for each. (A point's
// fine cell is in the box's fine cells, which lie in the cells the box's
// corners' fine cells belong to.)
func (g *grid) offIslands(x0, y0, x1, y1 int64) bool {
	fx0, fy0 := g.fineXY(x0, y0)
	fx1, fy1 := g.fineXY(x1, y1)
	cx0, cy0, cx1, cy1 := fx0>>2, fy0>>2, fx1>>2, fy1>>2
	w := g.nx + 1
	return g.islSat[(cy1+1)*w+cx1+1]-g.islSat[cy0*w+cx1+1]-g.islSat[(cy1+1)*w+cx0]+g.islSat[cy0*w+cx0] == 0
}

// reset empties the grid of ships and starts a round: the grid is then
// ready for hit tests after the last add.
func (g *grid) reset() {
	for _, slot := range g.order {
		if g.ships[slot].cell >= 0 {
			g.remove(slot)
		}
	}
	g.begin()
}

// add buckets a ship (put, after reset).
func (g *grid) add(slot int, x, y int32, id uint64, sunk bool) { g.put(slot, x, y, id, sunk) }

// begin starts a round of puts: the ships of this tick. end finishes it.
func (g *grid) begin() {
	g.round++
	g.order, g.prev = g.prev[:0], g.order
}

// put buckets the ship in slot, where it stands this round: in place if
// it was bucketed last round in the same cell and fine box.
func (g *grid) put(slot int, x, y int32, id uint64, sunk bool) {
	for slot >= len(g.ships) {
		g.ships = append(g.ships, gridShip{slot: int32(len(g.ships)), cell: -1, prev: -1, next: -1})
	}
	e := &g.ships[slot]
	if e.round == g.round && e.cell >= 0 {
		// Put twice in a round (tests only): as another add, the
		// later position wins.
		g.remove(int32(slot))
	}
	for slot >= len(g.keep) {
		g.keep = append(g.keep, keepRect{})
	}
	k := &g.keep[slot]
	if e.cell >= 0 && k.holds(int64(x), int64(y)) {
		// Same cell, same box: nothing to relink or recount.
		e.x, e.y, e.id, e.sunk, e.round = x, y, id, sunk, g.round
		g.order = append(g.order, int32(slot))
		return
	}
	cx, cy := g.cellXY(int64(x), int64(y))
	c := int32(cy*g.nx + cx)
	b := g.shipBox(x, y)
	if e.cell >= 0 && e.box != b {
		g.count(e.box, false)
		g.count(b, true)
	} else if e.cell < 0 {
		g.count(b, true)
	}
	if e.cell != c {
		if e.cell >= 0 {
			g.unlink(e)
		}
		e.cell, e.prev, e.next = c, -1, g.head[c]
		if e.next >= 0 {
			g.ships[e.next].prev = int32(slot)
		}
		g.head[c] = int32(slot)
	}
	e.x, e.y, e.box, e.id, e.sunk, e.round = x, y, b, id, sunk, g.round
	*k = g.keepOf(cx, cy, b)
	g.order = append(g.order, int32(slot))
}

// putKept is put's common case, small enough to inline into the ships'
// loop: the ship in slot, afloat, not yet put this round, is bucketed and
// stays in its kept cell and box. It reports false (nothing done)
// otherwise; put then does the rest. On true the caller appends slot to
// order (outside, so that this inlines). (put grows ships before keep, so a
// slot of keep is one of ships.)
func (g *grid) putKept(slot int, x, y int32, id uint64) bool {
	if slot >= len(g.keep) || !g.keep[slot].holds(int64(x), int64(y)) {
		return false
	}
	e := &g.ships[slot]
	if e.cell < 0 {
		return false
	}
	e.x, e.y, e.id, e.sunk, e.round = x, y, id, false, g.round
	return true // the caller appends slot to order
}

// end removes the ships of the last round not put in this one; the grid
// is then ready for hit tests.
func (g *grid) end() {
	for _, slot := range g.prev {
		if e := &g.ships[slot]; e.round != g.round && e.cell >= 0 {
			g.remove(slot)
		}
	}
	g.prev = g.prev[:0]
}

// remove takes the ship in slot out of its bucket and its bits.
func (g *grid) remove(slot int32) {
	e := &g.ships[slot]
	g.unlink(e)
	g.count(e.box, false)
	e.cell, e.prev, e.next = -1, -1, -1
}

func (g *grid) unlink(e *gridShip) {
	if e.prev >= 0 {
		g.ships[e.prev].next = e.next
	} else {
		g.head[e.cell] = e.next
	}
	if e.next >= 0 {
		g.ships[e.next].prev = e.prev
	}
}

// count adds (or, if !inc, removes) box b's cover of its cells, keeping
// occ (covered once or more) and occ2 (twice or more) in step.
func (g *grid) count(b fineBox, inc bool) {
	for cy := int(b.y0); cy <= int(b.y1); cy++ {
		for c := cy*g.fnx + int(b.x0); c <= cy*g.fnx+int(b.x1); c++ {
			n := g.cnt[c]
			if n == 0xFFFF {
				continue
			}
			bit := uint64(1) << (uint(c) & 63)
			if inc {
				n++
				switch n {
				case 1:
					g.occ[c>>6] |= bit
				case 2:
					g.occ2[c>>6] |= bit
				}
			} else {
				n--
				switch n {
				case 1:
					g.occ2[c>>6] &^= bit
				case 0:
					g.occ[c>>6] &^= bit
				}
			}
			g.cnt[c] = n
		}
	}
}

// pathTouch is a ship a cannonball's path touches; along orders the ships
// touched by one path (the projection of the ship's centre on the path,
// clamped to it); startInside says the path starts inside the ship's hull
// circle.
type pathTouch struct {
	ship        *gridShip
	along       int64
	startInside bool
}

// touching appends to out the ships, afloat or sunk, other than ship id
// skip, whose hull circle the segment (ax, ay)→(bx, by) touches, in their
// order along the segment, then by id: an order that depends on where the
// ships are, never on their table slots. The pointers are valid until the
// next round.
func (g *grid) touching(ax, ay, bx, by int64, skip uint64, out []pathTouch) []pathTouch {
	start := len(out)
	// A ship the segment passes within ShipRadius of has its centre in
	// the segment's box grown by ShipRadius (the nearest point is in the
	// box): the cells of that box, and each ship tested against it first.
	lx, ly := min(ax, bx)-ShipRadius, min(ay, by)-ShipRadius
	hx, hy := max(ax, bx)+ShipRadius, max(ay, by)+ShipRadius
	cx0, cy0 := g.cellXY(lx, ly)
	cx1, cy1 := g.cellXY(hx, hy)
	for cy := cy0; cy <= cy1; cy++ {
		for cx := cx0; cx <= cx1; cx++ {
			c := cy*g.nx + cx
			for k := g.head[c]; k >= 0; k = g.ships[k].next {
				s := &g.ships[k]
				if x, y := int64(s.x), int64(s.y); x < lx || x > hx || y < ly || y > hy || s.id == skip {
					continue
				}
				if along, ok := segmentContact(ax, ay, bx, by, int64(s.x), int64(s.y), ShipRadius); ok {
					ex, ey := int64(s.x)-ax, int64(s.y)-ay
					out = append(out, pathTouch{ship: s, along: along, startInside: ex*ex+ey*ey <= ShipRadius*ShipRadius})
				}
			}
		}
	}
	// Insertion sort: a path rarely touches more than one or two ships.
	for i := start + 1; i < len(out); i++ {
		for j := i; j > start && out[j].before(&out[j-1]); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

func (p *pathTouch) before(q *pathTouch) bool {
	if p.along != q.along {
		return p.along < q.along
	}
	return p.ship.id < q.ship.id
}

// islandsNear returns the indexes of the islands whose inflated circle may
// contain (x, y).
func (g *grid) islandsNear(x, y int64) []int32 {
	cx, cy := g.cellXY(x, y)
	c := cy*g.nx + cx
	return g.islItems[g.islStart[c]:g.islStart[c+1]]
}

// segmentContact reports whether the segment (ax, ay)→(bx, by) passes within
// r of (cx, cy), and where along it the point nearest to (cx, cy) is: the
// projection t of (cx, cy) - (ax, ay) on the segment times its length,
// clamped to [0, length²], comparable between points for one segment.
// Segments are a few ticks of flight long, so the products stay far below
// 2^63.
func segmentContact(ax, ay, bx, by, cx, cy, r int64) (along int64, ok bool) {
	dx, dy := bx-ax, by-ay
	px, py := ax, ay
	if l2 := dx*dx + dy*dy; l2 != 0 {
		t := (cx-ax)*dx + (cy-ay)*dy
		switch {
		case t >= l2:
			px, py, along = bx, by, l2
		case t > 0:
			px, py, along = ax+dx*t/l2, ay+dy*t/l2, t
		}
	}
	ex, ey := cx-px, cy-py
	return along, ex*ex+ey*ey <= r*r
}
