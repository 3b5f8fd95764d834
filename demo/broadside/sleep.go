package broadside

// Sleeping cannonballs. Most balls in flight are far from every ship:
// flyBalls tests each one every tick, and for nine in ten the prefilter
// (grid.mayTouch) answers that its path touches no ship. A ball that is
// that far from every ship stays so for a few ticks, since ships are slow,
// so the sector lets it sleep: flyBalls does not visit it until it wakes.
// Sleeping changes nothing a Step computes, only what it skips; it is not
// state (not in the tables, not captured), and a restored sector starts
// with every ball awake.
//
// Time is cut into epochs of sleepEpoch ticks (16: in the benchmark world,
// with the halving below, 12 and 32 let more balls be visited). At an
// epoch's start every ball wakes and every ship is anchored where it is:
// the fine cells of its box grown by sleepDrift (the way it may make in an
// epoch at top speed) are marked in far. A ball whose one-tick test finds
// no ship may sleep through the ticks left to it in the epoch (and in its
// quiet flight, ballHot.last) if the box of its whole path over them
// covers no cell of far (or, if a ship is near, through the first half of
// them, or the first quarter…): every ship that stays within sleepDrift of
// its anchor has, at each of those ticks, its box inside its anchored box,
// so mayTouch would have been false at each of them. The path box starts
// where the ball was the tick before, so a ball that falls asleep needs no
// test that tick either.
//
// A ship that does not stay (one that appears, by a join, an arrival or a
// respawn, or moves faster than assumed: a grounding's push) is caught
// every tick, after the ships have moved and before the balls fly: it is
// anchored anew where it is (its box marked in far too) and every sleeping
// ball whose path box meets its anchored box wakes at once.
//
// A path whose box meets an anchored box may still be far from the ships:
// the cells are 16 m and round each box out. clearOfAnchors then measures
// the path's distance to each anchor (but the owner's) itself: farther
// than ShipRadius + sleepDrift·√2, no ship that stays within sleepDrift of
// its anchor can touch it, and the ball sleeps on the same terms.
//
// The soundness of sleeping depends on these checks, not on the game's
// speed limits, which only make them rare.
const (
	sleepEpoch = 16
	sleepDrift = sleepEpoch * MaxSpeed
	// sleepMin is the shortest sleep worth a second try.
	sleepMin = 2
	// sleepBackoff is how many ticks a ball whose next tick's path meets
	// a ship's anchored box is not tried again: on the benchmark tape, 4
	// cuts trySleep's calls from 1,658 to ~1,150 per world tick for ~100
	// more balls visited (2 cuts less, 8 and 12 keep more awake). With
	// the cheaper visits and box tests of the row layout, 8 costs the
	// fewest instructions per replay (session 12: 2 / 4 / 8 ticks:
	// 741 / 744 / 735 M).
	sleepBackoff = 8
)

// fineBox is a box of fine cells of the grid (inclusive).
type fineBox struct{ x0, y0, x1, y1 int32 }

func (b *fineBox) overlaps(c *fineBox) bool {
	return b.x0 <= c.x1 && c.x0 <= b.x1 && b.y0 <= c.y1 && c.y0 <= b.y1
}

// fineBoxOf returns the fine cells the box x0..x1 × y0..y1 (closed, x0 ≤
// x1, y0 ≤ y1) overlaps, clamped to the grid (as mark and any).
func (g *grid) fineBoxOf(x0, y0, x1, y1 int64) fineBox {
	cx0, cy0 := g.fineXY(x0, y0)
	cx1, cy1 := g.fineXY(x1, y1)
	return fineBox{int32(cx0), int32(cy0), int32(cx1), int32(cy1)}
}

func (g *grid) markBox(bits []uint64, b fineBox) {
	for cy := int(b.y0); cy <= int(b.y1); cy++ {
		for c := cy*g.fnx + int(b.x0); c <= cy*g.fnx+int(b.x1); c++ {
			bits[c>>6] |= 1 << (uint(c) & 63)
		}
	}
}

