package viewer

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/lineage"
)

// Broadside's entity ids carry their kind in the top byte.
const (
	entityShip = 1
	entityBall = 2
)

// IsShip reports whether e is a ship's entity id.
func IsShip(e lineage.EntityID) bool { return uint64(e)>>56 == entityShip }

// IsBall reports whether e is a cannonball's entity id.
func IsBall(e lineage.EntityID) bool { return uint64(e)>>56 == entityBall }

// ShipPlayer returns the player whose ship e is.
func ShipPlayer(e lineage.EntityID) uint32 { return uint32(e) }

// EntityName names an entity the way the CLI does (broadside.EntityName):
// ship:PLAYER, ball:PLAYER.N, or its id in hex.
func EntityName(e lineage.EntityID) string { return broadside.EntityName(e) }

// Hit is a cannonball that hit a ship, and the ship that fired it.
type Hit struct {
	// Tick is when the ball hit.
	Tick uint64
	Ball lineage.EntityID
	// Shooter is the ship that fired it at tick Fired (0 if the walk did
	// not reach it); Player is the shooter's player.
	Shooter lineage.EntityID
	Player  uint32
	Fired   uint64
	// FireOrder is the shooter's last fire command applied by tick Fired:
	// the order that fired the ball (HasFireOrder false if the walk did
	// not find one).
	FireOrder    lineage.Cause
	HasFireOrder bool
}

// fireOrder returns the last fire command applied to ship by tick.
func fireOrder(causes []lineage.Cause, ship lineage.EntityID, tick uint64) (lineage.Cause, bool) {
	var best lineage.Cause
	found := false
	for _, c := range causes {
		if c.Entity == ship && c.KindName == "fire" && c.Applied <= tick && (!found || c.Pos > best.Pos) {
			best, found = c, true
		}
	}
	return best, found
}

// Shooter sums up the hits a ship took from one other ship.
type Shooter struct {
	Ship              lineage.EntityID
	Player            uint32
	Balls             int
	FirstHit, LastHit uint64
}

// Explanation is the viewer's digest of a lineage.WhyResult for one ship:
// its commands, the chain of entities, and for a sunk ship who sank it.
type Explanation struct {
	Entity lineage.EntityID
	Tick   uint64
	Result *lineage.WhyResult
	// Causes are the commands, nearest first (see WhyResult.Causes).
	Causes []lineage.Cause
	// Chain is the derivations followed, breadth first; Chain[0] is the
	// entity asked about.
	Chain []lineage.Link
	// Hits are the cannonballs that hit the ship, latest first;
	// Shooters sums them up by the ship that fired them, most hits first.
	Hits     []Hit
	Shooters []Shooter
	// Sunk is set for a ship sunk at Tick: SunkAt is the tick of the
	// killing hit (Hits[0]), AfloatSince the first tick of its last run
	// afloat (Exact says whether the source knew it, or it was estimated
	// from the hits' timing), and SunkBy the players whose balls hit it
	// in that run, the killer first, then by hits.
	Sunk        bool
	SunkAt      uint64
	AfloatSince uint64
	Exact       bool
	SunkBy      []SinkingPlayer
	// OnChain holds every entity of the chain except the one asked about;
	// the viewer highlights them.
	OnChain map[lineage.EntityID]bool
	// Killers holds the ships of SunkBy's players.
	Killers map[lineage.EntityID]bool
}

// SinkingPlayer is a player whose cannonballs hit a ship before it sank.
type SinkingPlayer struct {
	Player uint32
	Hits   int
	// Killer: this player's ball dealt the last hit.
	Killer bool
}

// WhyDepth is the number of derivations the viewer follows: a ship's own
// commands, the balls that hit it, the ships that fired them and those
// ships' commands (their fire orders).
const WhyDepth = 2

