//go:build !js

package broadside

// The engine's side of the game (a world.Game, the state fan-out): not in
// the browser viewer, which replays recordings without the engine's
// world (its command log and stores do not build for js/wasm).

import (
	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/world"
)

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
	sizes := new(FrameSizes)
	return world.Game{
		Name: GameName, SchemaVersion: SchemaVersion, TickRate: TickRate, Seed: cfg.Seed, Config: conf,
		Shards:      cfg.Sectors(),
		NewSim:      func(shard uint32) (replay.TableSim, error) { return NewSector(cfg, int(shard)) },
		CommandKind: RecordKind, KindNames: KindNames,
		EntityName: EntityName, ParseEntity: ParseEntity, EntityKind: EntityKind,
		FieldValues: FieldValues,
		NewFrame: func(tick uint64) world.Frame {
			return &liveFrame{Frame: sizes.NewFrame(tick), radius: interest, sizes: sizes}
		},
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
	sizes  *FrameSizes // nil: none noted
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
	if f.sizes != nil {
		f.sizes.Note(f.Frame)
	}
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

// AddPart implements world.PartFrame: a front end builds the tick's frame
// from the sectors' parts its workers published.
func (f *liveFrame) AddPart(_ uint32, part []byte) error {
	ships, balls, err := DecodeSectorPart(part)
	if err != nil {
		return err
	}
	f.Ships = append(f.Ships, ships...)
	f.Balls = append(f.Balls, balls...)
	return nil
}