// sleeper is a sector's sleeping balls and anchored ships (derived, never
// captured).
type sleeper struct {
	off   bool   // never sleep (tests compare against it)
	on    bool   // an epoch is running
	epoch uint64 // its first tick
	gen   uint64 // its number: one more at every start, never reset
	last  uint64 // the last tick prepared
	// far holds the fine cells of the anchored ships' boxes grown by
	// sleepDrift.
	far rowBits
	// far2 has the cells of far marked twice or more (grid.anyBut).
	far2 rowBits
	// Per ship slot: its anchor, if it was anchored in this epoch.
	anch []shipAnchor
	// Per ball slot: asleep, and then the fine cells of its path box.
	asleep  []uint64
	box     []fineBox
	nAsleep int
	// band[j] lists the balls that fell asleep in this epoch with a path
	// box over fine rows of band j (rows 8j..8j+7), so that a ship
	// anchored anew wakes the balls near it without scanning every
	// sleeper. Entries may be stale (the ball woke, or sleeps with another
	// box); every sleeping ball is listed in each band its box meets.
	band [][]int32
	// wake[k] lists the balls that wake at tick epoch+k (entries may be
	// stale: waking an awake ball does nothing).
	wake  [sleepEpoch][]int32
	moved []fineBox // scratch: the boxes anchored anew this tick
	// drifted lists the ship slots put in this tick's grid away from
	// their anchors (or not anchored in this epoch), found by check as
	// the ships are put, when the tick continues an epoch.
	drifted []int32
}

// continues reports whether tick t continues the running epoch (then
// prepareSleep anchors anew only the ships check listed).
func (z *sleeper) continues(t uint64) bool {
	return !z.off && z.on && t == z.last+1 && t < z.epoch+sleepEpoch
}

// check lists ship slot i, with id at (x, y) in this tick's grid, in
// drifted if it is not within sleepDrift of its anchor of this epoch.
func (z *sleeper) check(i int, id uint64, x, y int32) {
	if i < len(z.anch) {
		if a := &z.anch[i]; a.gen == z.gen && a.id == id {
			if dx, dy := x-a.x, y-a.y; dx >= -sleepDrift && dx <= sleepDrift && dy >= -sleepDrift && dy <= sleepDrift {
				return
			}
		}
	}
	z.drifted = append(z.drifted, int32(i))
}

// shipAnchor is where a ship slot's ship was anchored, valid in the
// sleeper's epoch number gen only (a zero entry is never valid).
type shipAnchor struct {
	x, y int32
	id   uint64
	gen  uint64
	box  fineBox // anchorBox(x, y), the cells it marked in far
}

// bandShift is log2 of the fine rows in a band of sleeper.band.
const bandShift = 3

func hasBit(b []uint64, i int) bool {
	return i>>6 < len(b) && b[i>>6]&(1<<(uint(i)&63)) != 0
}

// grow makes room for ball slot i in asleep and box (with room for
// more: a sector's balls grow by a broadside at a time).
func (z *sleeper) grow(i int) {
	n := max(2*(i+1), 1024)
	for n>>6 >= len(z.asleep) {
		z.asleep = append(z.asleep, 0)
	}
	for n > len(z.box) {
		z.box = append(z.box, fineBox{})
	}
}

// awaken wakes ball slot i if it sleeps.
func (z *sleeper) awaken(i int) {
	if hasBit(z.asleep, i) {
		z.asleep[i>>6] &^= 1 << (uint(i) & 63)
		z.nAsleep--
	}
}

// reset wakes every ball and forgets the epoch (after a restore).
func (z *sleeper) reset() {
	z.on = false
	clear(z.asleep)
	z.nAsleep = 0
}

// anchor anchors ship id, in slot i, at (x, y) and marks its grown box in
// far.
func (s *Sector) anchor(i int, id uint64, x, y int32) fineBox {
	z := &s.sleep
	for i >= len(z.anch) {
		z.anch = append(z.anch, shipAnchor{})
	}
	b := s.anchorBox(x, y)
	z.anch[i] = shipAnchor{x: x, y: y, id: id, gen: z.gen, box: b}
	markTwiceRows(&z.far, &z.far2, b)
	return b
}

// anchorBox returns the cells of a ship's box anchored at (x, y), grown by
// sleepDrift.
func (s *Sector) anchorBox(x, y int32) fineBox {
	const r = ShipRadius + sleepDrift
	return s.grid.fineBoxOf(int64(x)-r, int64(y)-r, int64(x)+r, int64(y)+r)
}

