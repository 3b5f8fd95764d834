package broadside

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/anoptic/broadside/lineage"
)

// State for clients. A server sends each client, every tick, the part of
// the world around its ship (its interest) as a delta against a tick the
// client acknowledged; spectators get the whole world. Frame is that state
// on both sides: the server builds one per tick from its sectors, a client
// rebuilds its own partial Frames with ApplyDelta.
//
// Payload format (version 1), all integers varints (signed ones zigzag):
//
//	0x01 version
//	removed ships: count, then ids as increasing deltas
//	ships: count, then per ship: id delta, mask, and the fields the mask
//	       names (shipFull: every field absolute; else differences to the
//	       base)
//	removed balls: count, ids as increasing deltas
//	new balls: count, then per ball: id delta, owner, sector, x, y, vx,
//	       vy, age, lifetime
//
// A ship or ball in both the base and the update that is not mentioned
// carries over: a ship unchanged (reload countdowns run down by the ticks
// elapsed), a ball moved along its velocity. A ball that does not follow
// its straight flight is removed and sent again.

const stateFormat = 1

// DefaultInterestRadius is the size of the interest cells: a player sees
// the 3 × 3 cells of this size around its ship (balls carry about 300 m).
const DefaultInterestRadius = 600_000

// Limits on what ApplyDelta accepts (a hostile server must not make a
// client hold more than StateTracker's frames of this size).
const (
	maxStateShips = 1 << 13
	maxStateBalls = 1 << 16
)

// ErrBadState is wrapped by every error of ApplyDelta.
var ErrBadState = errors.New("broadside: malformed state update")

// ErrBaseNotHeld is returned by StateTracker.Apply for a delta against a
// tick whose frame the tracker does not hold (never received, or older
// than the frames it keeps): the update may be sound, and the next full
// state resynchronises. It wraps ErrBadState (the update cannot be
// applied).
var ErrBaseNotHeld = fmt.Errorf("%w: base tick not held", ErrBadState)

// Ship field groups of a delta's mask.
const (
	shipFull     = 1 << 0
	shipPos      = 1 << 1
	shipHeading  = 1 << 2
	shipSpeed    = 1 << 3
	shipHull     = 1 << 4
	shipOrders   = 1 << 5
	shipReload   = 1 << 6
	shipIdentity = 1 << 7
)

// Frame is the client-visible state of a world (or of one client's part
// of it) at a tick: ships and balls sorted by id. A Frame is immutable once
// sealed (server side) or returned by ApplyDelta (client side).
type Frame struct {
	Tick  uint64
	Ships []ShipView
	Balls []BallView

	// Server side: interest cells and where each player's ship is (or
	// was last seen, while it sails between sectors).
	cell    int64
	anchors map[uint32]anchor
	// near holds, for every cell a player is anchored in, the sorted
	// indexes of what the 3 × 3 cells around it hold: computed once per
	// cell in Seal and shared by every player there (no sort per player
	// per tick). Read-only once sealed.
	near map[[2]int64]*cellInterest
}

// cellEntry is a ship or ball (its index in the frame) and its cell's
// key: Seal sorts them by key, so that a row of 3 cells is one run.
type cellEntry struct {
	key uint64
	i   int32
}

// cellKey orders cells by x, then y. Cells are int32 coordinates divided
// by a positive radius, so each fits in 32 bits.
func cellKey(x, y int64) uint64 { return uint64(uint32(x+1<<31))<<32 | uint64(uint32(y+1<<31)) }

func cmpCellEntry(a, b cellEntry) int {
	switch {
	case a.key < b.key:
		return -1
	case a.key > b.key:
		return 1
	}
	return 0
}

// cellRows returns, for each of the 3 rows of the 3 × 3 cells around c,
// the range of byCell (sorted by key) that the row's cells hold.
func cellRows(byCell []cellEntry, c [2]int64) (rows [3][2]int) {
	at := func(x, y int64) int {
		y = min(max(y, -1<<31), 1<<31-1) // a cell beyond the edge holds nothing
		k, _ := slices.BinarySearchFunc(byCell, cellKey(x, y), func(e cellEntry, t uint64) int { return cmpCellEntry(e, cellEntry{key: t}) })
		return k
	}
	for dx := int64(-1); dx <= 1; dx++ {
		x := c[0] + dx
		if x < -1<<31 || x > 1<<31-1 {
			continue // beyond the edge: an empty row
		}
		top := min(c[1]+1, 1<<31-1)
		lo, hi := at(x, c[1]-1), at(x, top)
		for hi < len(byCell) && byCell[hi].key == cellKey(x, top) {
			hi++
		}
		rows[dx+1] = [2]int{lo, hi}
	}
	return rows
}

