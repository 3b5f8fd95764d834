package lineage_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/lineage"
)

var (
	oracleSeeds    = flag.Int("lineage.oracle-seeds", 24, "worlds the counterfactual oracle test plays")
	oracleRemovals = flag.Int("lineage.oracle-removals", 60, "commands removed per world (evenly spaced; 0: all)")
)

// oracleMatch returns the match of a seed: 6–12 ships on a small sea of
// 1, 2 or 4 sectors (so ships and cannonballs migrate), 240–360 ticks;
// in half the worlds migrations reach the log 4–12 ticks late, so ships
// spend ticks in transit and orders given then are credited on arrival.
func oracleMatch(seed uint64) *match {
	cfgs := []broadside.Config{
		// Ships spawn 300–700 m from a corner: across the 500 m borders.
		{Width: 1000, Height: 1000, SectorsX: 1, SectorsY: 1, Islands: 1},
		{Width: 1000, Height: 1000, SectorsX: 2, SectorsY: 1, Islands: 1},
		{Width: 1000, Height: 1000, SectorsX: 2, SectorsY: 2, Islands: 1},
	}
	cfg := cfgs[seed%3]
	cfg.Seed = seed
	m := &match{cfg: cfg, ships: uint32(6 + seed%7), ticks: 240 + int(seed%4)*40}
	if seed%2 == 0 {
		m.delay = 4 + int(seed/2)%9
	}
	return m
}

// Categories of a command whose removal changes a ship that Why does not
// name the command for, judged at the ship's first divergence.
const (
	missOwnHistory    = "no cannonball hit the ship at its first divergence (a lineage bug)"
	missOneHistory    = "explained by derivations reported in one of the two histories only"
	missSameBalls     = "unreported: the same cannonballs hit it in both histories, for different damage"
	missOtherUnreport = "unreported: different cannonballs hit it, with no reported chain from the command"
)

// TestWhyOracle is the brute-force counterfactual oracle. On small bot
// battles, for a sample of player commands c, it re-runs the match
// without c (the same script, so the other players do not react) and
// compares every ship's state tick by tick with the original.
//
// The direction tested is soundness: if removing c changes ship p at tick
// t, Why(p, t) should name c; Why may name commands whose removal changes
// nothing (it is an over-approximation: an entity's state is taken to
// depend on its whole history), and the test measures how often (the
// false-positive rate). It asserts:
//
//   - every ship whose first divergence is not at a tick where a
//     cannonball hit it (in either history) is explained by Why: its own
//     commands, orders given in transit between sectors and migrations,
//     followed across sectors and time, must all be there;
//   - Why and Affected agree on every (command, ship, tick) checked.
//
// Divergences that start at a hit cannot all be in Why, for two reasons
// it measures and reports rather than asserts. First, lineage records one
// history: a cannonball that hits the ship only in the history without c
// has no derivation in the recorded one, so no single-history answer can
// contain c. Second, the game reads state it does not report: every
// sector draws gunnery jitter and hit damage from one random stream per
// tick, so a broadside fired (or not) changes the draws of every later
// shot and hit in that sector and tick; balls are tested in slot order; a
// ball that hits a ship is destroyed by it without a derivation being
// reported. The first kind is inherent to lineage; the second can only be
// fixed in demo/broadside.
func TestWhyOracle(t *testing.T) {
	if testing.Short() {
		t.Skip("counterfactual oracle: replays hundreds of matches")
	}
	var st oracleStats
	st.misses = map[string]int{}
	st.examples = map[string]string{}
	for seed := uint64(1); seed <= uint64(*oracleSeeds); seed++ {
		oracleSeed(t, seed, &st)
	}
	t.Logf("%d worlds, %d commands removed (%d of them orders to ships in transit), %d hits in the original histories",
		*oracleSeeds, st.removals, st.transit, st.hits)
	t.Logf("(command, ship, tick) triples: %d changed by the removal, %d of them named by Why (recall %.1f%%)",
		st.changed, st.found, 100*float64(st.found)/float64(max(st.changed, 1)))
	t.Logf("Why named the command in %d triples, %d of which the removal did not change (false-positive rate %.1f%%)",
		st.named, st.named-st.found, 100*float64(st.named-st.found)/float64(max(st.named, 1)))
	t.Logf("(command, ship) pairs changed: %d; not explained by Why at the first divergence: %d", st.pairs, st.pairMisses)
	for _, c := range []string{missOwnHistory, missOneHistory, missSameBalls, missOtherUnreport} {
		t.Logf("  %4d  %s", st.misses[c], c)
		if ex, ok := st.examples[c]; ok {
			t.Logf("        e.g. %s", ex)
		}
	}
	if st.changed < 1000 || st.hits < 100 || st.transit < 20 {
		t.Fatalf("the battles are too quiet to test anything: %d changes, %d hits, %d orders in transit", st.changed, st.hits, st.transit)
	}
}

