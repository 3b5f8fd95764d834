package broadside

import (
	"github.com/anoptic/broadside/lineage"
	"github.com/anoptic/broadside/replay"
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