func rowsLen(rows [3][2]int) int {
	return rows[0][1] - rows[0][0] + rows[1][1] - rows[1][0] + rows[2][1] - rows[2][0]
}

// appendRows appends the indexes of rows' entries to dst, sorted.
func appendRows(dst []int32, byCell []cellEntry, rows [3][2]int) []int32 {
	n := len(dst)
	for _, r := range rows {
		for _, e := range byCell[r[0]:r[1]] {
			dst = append(dst, e.i)
		}
	}
	slices.Sort(dst[n:])
	return dst
}

// cellInterest is what a player anchored in one cell sees.
type cellInterest struct{ ships, balls []int32 }

// anchor is where a player's ship was last seen, and when.
type anchor struct {
	cell [2]int64
	tick uint64
}

// anchorTicks is how long a player whose ship is in no sector (sailing
// between two) keeps the interest of where it was last seen.
const anchorTicks = 10 * TickRate

// NewFrame returns an empty frame of tick for the server side: add the
// sectors, then Seal.
func NewFrame(tick uint64) *Frame { return &Frame{Tick: tick} }

// FrameSizes remembers how many ships and balls the last frames held, so
// that the next frame's slices are allocated once, at about the right
// size. Safe for concurrent use.
type FrameSizes struct{ ships, balls atomic.Int64 }

// NewFrame returns an empty frame of tick, as NewFrame does, with room for
// a little more than the last frame noted.
func (z *FrameSizes) NewFrame(tick uint64) *Frame {
	ns, nb := z.ships.Load(), z.balls.Load()
	return &Frame{Tick: tick, Ships: make([]ShipView, 0, ns+ns/8+4), Balls: make([]BallView, 0, nb+nb/4+16)}
}

// Note records the sizes of f.
func (z *FrameSizes) Note(f *Frame) {
	z.ships.Store(int64(len(f.Ships)))
	z.balls.Store(int64(len(f.Balls)))
}

// AddSector copies the ships and balls of s into f.
func (f *Frame) AddSector(s *Sector) {
	f.Ships = slices.Grow(f.Ships, s.ShipCount())
	f.Balls = slices.Grow(f.Balls, s.BallCount())
	s.Ships(func(v ShipView) { f.Ships = append(f.Ships, v) })
	s.Balls(func(v BallView) { f.Balls = append(f.Balls, v) })
}

// Seal sorts f, indexes it for interest queries with cells of radius
// millimetres, and carries over from prev (may be nil) where the players
// whose ships are between sectors were last seen.
func (f *Frame) Seal(prev *Frame, radius int64) {
	if radius <= 0 {
		radius = DefaultInterestRadius
	}
	slices.SortFunc(f.Ships, func(a, b ShipView) int { return cmpID(a.ID, b.ID) })
	slices.SortFunc(f.Balls, func(a, b BallView) int { return cmpID(a.ID, b.ID) })
	f.cell = radius
	ships := make([]cellEntry, len(f.Ships))
	f.anchors = make(map[uint32]anchor, len(f.Ships)+len(f.Ships)/8)
	for i, v := range f.Ships {
		c := f.cellOf(v.X, v.Y)
		ships[i] = cellEntry{cellKey(c[0], c[1]), int32(i)}
		f.anchors[v.Player] = anchor{c, f.Tick}
	}
	balls := make([]cellEntry, len(f.Balls))
	for i, v := range f.Balls {
		c := f.cellOf(v.X, v.Y)
		balls[i] = cellEntry{cellKey(c[0], c[1]), int32(i)}
	}
	slices.SortFunc(ships, cmpCellEntry)
	slices.SortFunc(balls, cmpCellEntry)
	if prev != nil {
		for p, a := range prev.anchors {
			if _, ok := f.anchors[p]; !ok && a.tick+anchorTicks >= f.Tick {
				f.anchors[p] = a
			}
		}
	}
	// One allocation for every cell's interest, one for their indexes
	// (the cells' slices share it, each capped at its own length).
	type cellRanges struct {
		cell         [2]int64
		ships, balls [3][2]int
	}
	var cells []cellRanges
	total := 0
	f.near = make(map[[2]int64]*cellInterest, 64)
	for _, a := range f.anchors {
		if _, ok := f.near[a.cell]; ok {
			continue
		}
		f.near[a.cell] = nil
		cr := cellRanges{cell: a.cell, ships: cellRows(ships, a.cell), balls: cellRows(balls, a.cell)}
		total += rowsLen(cr.ships) + rowsLen(cr.balls)
		cells = append(cells, cr)
	}
	interests := make([]cellInterest, len(cells))
	idx := make([]int32, 0, total)
	for k, cr := range cells {
		n := len(idx)
		idx = appendRows(idx, ships, cr.ships)
		m := len(idx)
		idx = appendRows(idx, balls, cr.balls)
		interests[k] = cellInterest{ships: idx[n:m:m], balls: idx[m:len(idx):len(idx)]}
		f.near[cr.cell] = &interests[k]
	}
}