type oracleStats struct {
	removals, transit, hits, changed, found, named, pairs, pairMisses int
	misses                                                            map[string]int
	examples                                                          map[string]string
}

func oracleSeed(t *testing.T, seed uint64, st *oracleStats) {
	ctx := context.Background()
	m := oracleMatch(seed)
	ships, ticks := m.ships, m.ticks
	sc := playBots(t, m, seed)
	lg := lineage.NewLog(lineage.LogOptions{RangeTicks: 64})
	base := replayMatch(t, m, sc, -1, -1, lg)
	if err := lg.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	ix, err := lineage.LoadIndex(ctx, lg.Store())
	if err != nil {
		t.Fatal(err)
	}
	for _, evs := range base.tap.derived {
		for _, ev := range evs {
			if isShip(ev.Entity) {
				st.hits++
			}
		}
	}
	// why[k][p]: the positions Why(ship p, tick k+1) names, sorted.
	why := make([][][]uint64, ticks)
	for k := range why {
		why[k] = make([][]uint64, ships+1)
		for p := uint32(1); p <= ships; p++ {
			r, err := ix.Why(lineage.AnyShard, broadside.ShipID(p), uint64(k+1), lineage.Unlimited)
			if err != nil {
				t.Fatalf("seed %d: why ship %d tick %d: %v", seed, p, k+1, err)
			}
			for _, c := range r.AllCauses() {
				why[k][p] = append(why[k][p], c.Pos)
			}
		}
	}
	type cmdRef struct{ k, i int }
	var cmds []cmdRef
	for k := range sc {
		for i := range sc[k] {
			cmds = append(cmds, cmdRef{k, i})
		}
	}
	step := 1
	if n := *oracleRemovals; n > 0 && len(cmds) > n {
		step = len(cmds) / n
	}
	for j, c := range cmds {
		// Every order given to a ship in transit, and a sample of the rest.
		transit := sc[c.k][c.i].transit
		if j%step != 0 && !transit {
			continue
		}
		st.removals++
		if transit {
			st.transit++
		}
		cpos := base.pos[c.k][c.i]
		alt := replayMatch(t, m, sc, c.k, c.i, nil)
		// An order superseded before its ship arrived affected nothing.
		aff, err := ix.Affected(cpos, 0)
		if err != nil && !errors.Is(err, lineage.ErrUnknownCommand) {
			t.Fatalf("seed %d: affected %d: %v", seed, cpos, err)
		}
		since := map[lineage.EntityID]uint64{}
		for _, in := range aff.Entities {
			since[in.Entity] = in.Since
		}
		for p := uint32(1); p <= ships; p++ {
			first := -1
			for k := 0; k < ticks; k++ {
				changed := base.ships[k][p] != alt.ships[k][p]
				_, named := slices.BinarySearch(why[k][p], cpos)
				s, ok := since[broadside.ShipID(p)]
				if affected := ok && s <= uint64(k+1); affected != named {
					t.Fatalf("seed %d: position %d, ship %d, tick %d: Why says %v, Affected says %v", seed, cpos, p, k+1, named, affected)
				}
				if named {
					st.named++
				}
				if changed {
					st.changed++
					if named {
						st.found++
					}
					if first < 0 {
						first = k
					}
				}
			}
			if first < 0 {
				continue
			}
			st.pairs++
			if _, named := slices.BinarySearch(why[first][p], cpos); named {
				continue
			}
			st.pairMisses++
			cat := classifyMiss(base, alt, aff, p, first)
			st.misses[cat]++
			msg := fmt.Sprintf("seed %d, without position %d (player %d, %v at tick %d): ship %d first differs at tick %d:\n\t\twith    %+v\n\t\twithout %+v",
				seed, cpos, sc[c.k][c.i].player, describe(sc[c.k][c.i].payload), c.k+1, p, first+1, base.ships[first][p], alt.ships[first][p])
			if _, ok := st.examples[cat]; !ok {
				st.examples[cat] = msg
			}
			if cat == missOwnHistory {
				t.Errorf("Why misses a command that changed the ship's own history: %s", msg)
			}
		}
	}
}

