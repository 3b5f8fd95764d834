package natsworld

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// SectorSubject returns the NATS subject a sector's owner publishes its
// frames on: "world.<id>.sector.<n>". A front end subscribes to the
// sectors its players can see ("world.<id>.sector.*" for all).
func SectorSubject(world, sector uint32) string {
	return "world." + strconv.FormatUint(uint64(world), 10) + ".sector." + strconv.FormatUint(uint64(sector), 10)
}

// SectorsSubject returns the wildcard subject of every sector of world.
func SectorsSubject(world uint32) string {
	return "world." + strconv.FormatUint(uint64(world), 10) + ".sector.*"
}

// TakeoverSubject returns the subject on which workers report every
// sector they took over (TakeoverReport, JSON).
func TakeoverSubject(world uint32) string {
	return "world." + strconv.FormatUint(uint64(world), 10) + ".takeover"
}

// MaxSectorFrame is the largest encoded SectorFrame (NATS's default max
// payload is 1 MiB).
const MaxSectorFrame = 1 << 20

// SectorFrame is what a sector's owner publishes after each tick it
// steps: which tick, the state hash, the lease epoch it ran under and the
// game's part of the frame (Payload, opaque to the engine).
type SectorFrame struct {
	World, Sector uint32
	Epoch         uint64
	Tick, Pos     uint64
	Hash          uint64
	// Published is when the owner published the frame (Unix nanoseconds
	// of its clock, right after the step): a receiver measures the
	// frame's latency from it. Not part of the world's state.
	Published int64
	// Applied are the player commands the tick applied, in log order
	// (every sector reads the whole log, so each sector's frame of a tick
	// carries the same list): a front end tells the players with the
	// tick's state which of their commands it applied.
	Applied []Applied
	Payload []byte
}

// Applied is a player command a tick applied: its player and the
// client's sequence number.
type Applied struct {
	Player uint32
	Seq    uint64
}

// MaxApplied bounds the applied commands of one frame.
const MaxApplied = 16 << 10

// Encoded frame: magic "BSSF" | version 2 | world u32 | sector u32 |
// epoch u64 | tick u64 | pos u64 | hash u64 | published i64 | applied
// count u32 | (player u32 | seq u64) per applied command | payload (the
// rest), all big-endian.
const (
	frameMagic   = "BSSF"
	frameVersion = 2
	frameHeader  = 4 + 1 + 4 + 4 + 8*5 + 4
	appliedSize  = 4 + 8
)

// AppendSectorFrame appends f's encoding to b.
func AppendSectorFrame(b []byte, f SectorFrame) []byte {
	b = append(b, frameMagic...)
	b = append(b, frameVersion)
	b = binary.BigEndian.AppendUint32(b, f.World)
	b = binary.BigEndian.AppendUint32(b, f.Sector)
	b = binary.BigEndian.AppendUint64(b, f.Epoch)
	b = binary.BigEndian.AppendUint64(b, f.Tick)
	b = binary.BigEndian.AppendUint64(b, f.Pos)
	b = binary.BigEndian.AppendUint64(b, f.Hash)
	b = binary.BigEndian.AppendUint64(b, uint64(f.Published))
	b = binary.BigEndian.AppendUint32(b, uint32(len(f.Applied)))
	for _, a := range f.Applied {
		b = binary.BigEndian.AppendUint32(b, a.Player)
		b = binary.BigEndian.AppendUint64(b, a.Seq)
	}
	return append(b, f.Payload...)
}

// DecodeSectorFrame decodes a frame received from NATS; Payload aliases b.
// It never panics and refuses anything longer than MaxSectorFrame.
func DecodeSectorFrame(b []byte) (SectorFrame, error) {
	switch {
	case len(b) > MaxSectorFrame:
		return SectorFrame{}, fmt.Errorf("natsworld: sector frame of %d bytes: over %d", len(b), MaxSectorFrame)
	case len(b) < frameHeader || string(b[:4]) != frameMagic:
		return SectorFrame{}, fmt.Errorf("natsworld: %d bytes: not a sector frame", len(b))
	case b[4] != frameVersion:
		return SectorFrame{}, fmt.Errorf("natsworld: sector frame version %d", b[4])
	}
	f := SectorFrame{
		World:     binary.BigEndian.Uint32(b[5:]),
		Sector:    binary.BigEndian.Uint32(b[9:]),
		Epoch:     binary.BigEndian.Uint64(b[13:]),
		Tick:      binary.BigEndian.Uint64(b[21:]),
		Pos:       binary.BigEndian.Uint64(b[29:]),
		Hash:      binary.BigEndian.Uint64(b[37:]),
		Published: int64(binary.BigEndian.Uint64(b[45:])),
	}
	n := binary.BigEndian.Uint32(b[53:])
	rest := b[frameHeader:]
	if n > MaxApplied || uint64(n)*appliedSize > uint64(len(rest)) {
		return SectorFrame{}, fmt.Errorf("natsworld: sector frame: %d applied commands in %d bytes", n, len(rest))
	}
	if n > 0 {
		f.Applied = make([]Applied, n)
		for i := range f.Applied {
			f.Applied[i] = Applied{Player: binary.BigEndian.Uint32(rest), Seq: binary.BigEndian.Uint64(rest[4:])}
			rest = rest[appliedSize:]
		}
	}
	if len(rest) > 0 {
		f.Payload = rest
	}
	return f, nil
}

// TakeoverReport is what a worker reports when a sector it claimed is
// live: when it claimed the lease, when the sector was restored (the
// claim appended, the snapshot loaded) and when it had replayed the log
// to where the world was at the claim. Times are Unix nanoseconds of the
// worker's clock.
type TakeoverReport struct {
	World    uint32 `json:"world"`
	Sector   uint32 `json:"sector"`
	Epoch    uint64 `json:"epoch"`
	Worker   string `json:"worker"`
	Acquired int64  `json:"acquired"`
	Claimed  int64  `json:"claimed"` // the claim is in the log
	Restored int64  `json:"restored"`
	Live     int64  `json:"live"`
	// SnapshotTick is the tick of the snapshot restored (0: none, replayed
	// from the start); LiveTick the first tick stepped past the log's tail
	// at the claim; Replayed the ticks in between.
	// With Standby, the sector started from a hot copy's state at
	// SnapshotTick instead of a snapshot.
	Standby      bool   `json:"standby"`
	SnapshotTick uint64 `json:"snapshot_tick"`
	LiveTick     uint64 `json:"live_tick"`
	Replayed     uint64 `json:"replayed"`
}

// maxTakeoverReport bounds a TakeoverReport's encoding.
const maxTakeoverReport = 4 << 10

// DecodeTakeoverReport decodes a report received from NATS (at most 4 KiB).
func DecodeTakeoverReport(b []byte) (TakeoverReport, error) {
	var r TakeoverReport
	if len(b) > maxTakeoverReport {
		return r, fmt.Errorf("natsworld: takeover report of %d bytes", len(b))
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return TakeoverReport{}, fmt.Errorf("natsworld: takeover report: %w", err)
	}
	if r.World == 0 || !validWorker.MatchString(r.Worker) {
		return TakeoverReport{}, errors.New("natsworld: takeover report without a world or a valid worker")
	}
	return r, nil
}