// Explain digests r, the answer for ship at the end of r.Tick. ship is
// the ship's view at that tick (for Sunk); src, if it implements
// SinkingSource, bounds the sinking exactly.
func Explain(r *lineage.WhyResult, ship broadside.ShipView, src Source) *Explanation {
	x := &Explanation{Entity: r.Entity, Tick: r.Tick, Result: r, Causes: r.Causes(0), Chain: r.Chain(),
		OnChain: map[lineage.EntityID]bool{}, Killers: map[lineage.EntityID]bool{}}
	for i, l := range x.Chain {
		if i > 0 && l.Entity != r.Entity {
			x.OnChain[l.Entity] = true
		}
	}
	// The balls that hit the ship are the derivations of the root from
	// balls; each ball's own derivation is from the ship that fired it.
	for i, l := range x.Chain {
		if l.Parent != 0 || !IsBall(l.Entity) {
			continue
		}
		h := Hit{Tick: l.Tick, Ball: l.Entity}
		for _, s := range x.Chain {
			if s.Parent == i && IsShip(s.Entity) {
				h.Shooter, h.Player, h.Fired = s.Entity, ShipPlayer(s.Entity), s.Tick
				h.FireOrder, h.HasFireOrder = fireOrder(x.Causes, s.Entity, s.Tick)
				break
			}
		}
		x.Hits = append(x.Hits, h)
	}
	slices.SortStableFunc(x.Hits, func(a, b Hit) int { return cmp.Compare(b.Tick, a.Tick) })
	shooters := map[lineage.EntityID]int{}
	for _, h := range x.Hits {
		if h.Shooter == 0 {
			continue
		}
		k, ok := shooters[h.Shooter]
		if !ok {
			k = len(x.Shooters)
			shooters[h.Shooter] = k
			x.Shooters = append(x.Shooters, Shooter{Ship: h.Shooter, Player: h.Player, FirstHit: h.Tick, LastHit: h.Tick})
		}
		sh := &x.Shooters[k]
		sh.Balls++
		sh.FirstHit, sh.LastHit = min(sh.FirstHit, h.Tick), max(sh.LastHit, h.Tick)
	}
	slices.SortStableFunc(x.Shooters, func(a, b Shooter) int { return cmp.Compare(b.Balls, a.Balls) })
	if !ship.Sunk || len(x.Hits) == 0 {
		return x
	}
	x.Sunk, x.SunkAt = true, x.Hits[0].Tick
	if ss, ok := src.(SinkingSource); ok {
		x.AfloatSince, x.Exact = ss.AfloatSince(ship.Player, x.SunkAt)
	}
	if !x.Exact {
		// A sunk ship is not hit for RespawnDelay ticks, so the run afloat
		// began after the last gap of that length between hits (an
		// estimate: a ship may also go unhit that long while afloat).
		if src != nil {
			x.AfloatSince, _ = src.Ticks()
		}
		for k := 0; k+1 < len(x.Hits); k++ {
			if x.Hits[k].Tick-x.Hits[k+1].Tick >= broadside.RespawnDelay {
				x.AfloatSince = x.Hits[k+1].Tick + 1
				break
			}
		}
	}
	by := map[uint32]*SinkingPlayer{}
	for k, h := range x.Hits {
		if h.Tick < x.AfloatSince || h.Shooter == 0 {
			continue
		}
		p := by[h.Player]
		if p == nil {
			p = &SinkingPlayer{Player: h.Player}
			by[h.Player] = p
		}
		p.Hits++
		p.Killer = p.Killer || k == 0
		x.Killers[h.Shooter] = true
	}
	for _, p := range by {
		x.SunkBy = append(x.SunkBy, *p)
	}
	slices.SortFunc(x.SunkBy, func(a, b SinkingPlayer) int {
		if a.Killer != b.Killer {
			if a.Killer {
				return -1
			}
			return 1
		}
		return cmp.Or(cmp.Compare(b.Hits, a.Hits), cmp.Compare(a.Player, b.Player))
	})
	return x
}

// Lines renders the explanation as text lines for the lineage panel, at
// most width characters each and at most maxLines lines.
func (x *Explanation) Lines(width, maxLines int) []PanelLine {
	var out []PanelLine
	add := func(kind LineKind, format string, a ...any) {
		for i, l := range wrap(fmt.Sprintf(format, a...), width-4) {
			if i > 0 {
				l = "    " + l
			}
			out = append(out, PanelLine{Kind: kind, Text: l})
		}
	}
	name := EntityName(x.Entity)
	add(LineTitle, "Why is %s as it is at tick %d?", name, x.Tick)
	if x.Sunk {
		how := "estimated from the hits"
		if x.Exact {
			how = "exact"
		}
		add(LineAlert, "SUNK at tick %d; afloat since tick %d (%s)", x.SunkAt, x.AfloatSince, how)
		for _, p := range x.SunkBy {
			role := "hit it"
			if p.Killer {
				role = "SANK IT"
			}
			add(LineAlert, "  sunk by player %d (%s): %d hits", p.Player, role, p.Hits)
		}
		if h := x.Hits[0]; h.Shooter != 0 {
			order := ""
			if h.HasFireOrder {
				order = fmt.Sprintf(" (fire order t%d pos %d)", h.FireOrder.Tick, h.FireOrder.Pos)
			}
			add(LineChain, "  %s%s -fired t%d-> %s -hit t%d-> %s", EntityName(h.Shooter), order, h.Fired, EntityName(h.Ball), h.Tick, name)
		}
	}
	players := map[uint32]bool{}
	for _, c := range x.Causes {
		players[c.Player] = true
	}
	ents := map[lineage.EntityID]bool{}
	for _, l := range x.Chain {
		ents[l.Entity] = true
	}
	add(LineText, "%d commands from %d players; chain of %d entities, %d derivations", len(x.Causes), len(players), len(ents), len(x.Chain)-1)
	if x.Result != nil && x.Result.Truncated {
		add(LineText, "(followed %d derivations deep; older ones not shown)", x.Result.DepthLimit)
	}
	if len(x.Shooters) == 0 {
		add(LineHeading, "Chain: no derivations; only its own commands")
	} else {
		add(LineHeading, "Chain: ship -> its cannonballs -> %s", name)
		const maxShooters = 6
		for i, sh := range x.Shooters {
			if i == maxShooters {
				add(LineChain, "  ... %d more ships", len(x.Shooters)-i)
				break
			}
			add(LineChain, "  %-9s (player %d) -> %d balls -> hits t%d..t%d", EntityName(sh.Ship), sh.Player, sh.Balls, sh.FirstHit, sh.LastHit)
		}
	}
	add(LineHeading, "Commands, nearest first (tick player kind -> entity):")
	for i, c := range x.Causes {
		if len(out) >= maxLines-1 && i < len(x.Causes)-1 {
			add(LineText, "  ... %d more commands", len(x.Causes)-i)
			break
		}
		who := fmt.Sprintf("player %d", c.Player)
		if c.Player == 0 {
			who = "engine"
		}
		add(LineText, "  t%-5d %-10s %-9s -> %s", c.Tick, who, c.KindName, EntityName(c.Entity))
	}
	if maxLines > 0 && len(out) > maxLines {
		out = out[:maxLines]
	}
	return out
}

// LineKind styles a panel line.
type LineKind int

// Panel line kinds.
const (
	LineText LineKind = iota
	LineTitle
	LineHeading
	LineAlert
	LineChain
)

// PanelLine is one line of the lineage panel.
type PanelLine struct {
	Kind LineKind
	Text string
}