func describe(payload []byte) string {
	c, err := broadside.DecodeCommand(payload)
	if err != nil {
		return "invalid"
	}
	return c.String()
}

func isShip(e lineage.EntityID) bool { return uint64(e)>>56 == 1 }
func isBall(e lineage.EntityID) bool { return uint64(e)>>56 == 2 }

// ballKey names a cannonball the same way in both histories (its id
// counts the balls fired in its sector, which removing a broadside
// shifts): the ship that fired it, the tick, and its place in the
// broadside.
type ballKey struct {
	owner lineage.EntityID
	tick  uint64
	k     int
}

// canon maps a history's entities to names shared by both histories.
type canon map[lineage.EntityID]ballKey

func canonOf(r *run) canon {
	c := canon{}
	n := map[ballKey]int{}
	for k, evs := range r.tap.derived {
		for _, ev := range evs {
			if isBall(ev.Entity) {
				key := ballKey{owner: lineage.EntityID(ev.Arg), tick: uint64(k + 1)}
				key.k = n[key]
				n[key]++
				c[ev.Entity] = key
			}
		}
	}
	return c
}

func (c canon) name(e lineage.EntityID) ballKey {
	if isBall(e) {
		return c[e]
	}
	return ballKey{owner: e}
}

// classifyMiss says why removing the command changed ship p first at tick
// first+1 although Why(p, first+1) does not name it.
func classifyMiss(base, alt *run, aff *lineage.AffectedResult, p uint32, first int) string {
	ship := broadside.ShipID(p)
	tick := uint64(first + 1)
	hitsIn := func(r *run, c canon) []ballKey {
		var out []ballKey
		for _, ev := range r.tap.derived[first] {
			if ev.Entity == ship {
				out = append(out, c.name(lineage.EntityID(ev.Arg)))
			}
		}
		return out
	}
	cb, ca := canonOf(base), canonOf(alt)
	hb, ha := hitsIn(base, cb), hitsIn(alt, ca)
	if len(hb) == 0 && len(ha) == 0 {
		return missOwnHistory
	}
	// The closure of the command over the derivations of both histories
	// (tick by tick, to a fixed point within each tick).
	closure := map[ballKey]uint64{}
	for t := uint64(1); t <= tick; t++ {
		for _, in := range aff.Entities {
			if in.From == 0 && in.Since == t {
				closure[cb.name(in.Entity)] = t
			}
		}
		for grew := true; grew; {
			grew = false
			for _, h := range []struct {
				r *run
				c canon
			}{{base, cb}, {alt, ca}} {
				for _, ev := range h.r.tap.derived[t-1] {
					from, to := h.c.name(lineage.EntityID(ev.Arg)), h.c.name(ev.Entity)
					if _, in := closure[from]; in {
						if _, done := closure[to]; !done {
							closure[to] = t
							grew = true
						}
					}
				}
			}
		}
	}
	if _, ok := closure[ballKey{owner: ship}]; ok {
		return missOneHistory
	}
	key := func(ks []ballKey) string {
		var s []string
		for _, k := range ks {
			s = append(s, fmt.Sprint(k))
		}
		slices.Sort(s)
		return strings.Join(s, " ")
	}
	if key(hb) == key(ha) {
		return missSameBalls
	}
	return missOtherUnreport
}
