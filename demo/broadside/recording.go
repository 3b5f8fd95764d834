package broadside

import (
	"context"
	"fmt"

	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/bsr"
)

// Recordings of Broadside matches: what the tools that write and read
// .bsr files ('serve', 'demo', 'replay', the benches) must agree on.
//
//   - The header names the game (GameName) and its schema version
//     (SchemaVersion) and carries the world's Config (MarshalBinary), so a
//     reader needs no game flags.
//   - RecordConfig gives bsr.Record the sectors, command kinds and kind
//     names; Record runs a whole recording.

// KindNames names Broadside's command kinds in lineage (CommandInfo.Kind).
var KindNames = map[uint8]string{0: "migration", 1: "join", 2: "throttle", 3: "rudder", 4: "fire", 255: "invalid"}

// KindOf classifies a log record for lineage (see KindNames): 0 for
// engine records (migrations), the command kind for player commands, 255
// for payloads the game rejects.
func KindOf(c *replay.Command) uint8 {
	if c.Player == 0 {
		return 0
	}
	pc, err := DecodeCommand(c.Payload)
	if err != nil {
		return 255
	}
	return uint8(pc.Kind)
}

// RecordingHeader returns the recording header of a Broadside world.
func RecordingHeader(game Config, world uint32) (bsr.Header, error) {
	gc, err := game.MarshalBinary()
	if err != nil {
		return bsr.Header{}, err
	}
	return bsr.Header{Game: GameName, SchemaVersion: SchemaVersion, TickRate: TickRate,
		Seed: game.Seed, World: world, Shards: uint32(game.Sectors()), GameConfig: gc}, nil
}

// SectorSims returns a bsr NewSim of game's sectors (shard i is sector i).
func SectorSims(game Config) func(uint32) (replay.TableSim, error) {
	return func(shard uint32) (replay.TableSim, error) { return NewSector(game, int(shard)) }
}

// RecordConfig returns a bsr.RecordConfig for a Broadside world: sims,
// lineage command kinds and their names. Callers set Source, Writer and
// Logger, and optionally the tick range, policy and progress.
func RecordConfig(game Config) bsr.RecordConfig {
	return bsr.RecordConfig{NewSim: SectorSims(game), CommandKind: func(c replay.Command) uint8 { return KindOf(&c) }, KindNames: KindNames}
}

// Record records the log src delivers (from position 1) into a new
// recording at path, with cfg's tick range, policy, progress and logger,
// and returns the stats and the file's size. It closes the file whatever
// happens, so what was recorded stays readable.
func Record(ctx context.Context, path string, game Config, world uint32, src replay.Source, cfg bsr.RecordConfig) (bsr.RecordStats, int64, error) {
	h, err := RecordingHeader(game, world)
	if err != nil {
		return bsr.RecordStats{}, 0, err
	}
	w, err := bsr.Create(path, h, bsr.WriterOptions{})
	if err != nil {
		return bsr.RecordStats{}, 0, err
	}
	base := RecordConfig(game)
	cfg.Source, cfg.Writer, cfg.NewSim, cfg.CommandKind, cfg.KindNames = src, w, base.NewSim, base.CommandKind, base.KindNames
	st, err := bsr.Record(ctx, cfg)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	return st, w.Stats().Bytes, err
}

// OpenRecording opens a Broadside recording and decodes its world.
func OpenRecording(path string) (*bsr.Reader, Config, error) {
	r, err := bsr.Open(path)
	if err != nil {
		return nil, Config{}, err
	}
	h := r.Header()
	if h.Game != GameName {
		r.Close()
		return nil, Config{}, fmt.Errorf("%s is a recording of %q, not of %s", path, h.Game, GameName)
	}
	var game Config
	if err := game.UnmarshalBinary(h.GameConfig); err != nil {
		r.Close()
		return nil, Config{}, fmt.Errorf("%s: %w", path, err)
	}
	if uint32(game.Sectors()) != h.Shards {
		r.Close()
		return nil, Config{}, fmt.Errorf("%s: %d shards for a world of %d sectors", path, h.Shards, game.Sectors())
	}
	return r, game, nil
}
