package broadside

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/anoptic/broadside/lineage"
)

// EntityName names an entity for people: ship:PLAYER for a ship,
// ball:PLAYER.N for the N-th ball of PLAYER's ship (N = volley × 2·Guns +
// side × Guns + gun, see the entity ids above), the hex id otherwise.
func EntityName(e lineage.EntityID) string {
	switch uint64(e) >> 56 {
	case kindShip:
		return fmt.Sprintf("ship:%d", uint32(e))
	case kindBall:
		return fmt.Sprintf("ball:%d.%d", uint32(uint64(e)>>24), uint64(e)&(1<<24-1))
	}
	return fmt.Sprintf("%#x", uint64(e))
}

// ParseEntity reads an entity named as EntityName writes it, or a number.
func ParseEntity(s string) (lineage.EntityID, error) {
	bad := fmt.Errorf("entity %q: want ship:PLAYER, ball:PLAYER.N or a number", s)
	switch {
	case strings.HasPrefix(s, "ship:"):
		p, err := strconv.ParseUint(s[5:], 10, 32)
		if err != nil || p == 0 {
			return 0, bad
		}
		return ShipID(uint32(p)), nil
	case strings.HasPrefix(s, "ball:"):
		p, n, ok := strings.Cut(s[5:], ".")
		a, err1 := strconv.ParseUint(p, 10, 32)
		b, err2 := strconv.ParseUint(n, 10, 24)
		if !ok || err1 != nil || err2 != nil || a == 0 {
			return 0, bad
		}
		return ballID(uint32(a), b), nil
	}
	v, err := strconv.ParseUint(s, 0, 64)
	if err != nil || v == 0 {
		return 0, bad
	}
	return lineage.EntityID(v), nil
}