// interestKey says which interest set viewer has in f: all of it
// (spectators), none, or that of one cell. Viewers with equal keys see the
// same part of f.
type interestKey struct {
	kind uint8 // 0 none, 1 a cell, 2 everything
	cell [2]int64
}

func (f *Frame) interestKeyOf(viewer uint32) interestKey {
	if viewer == 0 {
		return interestKey{kind: 2}
	}
	if a, ok := f.anchors[viewer]; ok {
		return interestKey{kind: 1, cell: a.cell}
	}
	return interestKey{}
}

func (f *Frame) cellOf(x, y int32) [2]int64 {
	return [2]int64{floorDiv(int64(x), f.cell), floorDiv(int64(y), f.cell)}
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

func cmpID(a, b lineage.EntityID) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// interest appends to ships and balls the indexes (increasing) of what
// viewer sees in f: everything for viewer 0 (a spectator), else the 3 × 3
// cells around its ship.
func (f *Frame) interest(viewer uint32, ships, balls []int32) ([]int32, []int32) {
	if viewer == 0 {
		for i := range f.Ships {
			ships = append(ships, int32(i))
		}
		for i := range f.Balls {
			balls = append(balls, int32(i))
		}
		return ships, balls
	}
	a, ok := f.anchors[viewer]
	if !ok {
		return ships, balls
	}
	ci := f.near[a.cell]
	return append(ships, ci.ships...), append(balls, ci.balls...)
}

// View returns what viewer sees of f, as a client rebuilds it.
func (f *Frame) View(viewer uint32) *Frame {
	si, bi := f.interest(viewer, nil, nil)
	out := &Frame{Tick: f.Tick, Ships: make([]ShipView, 0, len(si)), Balls: make([]BallView, 0, len(bi))}
	for _, i := range si {
		out.Ships = append(out.Ships, f.Ships[i])
	}
	for _, i := range bi {
		out.Balls = append(out.Balls, f.Balls[i])
	}
	return out
}

// Ship returns the view of player's ship in f.
func (f *Frame) Ship(player uint32) (ShipView, bool) {
	for _, v := range f.Ships {
		if v.Player == player {
			return v, true
		}
	}
	return ShipView{}, false
}

// StateEncoder encodes deltas between sealed frames. It keeps scratch
// space, so it is not safe for concurrent use; one per fan-out goroutine.
type StateEncoder struct {
	curS, curB, baseS, baseB []int32
	removed                  []lineage.EntityID
	added                    []int32
}

// Encode appends to dst what viewer (a player id; 0 for a spectator) needs
// to go from its view of base (nil: nothing, a full update) to its view of
// cur. Both frames must be sealed, base older than cur.
func (e *StateEncoder) Encode(dst []byte, cur, base *Frame, viewer uint32) []byte {
	e.curS, e.curB = cur.interest(viewer, e.curS[:0], e.curB[:0])
	e.baseS, e.baseB = e.baseS[:0], e.baseB[:0]
	var dt uint64
	if base != nil {
		e.baseS, e.baseB = base.interest(viewer, e.baseS, e.baseB)
		dt = cur.Tick - base.Tick
	}
	dst = append(dst, stateFormat)

	// Ships: removals, then changes.
	removed := e.removed[:0]
	var i, j int
	for i < len(e.baseS) || j < len(e.curS) {
		switch {
		case j == len(e.curS) || (i < len(e.baseS) && base.Ships[e.baseS[i]].ID < cur.Ships[e.curS[j]].ID):
			removed = append(removed, base.Ships[e.baseS[i]].ID)
			i++
		case i == len(e.baseS) || cur.Ships[e.curS[j]].ID < base.Ships[e.baseS[i]].ID:
			j++
		default:
			i++
			j++
		}
	}
	dst = appendIDs(dst, removed)
	countAt := len(dst)
	dst = append(dst, 0, 0, 0) // ship count placeholder: 3-byte varint
	var n int
	var prev lineage.EntityID
	i = 0
	for _, cj := range e.curS {
		v := cur.Ships[cj]
		for i < len(e.baseS) && base.Ships[e.baseS[i]].ID < v.ID {
			i++
		}
		if i < len(e.baseS) && base.Ships[e.baseS[i]].ID == v.ID {
			b := base.Ships[e.baseS[i]]
			mask := shipMask(v, b, dt)
			if mask == 0 {
				continue
			}
			dst = binary.AppendUvarint(dst, uint64(v.ID-prev))
			dst = appendShipDiff(dst, mask, v, b)
		} else {
			dst = binary.AppendUvarint(dst, uint64(v.ID-prev))
			dst = appendShipDiff(dst, shipFull, v, ShipView{})
		}
		prev = v.ID
		n++
	}
	putVarint3(dst[countAt:], uint64(n))

	// Balls: a ball that keeps to its flight carries over; any other
	// change is a removal and a new ball.
	removed = removed[:0]
	added := e.added[:0]
	i, j = 0, 0
	for i < len(e.baseB) || j < len(e.curB) {
		switch {
		case j == len(e.curB) || (i < len(e.baseB) && base.Balls[e.baseB[i]].ID < cur.Balls[e.curB[j]].ID):
			removed = append(removed, base.Balls[e.baseB[i]].ID)
			i++
		case i == len(e.baseB) || cur.Balls[e.curB[j]].ID < base.Balls[e.baseB[i]].ID:
			added = append(added, e.curB[j])
			j++
		default:
			b, c := base.Balls[e.baseB[i]], cur.Balls[e.curB[j]]
			if flown(b, dt) != c {
				removed = append(removed, b.ID)
				added = append(added, e.curB[j])
			}
			i++
			j++
		}
	}
	dst = appendIDs(dst, removed)
	dst = binary.AppendUvarint(dst, uint64(len(added)))
	prev = 0
	for _, k := range added {
		v := cur.Balls[k]
		dst = binary.AppendUvarint(dst, uint64(v.ID-prev))
		prev = v.ID
		dst = binary.AppendUvarint(dst, uint64(v.Owner))
		dst = binary.AppendUvarint(dst, uint64(v.Sector))
		dst = binary.AppendVarint(dst, int64(v.X))
		dst = binary.AppendVarint(dst, int64(v.Y))
		dst = binary.AppendVarint(dst, int64(v.VX))
		dst = binary.AppendVarint(dst, int64(v.VY))
		dst = binary.AppendUvarint(dst, uint64(v.Age))
		dst = binary.AppendUvarint(dst, uint64(v.Lifetime))
	}
	e.removed, e.added = removed[:0], added[:0]
	return dst
}

// putVarint3 writes v (< 2^21) as a 3-byte uvarint.
func putVarint3(b []byte, v uint64) {
	b[0] = byte(v) | 0x80
	b[1] = byte(v>>7) | 0x80
	b[2] = byte(v >> 14)
}

func appendIDs(dst []byte, ids []lineage.EntityID) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(ids)))
	var prev lineage.EntityID
	for _, id := range ids {
		dst = binary.AppendUvarint(dst, uint64(id-prev))
		prev = id
	}
	return dst
}

