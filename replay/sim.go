// Package replay runs simulation shards as deterministic functions of the
// command log: live play, crash recovery, seeking and verification all use
// the same Runner over the same Sim.
package replay

import (
	"github.com/anoptic/broadside/lineage"
	"github.com/anoptic/broadside/replay/table"
)

// Command is one log record delivered to a Sim as input of a tick.
type Command struct {
	// Pos is the record's log position (lineage refers to commands by it).
	Pos uint64
	// Player is the authenticated player that sent it; 0 for records
	// produced by the engine (migrations).
	Player uint32
	// ClientSeq is the player's own sequence number for the command.
	ClientSeq uint64
	// Payload is the game-defined command body; the sim validates it.
	Payload []byte
}

// Output is a record a Sim asks the engine to append to the log during a
// Step, such as a migration of an entity to another shard. The Runner gives
// it a deterministic record id (shard, tick, index), so re-running the same
// tick after a crash never appends it twice.
type Output struct {
	Payload []byte
}

// Sim is one simulation shard of a game. Implementations must be
// deterministic: the same sequence of Step calls yields the same hashes. No
// wall clock, no map iteration order, no goroutines, no floating point in
// game state; randomness only from a PRNG seeded from the world config and
// the log.
type Sim interface {
	// Step advances the shard by one tick with the commands ordered between
	// TICK(tick-1) and TICK(tick), in log order, and returns the records to
	// append. It reports lineage to rec. Invalid command payloads are
	// ignored (they come from players).
	Step(tick uint64, cmds []Command, rec lineage.Recorder) []Output
	// Hash is the state hash after the last Step, maintained
	// incrementally.
	Hash() uint64
}

// TableSim is a Sim whose whole mutable state lives in state tables
// (replay/table). The engine snapshots such a sim without game code: it
// captures Tables() between Steps (dirty pages only) and, to recover,
// restores them and calls Restored. Sims keep no other state that affects
// Step or Hash, except indexes derived from the tables.
type TableSim interface {
	Sim
	// Tables returns the sim's tables; the same set for the sim's life.
	Tables() *table.Set
	// Restored is called after Tables() was restored from a snapshot: the
	// sim rebuilds its derived indexes and checks the state's invariants.
	// On error the sim must not be stepped.
	Restored() error
}