// prepareSleep runs after the tick's grid is built (the ships have moved)
// and before flyBalls: it starts an epoch, or wakes the balls due and
// those near a ship that left its anchored box.
func (s *Sector) prepareSleep() {
	z := &s.sleep
	if z.off {
		return
	}
	t := s.tick
	if z.far.w == nil {
		z.far, z.far2 = newRowBits(s.grid), newRowBits(s.grid)
		z.band = make([][]int32, (s.grid.fny+1<<bandShift-1)>>bandShift)
		z.on = false
	}
	if !z.on || t != z.last+1 || t >= z.epoch+sleepEpoch {
		z.on, z.epoch, z.last = true, t, t
		z.gen++
		clear(z.far.w)
		clear(z.far2.w)
		clear(z.asleep)
		z.nAsleep = 0
		for k := range z.wake {
			z.wake[k] = z.wake[k][:0]
		}
		for j := range z.band {
			z.band[j] = z.band[j][:0]
		}
		for _, slot := range s.grid.order {
			g := &s.grid.ships[slot]
			s.anchor(int(g.slot), g.id, g.x, g.y)
		}
		return
	}
	z.last = t
	due := &z.wake[t-z.epoch]
	for _, i := range *due {
		z.awaken(int(i))
	}
	*due = (*due)[:0]
	// The ships that left their anchored boxes (sailShips checked each
	// as it put it in the grid: continues was true).
	z.moved = z.moved[:0]
	for _, slot := range z.drifted {
		if g := &s.grid.ships[slot]; g.round == s.grid.round && g.cell >= 0 {
			z.moved = append(z.moved, s.anchor(int(slot), g.id, g.x, g.y))
		}
	}
	z.drifted = z.drifted[:0]
	if len(z.moved) == 0 || z.nAsleep == 0 {
		return
	}
	for k := range z.moved {
		m := &z.moved[k]
		for j := int(m.y0) >> bandShift; j <= int(m.y1)>>bandShift; j++ {
			for _, i := range z.band[j] {
				if hasBit(z.asleep, int(i)) && z.box[i].overlaps(m) {
					z.awaken(int(i))
				}
			}
		}
	}
}

// trySleep puts ball i, in its quiet flight at tick t, to sleep from tick
// t on if no anchored ship's box but its owner's meets its path from
// (ax, ay), where it was at t-1, through the ticks it may sleep (touching
// skips the owner; a slot's anchor is the owner's if it holds the owner's
// id). It reports whether the ball sleeps: then tick t's test would find
// no ship either (every ship's box at t is within its anchored box).
func (s *Sector) trySleep(i int, h *ballHot, t uint64, ax, ay int64) bool {
	z := &s.sleep
	if !z.on || t <= h.noSleepTo {
		return false
	}
	end := min(z.epoch+sleepEpoch-1, h.last)
	if end <= t {
		return false
	}
	// The path's box from its first cell (fineXY is monotone, so the box
	// of the two end cells is fineBoxOf of the path's box).
	sx, sy := s.grid.fineXY(ax, ay)
	var own sleepOwner
	b := s.pathBox(h, sx, sy, end)
	if !s.pathClear(h, &b, &own) {
		// A ship's anchored box meets the path's cells. The anchors
		// themselves may still be far enough from the path; if not,
		// perhaps not yet near its first half, or quarter… (a shorter
		// path's box is inside a longer one's: if the shortest is not
		// clear, none is).
		if end-t < sleepMin {
			return false
		}
		if !s.clearOfAnchors(h, ax, ay, end) {
			short := s.pathBox(h, sx, sy, t+1)
			if !s.pathClear(h, &short, &own) {
				// Next to a ship: not tried again for a few ticks (it
				// stays awake, tested every tick, as without sleeping).
				h.noSleepTo = t + sleepBackoff
				return false
			}
			for end = t + (end-t)/2; end > t+1; end = t + (end-t)/2 {
				if b = s.pathBox(h, sx, sy, end); s.pathClear(h, &b, &own) {
					break
				}
			}
			if end <= t+1 {
				end, b = t+1, short
			}
		}
	}
	if i >= len(z.box) || i>>6 >= len(z.asleep) {
		z.grow(i)
	}
	z.asleep[i>>6] |= 1 << (uint(i) & 63)
	z.box[i] = b
	for j := int(b.y0) >> bandShift; j <= int(b.y1)>>bandShift; j++ {
		z.band[j] = append(z.band[j], int32(i))
	}
	z.nAsleep++
	if k := end + 1 - z.epoch; k < sleepEpoch {
		z.wake[k] = append(z.wake[k], int32(i))
	}
	return true
}