// carried is the ship b after dt ticks with no news: its reloads run down.
func carried(b ShipView, dt uint64) ShipView {
	run := func(r uint32) uint32 {
		if uint64(r) <= dt {
			return 0
		}
		return r - uint32(dt)
	}
	b.PortReload, b.StarboardReload = run(b.PortReload), run(b.StarboardReload)
	return b
}

// flown is the ball b after dt ticks of straight flight.
func flown(b BallView, dt uint64) BallView {
	b.X += b.VX * int32(dt)
	b.Y += b.VY * int32(dt)
	b.Age += uint32(dt)
	return b
}

func shipMask(v, b ShipView, dt uint64) uint8 {
	b = carried(b, dt)
	var m uint8
	if v.X != b.X || v.Y != b.Y {
		m |= shipPos
	}
	if v.Heading != b.Heading {
		m |= shipHeading
	}
	if v.Speed != b.Speed {
		m |= shipSpeed
	}
	if v.Hull != b.Hull || v.Sunk != b.Sunk {
		m |= shipHull
	}
	if v.Throttle != b.Throttle || v.Rudder != b.Rudder {
		m |= shipOrders
	}
	if v.PortReload != b.PortReload || v.StarboardReload != b.StarboardReload {
		m |= shipReload
	}
	if v.Player != b.Player || v.Sector != b.Sector {
		m |= shipIdentity
	}
	return m
}

// appendShipDiff writes mask and the fields it names: absolute values for
// shipFull, else differences to b (positions, heading, speed) or new values.
func appendShipDiff(dst []byte, mask uint8, v, b ShipView) []byte {
	dst = append(dst, mask)
	if mask&shipFull != 0 {
		mask = 0xFE
		b = ShipView{}
	}
	if mask&shipIdentity != 0 {
		dst = binary.AppendUvarint(dst, uint64(v.Player))
		dst = binary.AppendUvarint(dst, uint64(v.Sector))
	}
	if mask&shipPos != 0 {
		dst = binary.AppendVarint(dst, int64(v.X)-int64(b.X))
		dst = binary.AppendVarint(dst, int64(v.Y)-int64(b.Y))
	}
	if mask&shipHeading != 0 {
		dst = binary.AppendVarint(dst, int64(int16(v.Heading-b.Heading)))
	}
	if mask&shipSpeed != 0 {
		dst = binary.AppendVarint(dst, int64(v.Speed)-int64(b.Speed))
	}
	if mask&shipHull != 0 {
		dst = binary.AppendVarint(dst, int64(v.Hull))
		sunk := byte(0)
		if v.Sunk {
			sunk = 1
		}
		dst = append(dst, sunk)
	}
	if mask&shipOrders != 0 {
		dst = append(dst, byte(v.Throttle), byte(v.Rudder))
	}
	if mask&shipReload != 0 {
		dst = binary.AppendUvarint(dst, uint64(v.PortReload))
		dst = binary.AppendUvarint(dst, uint64(v.StarboardReload))
	}
	return dst
}

