package table

import (
	"encoding/binary"
	"math/bits"
)

// The record hash is a wyhash-style function: 64x64→128-bit multiplies
// folded with XOR ("mum"), fixed constants, no per-process seed. It must
// give the same value on every machine and in every process, because state
// hashes are compared across live play, recovery and verification
// (hash/maphash is randomly seeded per process and cannot be used).
const (
	wyP0 = 0xa0761d6478bd642f
	wyP1 = 0xe7037ed1a0b428db
	wyP2 = 0x8ebc6af09c88c6e3
	wyP3 = 0x589965cc75374cc3
)

// mum multiplies a and b to 128 bits and folds the halves.
func mum(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// HashBytes returns a deterministic 64-bit hash of b under seed. It is the
// hash state tables use for records; games may use it for their own
// deterministic hashing needs.
func HashBytes(seed uint64, b []byte) uint64 {
	n := len(b)
	seed ^= wyP0
	for len(b) > 16 {
		seed = mum(binary.LittleEndian.Uint64(b)^wyP1, binary.LittleEndian.Uint64(b[8:])^seed)
		b = b[16:]
	}
	var a, c uint64
	switch {
	case len(b) >= 8:
		a = binary.LittleEndian.Uint64(b)
		c = binary.LittleEndian.Uint64(b[len(b)-8:])
	case len(b) >= 4:
		a = uint64(binary.LittleEndian.Uint32(b))
		c = uint64(binary.LittleEndian.Uint32(b[len(b)-4:]))
	case len(b) > 0:
		a = uint64(b[0])<<16 | uint64(b[len(b)>>1])<<8 | uint64(b[len(b)-1])
	}
	return mum(wyP1^uint64(n), mum(a^wyP1, c^seed))
}

// recordSeed is the per-record seed: it binds a record's hash to its table
// and slot, so equal bytes in different slots or tables hash differently and
// a sum of record hashes identifies the whole state.
func recordSeed(tableID uint32, slot int) uint64 {
	return mum(uint64(tableID)^wyP2, uint64(slot)^wyP3)
}

// Mix64 is a deterministic 64-bit finalizer (splitmix64's), for games and
// engines that combine hashes or derive PRNG seeds.
func Mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
