package broadside

import (
	"github.com/anoptic/broadside/lineage"
	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/world"
)

// Lineage kinds of log records (lineage.CommandInfo.Kind): 0 for engine
// records (migrations), the command kind for player commands, KindInvalid
// for payloads the game rejects.
const KindInvalid = 255

// KindNames names the lineage kinds of Broadside's log records.
var KindNames = map[uint8]string{0: "migration", uint8(KindJoin): "join", uint8(KindThrottle): "throttle",
	uint8(KindRudder): "rudder", uint8(KindFire): "fire", KindInvalid: "invalid"}

// RecordKind classifies a log record for lineage (see KindNames).
func RecordKind(c replay.Command) uint8 {
	if c.Player == 0 {
		return 0
	}
	pc, err := DecodeCommand(c.Payload)
	if err != nil {
		return KindInvalid
	}
	return uint8(pc.Kind)
}

// EntityKind groups entities for people: "ships", "balls" or "other".
func EntityKind(e lineage.EntityID) string {
	switch uint64(e) >> 56 {
	case kindShip:
		return "ships"
	case kindBall:
		return "balls"
	}
	return "other"
}

// NewGame returns the engine's view of a Broadside world of cfg: its
// sectors as sim shards, its command kinds and entity names, and frames of
// the state fan-out whose interest cells are interest millimetres wide (0:
// DefaultInterestRadius).
func NewGame(cfg Config, interest int64) (world.Game, error) {
	if err := cfg.Validate(); err != nil {
		return world.Game{}, err
	}
	conf, err := cfg.MarshalBinary()
	if err != nil {
		return world.Game{}, err
	}
	return world.Game{
		Name: GameName, SchemaVersion: SchemaVersion, TickRate: TickRate, Seed: cfg.Seed, Config: conf,
		Shards:      cfg.Sectors(),
		NewSim:      func(shard uint32) (replay.TableSim, error) { return NewSector(cfg, int(shard)) },
		CommandKind: RecordKind, KindNames: KindNames,
		EntityName: EntityName, ParseEntity: ParseEntity, EntityKind: EntityKind,
		FieldValues: FieldValues,
		NewFrame:    func(tick uint64) world.Frame { return &liveFrame{Frame: NewFrame(tick), radius: interest} },
	}, nil
}

// GameOf decodes a world configuration (Config.MarshalBinary) and returns
// its game.
func GameOf(conf []byte) (world.Game, Config, error) {
	var cfg Config
	if err := cfg.UnmarshalBinary(conf); err != nil {
		return world.Game{}, cfg, err
	}
	g, err := NewGame(cfg, 0)
	return g, cfg, err
}

// liveFrame is a Frame as the engine assembles it (world.Frame).
type liveFrame struct {
	*Frame
	radius int64
}

// AddShard implements world.Frame.
func (f *liveFrame) AddShard(_ uint32, sim replay.Sim) {
	if s, ok := sim.(*Sector); ok {
		f.AddSector(s)
	}
}

// Seal implements world.Frame.
func (f *liveFrame) Seal(prev world.Frame) {
	var p *Frame
	if pf, ok := prev.(*liveFrame); ok {
		p = pf.Frame
	}
	f.Frame.Seal(p, f.radius)
}

// StateSource encodes each player's state update from a world's frames
// (netcode's StateSource): the ships and balls around the viewer's ship as
// a delta against the tick the viewer acknowledged.
type StateSource struct {
	frames *world.Frames
	enc    SharedEncoder // EncodeState is called from one goroutine
}

// NewStateSource returns the state source of frames.
func NewStateSource(frames *world.Frames) *StateSource { return &StateSource{frames: frames} }

// FrameAt returns the frame of tick if the world still holds it.
func (s *StateSource) FrameAt(tick uint64) *Frame {
	if f, ok := s.frames.Frame(tick).(*liveFrame); ok {
		return f.Frame
	}
	return nil
}

// EncodeState implements netcode's StateSource.
func (s *StateSource) EncodeState(dst []byte, viewer uint32, tick, base uint64) ([]byte, bool) {
	cur := s.FrameAt(tick)
	if cur == nil {
		return dst, false
	}
	var b *Frame
	if base != 0 {
		if b = s.FrameAt(base); b == nil {
			return dst, false
		}
	}
	return s.enc.Encode(dst, cur, b, viewer), true
}