// stateReader decodes a payload; the first error sticks.
type stateReader struct {
	b   []byte
	err error
}

func (r *stateReader) fail(format string, a ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s", ErrBadState, fmt.Sprintf(format, a...))
	}
}

// uvarint reads a uvarint of at most max. One-byte values, most of an
// update's, take an inlined fast path; the rest go through uvarintSlow.
func (r *stateReader) uvarint(max uint64) uint64 {
	if len(r.b) > 0 && r.b[0] < 0x80 && uint64(r.b[0]) <= max && r.err == nil {
		v := uint64(r.b[0])
		r.b = r.b[1:]
		return v
	}
	return r.uvarintSlow(max)
}

func (r *stateReader) uvarintSlow(max uint64) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("truncated varint")
		return 0
	}
	r.b = r.b[n:]
	if v > max {
		r.fail("value %d exceeds %d", v, max)
		return 0
	}
	return v
}

// varint reads a zigzag varint in [lo, hi], one-byte values inlined as
// in uvarint.
func (r *stateReader) varint(lo, hi int64) int64 {
	if len(r.b) > 0 && r.b[0] < 0x80 && r.err == nil {
		x := int64(r.b[0])
		if v := x>>1 ^ -(x & 1); v >= lo && v <= hi {
			r.b = r.b[1:]
			return v
		}
	}
	return r.varintSlow(lo, hi)
}

func (r *stateReader) varintSlow(lo, hi int64) int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail("truncated varint")
		return 0
	}
	r.b = r.b[n:]
	if v < lo || v > hi {
		r.fail("value %d outside [%d, %d]", v, lo, hi)
		return 0
	}
	return v
}

