// Package lineage records, stores and queries which commands and entities
// each entity's state was derived from, tick by tick.
package lineage

// EntityID names an entity of a world. It is stable for the entity's life,
// including across sim shards (a migrating ship keeps its id). Games choose
// the encoding; 0 is never a valid entity.
type EntityID uint64

// Recorder receives lineage events from a Sim during Step. Calls are cheap
// and must not allocate in steady state; the sim calls them inline.
type Recorder interface {
	// Command records that the command at log position pos was applied to
	// entity e in the current tick.
	Command(e EntityID, pos uint64)
	// Derived records that entity e's state in the current tick was derived
	// from entity from's state (a cannonball from the ship that fired it,
	// damage to a ship from the cannonball that hit it).
	Derived(e, from EntityID)
}

// Nop is a Recorder that records nothing; benchmarks compare against it.
var Nop Recorder = nopRecorder{}

type nopRecorder struct{}

func (nopRecorder) Command(EntityID, uint64)   {}
func (nopRecorder) Derived(EntityID, EntityID) {}
