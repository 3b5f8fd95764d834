package broadside

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/anoptic/broadside/lineage"
	"github.com/anoptic/broadside/replay"
)

// A sector's part of a tick's frame, as a sector worker publishes it for
// the front ends (natsworld.WorkerConfig.FramePart) and a front end
// decodes it back into the tick's Frame (world.PartFrame):
//
//	version 1 | ships u32 | balls u32 | ship × ships | ball × balls
//
// ship: id u64 | player u32 | sector u16 | x i32 | y i32 | heading u16 |
// speed i32 | hull i16 | sunk u8 | throttle i8 | rudder i8 | port reload
// u32 | starboard reload u32; ball: id u64 | owner u64 | sector u16 | x,
// y, vx, vy i32 | age u32 | lifetime u32. All big-endian.
const (
	sectorPartVersion = 1
	sectorPartHeader  = 1 + 4 + 4
	shipPartSize      = 8 + 4 + 2 + 4 + 4 + 2 + 4 + 2 + 1 + 1 + 1 + 4 + 4
	ballPartSize      = 8 + 8 + 2 + 4*4 + 4 + 4
	// MaxSectorPart is the largest sector part accepted: it travels in one
	// NATS message (1 MiB by default) with the frame's header and the
	// tick's applied commands.
	MaxSectorPart = 768 << 10
)

// EncodeSectorPart returns sector shard's part of the frame after a tick
// (natsworld.WorkerConfig.FramePart): its ships and balls. It runs on the
// sector's runner goroutine and copies what it needs; nil for a sim that
// is not a Broadside sector.
func EncodeSectorPart(_ uint32, sim replay.Sim) []byte {
	s, ok := sim.(*Sector)
	if !ok {
		return nil
	}
	var ships, balls uint32
	s.Ships(func(ShipView) { ships++ })
	s.Balls(func(BallView) { balls++ })
	b := make([]byte, sectorPartHeader, sectorPartHeader+int(ships)*shipPartSize+int(balls)*ballPartSize)
	b[0] = sectorPartVersion
	binary.BigEndian.PutUint32(b[1:], ships)
	binary.BigEndian.PutUint32(b[5:], balls)
	s.Ships(func(v ShipView) { b = appendShipPart(b, v) })
	s.Balls(func(v BallView) { b = appendBallPart(b, v) })
	return b
}

// appendPart appends the part of ships and balls to b.
func appendPart(b []byte, ships []ShipView, balls []BallView) []byte {
	b = append(b, sectorPartVersion)
	b = binary.BigEndian.AppendUint32(b, uint32(len(ships)))
	b = binary.BigEndian.AppendUint32(b, uint32(len(balls)))
	for _, v := range ships {
		b = appendShipPart(b, v)
	}
	for _, v := range balls {
		b = appendBallPart(b, v)
	}
	return b
}

func appendShipPart(b []byte, v ShipView) []byte {
	be := binary.BigEndian
	b = be.AppendUint64(b, uint64(v.ID))
	b = be.AppendUint32(b, v.Player)
	b = be.AppendUint16(b, uint16(v.Sector))
	b = be.AppendUint32(b, uint32(v.X))
	b = be.AppendUint32(b, uint32(v.Y))
	b = be.AppendUint16(b, v.Heading)
	b = be.AppendUint32(b, uint32(v.Speed))
	b = be.AppendUint16(b, uint16(v.Hull))
	sunk := byte(0)
	if v.Sunk {
		sunk = 1
	}
	b = append(b, sunk, byte(v.Throttle), byte(v.Rudder))
	b = be.AppendUint32(b, v.PortReload)
	return be.AppendUint32(b, v.StarboardReload)
}

func appendBallPart(b []byte, v BallView) []byte {
	be := binary.BigEndian
	b = be.AppendUint64(b, uint64(v.ID))
	b = be.AppendUint64(b, uint64(v.Owner))
	b = be.AppendUint16(b, uint16(v.Sector))
	for _, x := range [4]int32{v.X, v.Y, v.VX, v.VY} {
		b = be.AppendUint32(b, uint32(x))
	}
	b = be.AppendUint32(b, v.Age)
	return be.AppendUint32(b, v.Lifetime)
}

// DecodeSectorPart decodes a sector's part of a frame (EncodeSectorPart),
// received from the network. It never panics, refuses anything over
// MaxSectorPart and checks the counts against the length before
// allocating.
func DecodeSectorPart(b []byte) (ships []ShipView, balls []BallView, err error) {
	switch {
	case len(b) > MaxSectorPart:
		return nil, nil, fmt.Errorf("broadside: sector part of %d bytes: over %d", len(b), MaxSectorPart)
	case len(b) < sectorPartHeader:
		return nil, nil, errors.New("broadside: sector part too short")
	case b[0] != sectorPartVersion:
		return nil, nil, fmt.Errorf("broadside: sector part version %d", b[0])
	}
	be := binary.BigEndian
	ns, nb := uint64(be.Uint32(b[1:])), uint64(be.Uint32(b[5:]))
	if want := sectorPartHeader + ns*shipPartSize + nb*ballPartSize; want != uint64(len(b)) {
		return nil, nil, fmt.Errorf("broadside: sector part of %d ships and %d balls in %d bytes", ns, nb, len(b))
	}
	p := b[sectorPartHeader:]
	if ns > 0 {
		ships = make([]ShipView, ns)
	}
	for i := range ships {
		ships[i] = ShipView{ID: lineage.EntityID(be.Uint64(p)), Player: be.Uint32(p[8:]), Sector: int(be.Uint16(p[12:])),
			X: int32(be.Uint32(p[14:])), Y: int32(be.Uint32(p[18:])), Heading: be.Uint16(p[22:]), Speed: int32(be.Uint32(p[24:])),
			Hull: int16(be.Uint16(p[28:])), Sunk: p[30] != 0, Throttle: int8(p[31]), Rudder: int8(p[32]),
			PortReload: be.Uint32(p[33:]), StarboardReload: be.Uint32(p[37:])}
		if p[30] > 1 {
			return nil, nil, fmt.Errorf("broadside: sector part: ship %d sunk flag %d", i, p[30])
		}
		p = p[shipPartSize:]
	}
	if nb > 0 {
		balls = make([]BallView, nb)
	}
	for i := range balls {
		balls[i] = BallView{ID: lineage.EntityID(be.Uint64(p)), Owner: lineage.EntityID(be.Uint64(p[8:])), Sector: int(be.Uint16(p[16:])),
			X: int32(be.Uint32(p[18:])), Y: int32(be.Uint32(p[22:])), VX: int32(be.Uint32(p[26:])), VY: int32(be.Uint32(p[30:])),
			Age: be.Uint32(p[34:]), Lifetime: be.Uint32(p[38:])}
		p = p[ballPartSize:]
	}
	return ships, balls, nil
}