func (r *stateReader) byte1() byte {
	if r.err != nil {
		return 0
	}
	if len(r.b) == 0 {
		r.fail("truncated")
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *stateReader) ids(ids []lineage.EntityID, max int) []lineage.EntityID {
	n := int(r.uvarint(uint64(max)))
	ids = slices.Grow(ids[:0], min(n, len(r.b)))
	var prev lineage.EntityID
	for k := 0; k < n && r.err == nil; k++ {
		d := r.uvarint(1<<63 - 1)
		if k > 0 && d == 0 || uint64(prev)+d < uint64(prev) {
			r.fail("ids not increasing")
		}
		prev += lineage.EntityID(d)
		ids = append(ids, prev)
	}
	return ids
}

// ApplyDelta rebuilds the frame of tick from base (the client's frame of
// an earlier tick; nil for a full update) and a payload from
// StateEncoder.Encode. It validates everything: a malformed payload, or one
// that does not fit base, returns an error wrapping ErrBadState.
func ApplyDelta(base *Frame, tick uint64, payload []byte) (*Frame, error) {
	return applyDelta(base, tick, payload, nil, nil)
}

// deltaScratch is ApplyDelta's temporary space, kept by a StateTracker
// from update to update (the frames it returns never share it).
type deltaScratch struct {
	removed []lineage.EntityID
	ships   []ShipView
	balls   []BallView
}

// applyDelta is ApplyDelta with scratch space and, if reuse is not nil,
// a frame (not base) whose memory becomes the result's.
//
// It merges in one pass per kind: the changes are decoded straight into
// the result, between the runs of base entities that carry over, and
// nothing is decoded into scratch first and copied again. What it accepts
// and what it rebuilds are those of the two-pass merge it replaced
// (applyDeltaReference in the tests, which compare them).
func applyDelta(base *Frame, tick uint64, payload []byte, sc *deltaScratch, reuse *Frame) (*Frame, error) {
	if sc == nil {
		sc = &deltaScratch{}
	}
	r := stateReader{b: payload}
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
	var out *Frame
	var shipsMem []ShipView
	var ballsMem []BallView
	if reuse != nil {
		shipsMem, ballsMem = reuse.Ships[:0], reuse.Balls[:0]
		*reuse = Frame{Tick: tick}
		out = reuse
	} else {
		out = &Frame{Tick: tick}
	}
	ships, err := mergeShips(&r, baseShips, dt, sc, shipsMem)
	if err != nil {
		return nil, err
	}
	out.Ships = ships
	balls, err := mergeBalls(&r, baseBalls, dt, sc, ballsMem)
	if err != nil {
		return nil, err
	}
	out.Balls = balls
	return out, nil
}

// mergeShips decodes the ships' part of an update (removals, then
// changes) and merges it with base into dst: base ships not removed carry
// over (carried), changed ones are replaced, new ones inserted.
func mergeShips(r *stateReader, base []ShipView, dt uint64, sc *deltaScratch, dst []ShipView) ([]ShipView, error) {
	removed := r.ids(sc.removed[:0], maxStateShips)
	defer func() { sc.removed = removed[:0] }()
	n := int(r.uvarint(maxStateShips))
	if r.err != nil {
		return nil, r.err
	}
	out := slices.Grow(dst, len(base)+min(n, len(r.b)))
	bi, ri := 0, 0
	// carry appends the base ships below id that are not removed.
	carry := func(id lineage.EntityID, all bool) error {
		for ; bi < len(base) && (all || base[bi].ID < id); bi++ {
			b := &base[bi]
			if ri < len(removed) && removed[ri] <= b.ID {
				if removed[ri] < b.ID {
					return fmt.Errorf("%w: removed ship %d not in the base", ErrBadState, removed[ri])
				}
				ri++
				continue
			}
			out = append(out, carried(*b, dt))
		}
		return nil
	}
	var prev lineage.EntityID
	for k := 0; k < n; k++ {
		d := r.uvarint(1<<63 - 1)
		if r.err != nil {
			return nil, r.err
		}
		if k > 0 && d == 0 || uint64(prev)+d < uint64(prev) {
			r.fail("ship ids not increasing")
			return nil, r.err
		}
		prev += lineage.EntityID(d)
		if err := carry(prev, false); err != nil {
			return nil, err
		}
		inBase := bi < len(base) && base[bi].ID == prev
		if ri < len(removed) && removed[ri] <= prev {
			if removed[ri] == prev && inBase {
				return nil, fmt.Errorf("%w: ship %d both removed and updated", ErrBadState, prev)
			}
			return nil, fmt.Errorf("%w: removed ship %d not in the base", ErrBadState, removed[ri])
		}
		mask := r.byte1()
		var b ShipView
		if mask&shipFull != 0 {
			if mask != shipFull {
				r.fail("full ship with other mask bits")
				return nil, r.err
			}
			mask = 0xFE
		} else {
			if !inBase {
				r.fail("change to ship %d not in the base", prev)
				return nil, r.err
			}
			b = carried(base[bi], dt)
		}
		if inBase {
			bi++ // replaced
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
		if r.err != nil {
			return nil, r.err
		}
		out = append(out, v)
	}
	if err := carry(0, true); err != nil {
		return nil, err
	}
	if ri < len(removed) {
		return nil, fmt.Errorf("%w: removed ship %d not in the base", ErrBadState, removed[ri])
	}
	if len(out) > maxStateShips {
		return nil, fmt.Errorf("%w: %d ships", ErrBadState, len(out))
	}
	return out, nil
}

// flyRun appends to dst the balls of src below stop (bounded; else all of
// them), flown on by vdt ticks (adt: the same as a uint32), and says how
// many.
func flyRun(dst, src []BallView, stop lineage.EntityID, bounded bool, vdt int32, adt uint32) ([]BallView, int) {
	dst = slices.Grow(dst, len(src))
	n := len(dst)
	free := dst[n : n+len(src)]
	i := 0
	for ; i < len(src); i++ {
		b := &src[i]
		if bounded && b.ID >= stop {
			break
		}
		o := &free[i]
		*o = *b
		o.X += b.VX * vdt
		o.Y += b.VY * vdt
		o.Age += adt
	}
	return dst[:n+i], i
}

// mergeBalls decodes the balls' part of an update (removals, then new
// balls), which must end the payload, and merges it with base into dst:
// base balls not removed fly on (flown), new ones are inserted (a ball
// removed and sent again replaces its base self).
func mergeBalls(r *stateReader, base []BallView, dt uint64, sc *deltaScratch, dst []BallView) ([]BallView, error) {
	removed := r.ids(sc.removed[:0], maxStateBalls)
	defer func() { sc.removed = removed[:0] }()
	n := int(r.uvarint(maxStateBalls))
	if r.err != nil {
		return nil, r.err
	}
	out := slices.Grow(dst, len(base)+min(n, len(r.b)))
	bi, ri := 0, 0
	vdt, adt := int32(dt), uint32(dt)
	// carry appends the base balls below lim (all: every one left) that
	// are not removed, flown on by dt: the runs between removals in a
	// tight loop.
	carry := func(lim lineage.EntityID, all bool) error {
		for bi < len(base) && (all || base[bi].ID < lim) {
			stop, bounded := lim, !all
			if ri < len(removed) && (!bounded || removed[ri] < stop) {
				stop, bounded = removed[ri], true
			}
			var m int
			out, m = flyRun(out, base[bi:], stop, bounded, vdt, adt)
			bi += m
			if bi == len(base) || !all && base[bi].ID >= lim {
				return nil
			}
			// The run stopped at the next removal (stop, below lim).
			if base[bi].ID != removed[ri] {
				return fmt.Errorf("%w: removed ball %d not in the base", ErrBadState, removed[ri])
			}
			bi++
			ri++
		}
		return nil
	}
	var prev lineage.EntityID
	for k := 0; k < n; k++ {
		d := r.uvarint(1<<63 - 1)
		if r.err != nil {
			return nil, r.err
		}
		if k > 0 && d == 0 || uint64(prev)+d < uint64(prev) {
			r.fail("ball ids not increasing")
			return nil, r.err
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
		if r.err != nil {
			return nil, r.err
		}
		if err := carry(prev, false); err != nil {
			return nil, err
		}
		if bi < len(base) && base[bi].ID == prev {
			if ri == len(removed) || removed[ri] != prev {
				return nil, fmt.Errorf("%w: new ball %d already in the base", ErrBadState, prev)
			}
			bi++ // removed and sent again
			ri++
		}
		out = append(out, v)
	}
	if len(r.b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the update", ErrBadState, len(r.b))
	}
	if err := carry(0, true); err != nil {
		return nil, err
	}
	if ri < len(removed) {
		return nil, fmt.Errorf("%w: removed ball %d not in the base", ErrBadState, removed[ri])
	}
	if len(out) > maxStateBalls {
		return nil, fmt.Errorf("%w: %d balls", ErrBadState, len(out))
	}
	return out, nil
}

// StateTracker rebuilds a client's frames from its state updates. It keeps
// the frames of the last ticks so that an update against any tick the
// client acknowledged can be applied. Not safe for concurrent use.
type StateTracker struct {
	frames  [16]*Frame // a server bases deltas on ticks at most 15 back
	latest  *Frame
	scratch deltaScratch
	// Reuse makes Apply build the new frame in the memory of the frame it
	// replaces in its ring (one of a tick 16 or more older; never the
	// base nor Latest), instead of allocating one per update: the caller
	// must not use a frame once it is neither Latest nor one of the 15
	// ticks before it. A bot that reads only the latest frame, under the
	// same lock as Apply, allocates nothing per update this way.
	Reuse bool
	// Pinned keeps, instead of the frames of the last 16 ticks, only the
	// latest and those of the ticks the caller pinned (Pin: the ticks it
	// acknowledged to the server, the only ones a server bases deltas
	// on), and builds each new frame in the memory of one it let go:
	// about 7 frames held instead of 16, and the memory rewritten the
	// most recently freed. The caller must not use a frame once it is
	// neither Latest nor pinned; late updates (older than Latest) are
	// applied into new memory and not kept.
	Pinned bool
	pins   []*Frame // pinned frames, oldest first
	free   []*Frame // frames let go, whose memory the next update reuses
}

// Pinned mode's limits: a pin older than the latest tick by more than
// pinTicks (servers base deltas at most 15 back) is let go, and so is the
// oldest beyond maxPins.
const (
	pinTicks = 16
	maxPins  = 8
)

// Pin keeps the frame of tick as a possible base (Pinned mode) and
// reports whether it holds it: only the latest frame can be pinned. A
// caller acknowledges to the server only the ticks it pinned.
func (t *StateTracker) Pin(tick uint64) bool {
	if !t.Pinned || t.latest == nil || t.latest.Tick != tick {
		return false
	}
	if n := len(t.pins); n == 0 || t.pins[n-1] != t.latest {
		t.pins = append(t.pins, t.latest)
	}
	t.expirePins()
	return true
}

// expirePins lets go of the pins too old or too many.
func (t *StateTracker) expirePins() {
	k := 0
	for k < len(t.pins) && (t.pins[k].Tick+pinTicks < t.latest.Tick || len(t.pins)-k > maxPins) {
		if t.pins[k] != t.latest {
			t.free = append(t.free, t.pins[k])
		}
		k++
	}
	if k > 0 {
		n := copy(t.pins, t.pins[k:])
		clear(t.pins[n:])
		t.pins = t.pins[:n]
	}
}

func (t *StateTracker) pinned(f *Frame) bool {
	for _, p := range t.pins {
		if p == f {
			return true
		}
	}
	return false
}

// applyPinned is Apply in Pinned mode.
func (t *StateTracker) applyPinned(tick, baseTick uint64, payload []byte) (*Frame, error) {
	var base *Frame
	if baseTick != 0 {
		if t.latest != nil && t.latest.Tick == baseTick {
			base = t.latest
		} else {
			for _, p := range t.pins {
				if p.Tick == baseTick {
					base = p
				}
			}
		}
		if base == nil {
			return nil, fmt.Errorf("%w: update of tick %d against tick %d (not held)", ErrBaseNotHeld, tick, baseTick)
		}
	}
	late := t.latest != nil && tick <= t.latest.Tick
	var reuse *Frame
	if n := len(t.free); n > 0 && !late {
		reuse = t.free[n-1]
		t.free[n-1] = nil
		t.free = t.free[:n-1]
	}
	f, err := applyDelta(base, tick, payload, &t.scratch, reuse)
	if err != nil {
		if reuse != nil {
			t.free = append(t.free, reuse) // only memory: its contents do not matter
		}
		return nil, fmt.Errorf("update of tick %d against tick %d: %w", tick, baseTick, err)
	}
	if late {
		return f, nil
	}
	if old := t.latest; old != nil && !t.pinned(old) {
		t.free = append(t.free, old)
	}
	t.latest = f
	t.expirePins()
	return f, nil
}

// Apply decodes an update of tick against baseTick (0: full) and returns
// the new frame. An update older than the latest frame is applied but does
// not become Latest.
func (t *StateTracker) Apply(tick, baseTick uint64, payload []byte) (*Frame, error) {
	if t.Pinned {
		return t.applyPinned(tick, baseTick, payload)
	}
	var base *Frame
	if baseTick != 0 {
		base = t.frames[baseTick%uint64(len(t.frames))]
		if base == nil || base.Tick != baseTick {
			held := uint64(0)
			if base != nil {
				held = base.Tick
			}
			return nil, fmt.Errorf("%w: update of tick %d against tick %d (its slot holds tick %d)", ErrBaseNotHeld, tick, baseTick, held)
		}
	}
	// A late update never replaces a newer frame in its slot: that frame
	// may be the base the server uses next.
	slot := &t.frames[tick%uint64(len(t.frames))]
	replace := *slot == nil || (*slot).Tick < tick
	var reuse *Frame
	if t.Reuse && replace && *slot != nil && *slot != base && *slot != t.latest {
		reuse = *slot
	}
	f, err := applyDelta(base, tick, payload, &t.scratch, reuse)
	if err != nil {
		if reuse != nil {
			*slot = nil // its memory is half overwritten; 16 ticks old, no base the server still uses
		}
		return nil, fmt.Errorf("update of tick %d against tick %d: %w", tick, baseTick, err)
	}
	if replace {
		*slot = f
	}
	if t.latest == nil || tick > t.latest.Tick {
		t.latest = f
	}
	return f, nil
}

// Latest returns the newest frame (nil before the first update).
func (t *StateTracker) Latest() *Frame { return t.latest }

// SharedEncoder encodes state updates for many viewers of the same ticks,
// encoding each distinct update once: viewers anchored in the same
// interest cell, with the same base tick and the same cell in the base,
// get the same bytes. It keeps the updates of the newest tick it was asked
// for (and of older ones asked for since: the spectators'), so call it
// for one tick's fan-out after another. Not safe for concurrent use.
type SharedEncoder struct {
	enc   StateEncoder
	tick  uint64 // newest tick encoded
	cache map[sharedKey][]byte
	arena []byte
	Hits  uint64 // updates served from the cache (for tests and metrics)
}

type sharedKey struct {
	tick, base uint64
	cur, prev  interestKey
}

// Encode appends to dst what StateEncoder.Encode would for the same
// arguments.
func (e *SharedEncoder) Encode(dst []byte, cur, base *Frame, viewer uint32) []byte {
	if e.cache == nil || cur.Tick > e.tick {
		if e.cache == nil {
			e.cache = map[sharedKey][]byte{}
		}
		clear(e.cache)
		e.tick, e.arena = cur.Tick, e.arena[:0]
	}
	k := sharedKey{tick: cur.Tick, cur: cur.interestKeyOf(viewer)}
	if base != nil {
		k.base, k.prev = base.Tick, base.interestKeyOf(viewer)
	}
	if p, ok := e.cache[k]; ok {
		e.Hits++
		return append(dst, p...)
	}
	if cap(e.arena)-len(e.arena) < 64<<10 && len(e.arena) > 0 {
		e.arena = make([]byte, 0, max(2*cap(e.arena), 256<<10)) // earlier entries keep the old array
	}
	n := len(e.arena)
	e.arena = e.enc.Encode(e.arena, cur, base, viewer)
	p := e.arena[n:len(e.arena):len(e.arena)]
	e.cache[k] = p
	return append(dst, p...)
}