// anchorReach bounds how far from its anchor a ship that stays within
// sleepDrift of it on each axis may be: sleepDrift·√2 (7,535 mm), rounded
// up with room for segmentContact's rounding (a millimetre or two).
const anchorReach = sleepDrift * 3 / 2

// clearOfAnchors reports whether ball h's path from (ax, ay) through tick
// end passes farther than ShipRadius + anchorReach from the anchor of
// every ship but its owner: then no ship that stays within sleepDrift of
// its anchor comes within ShipRadius of the path (touching finds none at
// any of its ticks), and a ship that does not is anchored anew, which
// wakes the ball if its anchored box meets the path's box, as for any
// sleeper. The ships are found in the grid where they are now, within
// sleepDrift of their anchors (a ship farther was anchored anew this
// tick, before the balls fly).
func (s *Sector) clearOfAnchors(h *ballHot, ax, ay int64, end uint64) bool {
	z, g := &s.sleep, s.grid
	bx, by := h.at(end)
	const reach = ShipRadius + anchorReach
	lx, ly := min(ax, bx)-reach, min(ay, by)-reach
	hx, hy := max(ax, bx)+reach, max(ay, by)+reach
	cx0, cy0 := g.cellXY(lx-sleepDrift, ly-sleepDrift)
	cx1, cy1 := g.cellXY(hx+sleepDrift, hy+sleepDrift)
	for cy := cy0; cy <= cy1; cy++ {
		for cx := cx0; cx <= cx1; cx++ {
			for k := g.head[cy*g.nx+cx]; k >= 0; k = g.ships[k].next {
				e := &g.ships[k]
				if e.id == h.owner {
					continue // touching skips the owner
				}
				if int(k) >= len(z.anch) {
					return false
				}
				a := &z.anch[k]
				if a.gen != z.gen || a.id != e.id {
					return false // not anchored (cannot happen): assume the worst
				}
				x, y := int64(a.x), int64(a.y)
				if x < lx || x > hx || y < ly || y > hy {
					continue
				}
				if _, near := segmentContact(ax, ay, bx, by, x, y, reach); near {
					return false
				}
			}
		}
	}
	return true
}

// pathBox returns the fine cells of ball h's path from cell (sx, sy)
// through tick end.
func (s *Sector) pathBox(h *ballHot, sx, sy int, end uint64) fineBox {
	x1, y1 := h.at(end)
	ex, ey := s.grid.fineXY(x1, y1)
	return fineBox{int32(min(sx, ex)), int32(min(sy, ey)), int32(max(sx, ex)), int32(max(sy, ey))}
}

// sleepOwner is a ball's owner's anchored box, looked up on first need
// (most paths meet no marked cell).
type sleepOwner struct {
	known, ok bool
	b         fineBox
}

// pathClear reports whether no anchored ship's box but ball h's owner's
// meets the cells b.
func (s *Sector) pathClear(h *ballHot, b *fineBox, own *sleepOwner) bool {
	z := &s.sleep
	if !anyRows(&z.far, b) {
		return true
	}
	if !own.known {
		own.known = true
		if o := int(h.ownerSlot); o >= 0 && o < len(z.anch) {
			if a := &z.anch[o]; a.gen == z.gen && a.id == h.owner {
				own.b, own.ok = a.box, true
			}
		}
	}
	var ob *fineBox
	if own.ok {
		ob = &own.b
	}
	return !anyButRows(&z.far, &z.far2, b, ob)
}

// rowBits is a bit per fine cell of the grid, row by row, each row
// starting on a word: cell (cx, cy) is bit cx mod 64 of word cy·stride +
// cx/64. A box's cells in a row are one or two words under masks computed
// once for the box, so a box of a few cells (a sleeping ball's path spans
// a few cells each way) is tested in a load and an AND a row. The sleeper
// keeps far in it.
type rowBits struct {
	stride int // words per row
	w      []uint64
}

