// Package world runs a world: the Ticker that appends its TICK markers, a
// recovery Supervisor with one Runner per sim shard, the snapshot and
// lineage stores, the trim behind them, the drain and final snapshot at a
// stop, the frames of the state fan-out and the live recording. It holds
// no game rules: the game comes in as one Game value.
//
// World runs live on the command log (cmdlog.Client or cmdlog.RemoteClient
// behind the Log interface); LocalWorld runs the same Runners on an
// in-memory log with a manual clock, for everything that generates or
// re-simulates a match offline.
package world

import (
	"errors"
	"fmt"

	"github.com/anoptic/broadside/lineage"
	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/bsr"
)

// DefaultID is the world id of a server's one world (tick marker and
// output record ids derive from it).
const DefaultID = 1

// MaxShards is the most sim shards a world runs (the frame assembler keeps
// a bit per shard).
const MaxShards = 64

// Game is everything the engine needs of a game to run, record and explain
// one of its worlds. A game builds it from its own configuration
// (broadside.NewGame for the sample game).
type Game struct {
	// Name names the game in recordings ("broadside"); SchemaVersion is
	// the version of its command and state schema.
	Name          string
	SchemaVersion uint16
	// TickRate is the game's ticks per second.
	TickRate int
	// Seed is the world's seed, and Config the game's encoding of its
	// world configuration (recording headers, clients' Welcome).
	Seed   uint64
	Config []byte
	// Shards is the number of sim shards (sectors); NewSim returns shard's
	// sim at the start of the world.
	Shards int
	NewSim func(shard uint32) (replay.TableSim, error)
	// CommandKind classifies a log record for lineage, and KindNames names
	// the kinds.
	CommandKind func(replay.Command) uint8
	KindNames   map[uint8]string
	// EntityName and ParseEntity name lineage entities for people
	// ("ship:7"); EntityKind groups them ("ships"). Nil: numbers.
	EntityName  func(lineage.EntityID) string
	ParseEntity func(string) (lineage.EntityID, error)
	EntityKind  func(lineage.EntityID) string
	// FieldValues formats the recorded and re-simulated values of the
	// field at offset of a record of table tableID, for verify's report
	// (the sims name entities and fields as bsr.Describer).
	FieldValues func(tableID uint32, offset int, want, got []byte) (string, string, bool)
	// NewFrame, if set, starts the state fan-out frame of a tick: every
	// shard adds its part after stepping it, and the frame is sealed when
	// all did (see Frames).
	NewFrame func(tick uint64) Frame
}

// Validate reports what a world of g lacks.
func (g Game) Validate() error {
	switch {
	case g.Name == "":
		return errors.New("world: game without a name")
	case g.TickRate <= 0:
		return fmt.Errorf("world: game %s: tick rate %d", g.Name, g.TickRate)
	case g.Shards <= 0 || g.Shards > MaxShards:
		return fmt.Errorf("world: game %s: %d shards (1 to %d)", g.Name, g.Shards, MaxShards)
	case g.NewSim == nil:
		return fmt.Errorf("world: game %s: no NewSim", g.Name)
	}
	return nil
}

// Specs returns the shard specs of a Supervisor running g.
func (g Game) Specs() []replay.ShardSpec {
	specs := make([]replay.ShardSpec, g.Shards)
	for i := range specs {
		shard := uint32(i)
		specs[i] = replay.ShardSpec{Shard: shard, NewSim: func() (replay.TableSim, error) { return g.NewSim(shard) }}
	}
	return specs
}

// Header returns the header of a recording of world id.
func (g Game) Header(id uint32) bsr.Header {
	return bsr.Header{Game: g.Name, SchemaVersion: g.SchemaVersion, TickRate: uint16(g.TickRate),
		Seed: g.Seed, World: id, Shards: uint32(g.Shards), GameConfig: g.Config}
}

// RecordConfig returns a bsr.RecordConfig with g's sims, command kinds and
// kind names; callers set Source and Writer, and optionally the rest.
func (g Game) RecordConfig() bsr.RecordConfig {
	return bsr.RecordConfig{NewSim: g.NewSim, CommandKind: g.CommandKind, KindNames: g.KindNames}
}

// NameOf returns e's name for people (its number if the game does not name
// entities).
func (g Game) NameOf(e lineage.EntityID) string {
	if g.EntityName != nil {
		return g.EntityName(e)
	}
	return fmt.Sprint(uint64(e))
}

// KindOf returns e's kind ("other" if the game does not say).
func (g Game) KindOf(e lineage.EntityID) string {
	if g.EntityKind != nil {
		return g.EntityKind(e)
	}
	return "other"
}
