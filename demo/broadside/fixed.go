package broadside

import "math/bits"

// Fixed-point conventions of the game state (no floating point anywhere in
// Step):
//
//   - lengths are int32 millimetres (the world is at most 100 km across, so
//     coordinates stay far from overflow and products fit in int64);
//   - speeds are millimetres per tick;
//   - angles are binary angles: uint16, 65536 units per turn, 0 along +X,
//     increasing counter-clockwise (+Y is "north");
//   - Sin and Cos return Q16 fractions (65536 = 1.0) from a 4096-entry table
//     computed at start-up with integer arithmetic only.

// Angle is a binary angle: 65536 units per full turn, 0 along +X,
// counter-clockwise.
type Angle = uint16

// One is 1.0 in Q16.
const One = 1 << 16

const (
	// Deg90 is a quarter turn.
	Deg90 Angle = 1 << 14
	// Deg180 is a half turn.
	Deg180 Angle = 1 << 15
	// Deg270 is three quarters of a turn.
	Deg270 Angle = 3 << 14
)

const (
	sinBits    = 12
	sinEntries = 1 << sinBits // entries per full turn
	quarter    = sinEntries / 4
)

// sinTable holds sin(2πk/4096) in Q16 for k in [0, 4096).
var sinTable = buildSinTable()

// halfPiQ62 is π/2 × 2^62, rounded down.
const halfPiQ62 = 7244019458077122842

// mulQ62 multiplies two non-negative Q62 numbers.
func mulQ62(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi<<2 | lo>>62
}

// sinQ62 returns sin(θ) for θ in [0, π/2] (Q62) by its Taylor series in
// 128-bit integer arithmetic; the result is exact to far below Q16
// precision. The partial sums stay positive because θ² < 6.
func sinQ62(theta uint64) uint64 {
	t2 := mulQ62(theta, theta)
	sum, term := theta, theta
	for k := uint64(1); ; k++ {
		term = mulQ62(term, t2) / ((2 * k) * (2*k + 1))
		if term == 0 {
			return sum
		}
		if k%2 == 1 {
			sum -= term
		} else {
			sum += term
		}
	}
}

func buildSinTable() *[sinEntries]int32 {
	var t [sinEntries]int32
	for k := 0; k <= quarter; k++ {
		// θ = k/quarter × π/2, computed without overflowing 64 bits.
		theta := halfPiQ62/quarter*uint64(k) + halfPiQ62%quarter*uint64(k)/quarter
		v := int32((sinQ62(theta) + 1<<45) >> 46) // round Q62 → Q16
		t[k] = v
		if k < quarter {
			t[2*quarter-k] = v
		}
		if k > 0 {
			t[sinEntries-k] = -v
			if k < quarter {
				t[2*quarter+k] = -v
			}
		}
	}
	return &t
}

// Sin returns sin(a) in Q16.
func Sin(a Angle) int32 { return sinTable[a>>(16-sinBits)] }

// Cos returns cos(a) in Q16.
func Cos(a Angle) int32 { return sinTable[(a+Deg90)>>(16-sinBits)] }

// mulQ16 returns v × f for a Q16 fraction f, rounded toward -∞.
func mulQ16(v, f int32) int32 { return int32(int64(v) * int64(f) >> 16) }

// Atan2 returns the binary angle of the vector (x, y), rounded down to the
// table's resolution (16 units, 0.09°), using only integer arithmetic (a
// binary search on the sine table); Atan2(0, 0) is 0.
func Atan2(y, x int64) Angle {
	if x == 0 && y == 0 {
		return 0
	}
	// Reduce to the first octant: 0 ≤ y' ≤ x'.
	ax, ay := x, y
	if ax < 0 {
		ax = -ax
	}
	if ay < 0 {
		ay = -ay
	}
	swap := ay > ax
	if swap {
		ax, ay = ay, ax
	}
	for ax > 1<<40 { // keep the products below in 64 bits
		ax, ay = ax>>1, ay>>1
	}
	// The largest table step k in [0, 45°] with tan(k) ≤ ay/ax, that is
	// sin(k)·ax ≤ cos(k)·ay.
	lo, hi := 0, quarter/2
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if int64(sinTable[mid])*ax <= int64(sinTable[quarter-mid])*ay {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	a := Angle(lo << (16 - sinBits))
	if swap {
		a = Deg90 - a
	}
	switch {
	case x >= 0 && y >= 0:
		return a
	case x < 0 && y >= 0:
		return Deg180 - a
	case x < 0:
		return Deg180 + a
	default:
		return -a
	}
}

// isqrt returns ⌊√n⌋.
func isqrt(n uint64) uint64 {
	if n < 2 {
		return n
	}
	x := uint64(1) << ((bits.Len64(n) + 1) / 2) // ≥ √n
	for {
		y := (x + n/x) / 2
		if y >= x {
			return x
		}
		x = y
	}
}

// rng is splitmix64: the only source of randomness in the game, always
// seeded from the world seed and log-derived values. A stream is keyed by
// the one event it decides (a ship's spawn, a broadside, a hit), so the
// draws of an event never depend on how many other events drew before it.
type rng struct{ s uint64 }

// newRNG returns the stream keyed by parts (a domain tag, then the event's
// identity).
func newRNG(parts ...uint64) rng {
	s := uint64(0x9e3779b97f4a7c15)
	for _, p := range parts {
		s = mix64(s ^ p)
	}
	return rng{s}
}

func (r *rng) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	return mix64(r.s)
}

// intn returns a value in [0, n) for n > 0.
func (r *rng) intn(n uint64) uint64 {
	hi, _ := bits.Mul64(r.next(), n)
	return hi
}

// between returns a value in [lo, hi].
func (r *rng) between(lo, hi int32) int32 {
	return lo + int32(r.intn(uint64(int64(hi)-int64(lo)+1)))
}

func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