func newRowBits(g *grid) rowBits {
	st := (g.fnx + 63) >> 6
	return rowBits{stride: st, w: make([]uint64, st*g.fny)}
}

// rowSpan returns the words w0..w1 of a row that cells x0..x1 (x0 ≤ x1)
// fall in, and the masks of the cells in the first and in the last (both
// the same mask if w0 == w1).
func rowSpan(x0, x1 int32) (w0, w1 int, m0, m1 uint64) {
	w0, w1 = int(x0>>6), int(x1>>6)
	m0, m1 = ^uint64(0)<<(uint(x0)&63), ^uint64(0)>>(63-uint(x1)&63)
	if w0 == w1 {
		m0 &= m1
		m1 = m0
	}
	return w0, w1, m0, m1
}

// wordMask returns the bits of word j (w0 <= j <= w1) of a span that
// rowSpan returned.
func wordMask(j, w0, w1 int, m0, m1 uint64) uint64 {
	m := ^uint64(0)
	if j == w0 {
		m = m0
	}
	if j == w1 {
		m &= m1
	}
	return m
}

// spanMask returns the bits of word j of a row that cells x0..x1 cover.
func spanMask(x0, x1 int32, j int) uint64 {
	lo, hi := j<<6, j<<6+63
	if int(x1) < lo || int(x0) > hi {
		return 0
	}
	m := ^uint64(0)
	if int(x0) > lo {
		m <<= uint(int(x0) - lo)
	}
	if int(x1) < hi {
		m &= ^uint64(0) >> uint(hi-int(x1))
	}
	return m
}

// markTwiceRows sets b's cells in one, and in two those already set in
// one (markTwice).
func markTwiceRows(one, two *rowBits, b fineBox) {
	w0, w1, m0, m1 := rowSpan(b.x0, b.x1)
	for cy := b.y0; cy <= b.y1; cy++ {
		k := int(cy) * one.stride
		for j := w0; j <= w1; j++ {
			m := wordMask(j, w0, w1, m0, m1)
			two.w[k+j] |= one.w[k+j] & m
			one.w[k+j] |= m
		}
	}
}

// anyRows reports whether a cell of b is set in one.
func anyRows(one *rowBits, b *fineBox) bool {
	w0, w1, m0, m1 := rowSpan(b.x0, b.x1)
	st := one.stride
	k, last := int(b.y0)*st, int(b.y1)*st
	if w0 == w1 {
		for ; k <= last; k += st {
			if one.w[k+w0]&m0 != 0 {
				return true
			}
		}
		return false
	}
	for ; k <= last; k += st {
		if one.w[k+w0]&m0 != 0 || one.w[k+w1]&m1 != 0 {
			return true
		}
		for j := w0 + 1; j < w1; j++ {
			if one.w[k+j] != 0 {
				return true
			}
		}
	}
	return false
}

// anyButRows is grid.anyBut over rowBits.
func anyButRows(one, two *rowBits, b, own *fineBox) bool {
	w0, w1, m0, m1 := rowSpan(b.x0, b.x1)
	if w0 == w1 {
		// Most boxes: one word a row, and own's cells in it under one
		// mask (none outside own's rows).
		var om uint64
		oy0, oy1 := int32(1), int32(0)
		if own != nil {
			om, oy0, oy1 = spanMask(own.x0, own.x1, w0), own.y0, own.y1
		}
		st := one.stride
		for cy, k := b.y0, int(b.y0)*st+w0; cy <= b.y1; cy, k = cy+1, k+st {
			hit := one.w[k] & m0
			if hit == 0 {
				continue
			}
			if two.w[k]&m0 != 0 || cy < oy0 || cy > oy1 || hit&^om != 0 {
				return true
			}
		}
		return false
	}
	for cy := b.y0; cy <= b.y1; cy++ {
		k := int(cy) * one.stride
		inOwn := own != nil && cy >= own.y0 && cy <= own.y1
		for j := w0; j <= w1; j++ {
			m := wordMask(j, w0, w1, m0, m1)
			hit := one.w[k+j] & m
			if hit == 0 {
				continue
			}
			if two.w[k+j]&m != 0 || !inOwn || hit&^spanMask(own.x0, own.x1, j) != 0 {
				return true
			}
		}
	}
	return false
}
