package lineage

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
)

// Names names entities for people in the views and printouts of query
// answers: the game knows what its entity ids mean. Nil functions fall
// back to numbers and "other".
type Names struct {
	// Entity names an entity ("ship:7").
	Entity func(EntityID) string
	// Kind groups entities ("ships").
	Kind func(EntityID) string
}

func (n Names) entity(e EntityID) string {
	if n.Entity != nil {
		return n.Entity(e)
	}
	return fmt.Sprint(uint64(e))
}

func (n Names) kind(e EntityID) string {
	if n.Kind != nil {
		return n.Kind(e)
	}
	return "other"
}

// JSON views of the answers (entity names added for people and scripts).
type (
	// CauseView is a command of a WhyView.
	CauseView struct {
		Pos         uint64     `json:"pos"`
		Player      uint32     `json:"player"`
		Tick        uint64     `json:"tick"`
		Kind        string     `json:"kind"`
		Known       bool       `json:"known"`
		Entity      string     `json:"entity"`
		EntityID    uint64     `json:"entity_id"`
		AppliedTick uint64     `json:"applied_tick"`
		Shard       uint32     `json:"shard"`
		Depth       int        `json:"depth"`
		Path        []StepView `json:"path"`
	}
	// LinkView is a link of a WhyView's chain of entities.
	LinkView struct {
		Entity   string `json:"entity"`
		EntityID uint64 `json:"entity_id"`
		Tick     uint64 `json:"tick"`
		Shard    uint32 `json:"shard"`
		Depth    int    `json:"depth"`
		Parent   int    `json:"parent"`
	}
	// WhyView is the JSON view of a Why answer.
	WhyView struct {
		Entity     string  `json:"entity"`
		EntityID   uint64  `json:"entity_id"`
		Tick       uint64  `json:"tick"`
		Shard      *uint32 `json:"shard,omitempty"`
		DepthLimit int     `json:"depth_limit"`
		Truncated  bool    `json:"truncated"`
		Horizon    uint64  `json:"horizon"`
		// Commands counts the distinct commands of the answer; Causes
		// lists the nearest of them (--limit).
		Commands int         `json:"commands"`
		Causes   []CauseView `json:"causes"`
		Chain    []LinkView  `json:"chain"`
	}
)

// linPath describes how a cause reaches the entity asked about: each step
// names an entity and the tick (and sector) at which the next one was
// derived from it, e.g. "ship:18 →(t543 s0) ball:0.2082 →(t572 s0) ship:27".
func (n Names) pathText(r *WhyResult, c Cause) string {
	var b strings.Builder
	for _, l := range r.Path(c) {
		b.WriteString(n.entity(l.Entity))
		if l.Parent >= 0 {
			fmt.Fprintf(&b, " →(t%d s%d) ", l.Tick, l.Shard)
		}
	}
	return b.String()
}

// StepView is one step of the path from a cause to the entity asked about.
type StepView struct {
	Entity string `json:"entity"`
	// Tick and Shard: where the next entity of the path was derived from
	// this one (absent for the last, the entity asked about).
	Tick  *uint64 `json:"tick,omitempty"`
	Shard *uint32 `json:"shard,omitempty"`
}

func (n Names) pathView(r *WhyResult, c Cause) []StepView {
	var out []StepView
	for _, l := range r.Path(c) {
		st := StepView{Entity: n.entity(l.Entity)}
		if l.Parent >= 0 {
			t, s := l.Tick, uint32(l.Shard)
			st.Tick, st.Shard = &t, &s
		}
		out = append(out, st)
	}
	return out
}

// Why returns the JSON view of a Why answer, listing at most limit
// commands (0: all).
func (n Names) Why(r *WhyResult, limit int) WhyView {
	all := r.Causes(0)
	out := WhyView{Entity: n.entity(r.Entity), EntityID: uint64(r.Entity), Tick: r.Tick, DepthLimit: r.DepthLimit,
		Truncated: r.Truncated, Horizon: r.Horizon, Commands: len(all), Causes: []CauseView{}, Chain: []LinkView{}}
	if limit > 0 && len(all) > limit {
		all = all[:limit]
	}
	if r.Shard != AnyShard {
		s := uint32(r.Shard)
		out.Shard = &s
	}
	for _, c := range all {
		out.Causes = append(out.Causes, CauseView{Pos: c.Pos, Player: c.Player, Tick: c.Tick, Kind: c.KindName, Known: c.Known,
			Entity: n.entity(c.Entity), EntityID: uint64(c.Entity), AppliedTick: c.Applied, Shard: uint32(c.Shard), Depth: c.Depth,
			Path: n.pathView(r, c)})
	}
	for _, l := range r.Chain() {
		out.Chain = append(out.Chain, LinkView{Entity: n.entity(l.Entity), EntityID: uint64(l.Entity), Tick: l.Tick,
			Shard: uint32(l.Shard), Depth: l.Depth, Parent: l.Parent})
	}
	return out
}

// PrintWhy writes a Why answer for people, listing at most limit
// commands (0: all).
func (n Names) PrintWhy(w io.Writer, r *WhyResult, limit int) {
	where := "wherever it was"
	if r.Shard != AnyShard {
		where = fmt.Sprintf("in sector %d", r.Shard)
	}
	depth := fmt.Sprintf("up to %d derivations", r.DepthLimit)
	if r.DepthLimit < 0 {
		depth = "every derivation"
	}
	fmt.Fprintf(w, "Why is %s as it is at the end of tick %d (%s)? Following %s, across sectors.\n",
		n.entity(r.Entity), r.Tick, where, depth)
	all := r.Causes(0) // nearest first
	players := map[uint32][]Cause{}
	for _, c := range all {
		players[c.Player] = append(players[c.Player], c)
	}
	entities := map[EntityID]bool{}
	for _, l := range r.Chain() {
		entities[l.Entity] = true
	}
	fmt.Fprintf(w, "%d commands from %d players (and the engine), through %d entities and %d derivations.\n",
		len(all), len(players)-btoi(len(players[0]) > 0), len(entities), len(r.Chain())-1)
	if r.Truncated {
		fmt.Fprintf(w, "The depth limit stopped the walk: --depth %d (or -1) finds more.\n", r.DepthLimit+2)
	}
	if r.Horizon > 0 {
		fmt.Fprintf(w, "History before tick %d was trimmed.\n", r.Horizon)
	}
	ids := make([]uint32, 0, len(players))
	for p := range players {
		ids = append(ids, p)
	}
	slices.SortFunc(ids, func(a, b uint32) int {
		return cmp.Or(cmp.Compare(minDepth(players[a]), minDepth(players[b])), cmp.Compare(len(players[b]), len(players[a])), cmp.Compare(a, b))
	})
	fmt.Fprintf(w, "\nby player (nearest first):\n")
	const maxPlayers = 25
	for i, p := range ids {
		if i == maxPlayers {
			fmt.Fprintf(w, "  ... %d more players\n", len(ids)-maxPlayers)
			break
		}
		kinds := map[string]int{}
		for _, c := range players[p] {
			kinds[c.KindName]++
		}
		var ks []string
		for k, n := range kinds {
			ks = append(ks, fmt.Sprintf("%s ×%d", k, n))
		}
		slices.Sort(ks)
		who := fmt.Sprintf("player %d", p)
		if p == 0 {
			who = "engine"
		}
		fmt.Fprintf(w, "  %-12s %4d commands, nearest %d derivations away: %s\n", who, len(players[p]), minDepth(players[p]), strings.Join(ks, ", "))
	}
	fmt.Fprintf(w, "\ncommands, nearest first: position, input tick, player, kind, where applied, and how it reaches\n%s (each arrow names the tick and sector at which the next entity was derived from the previous):\n", n.entity(r.Entity))
	for i, c := range all {
		if limit > 0 && i >= limit {
			fmt.Fprintf(w, "  ... %d more (--limit 0 lists all)\n", len(all)-limit)
			break
		}
		fmt.Fprintf(w, "  pos %-8d tick %-6d player %-5d %-10s applied to %s at tick %d: %s\n",
			c.Pos, c.Tick, c.Player, c.KindName, n.entity(c.Entity), c.Applied, n.pathText(r, c))
	}
}

func minDepth(cs []Cause) int {
	d := cs[0].Depth
	for _, c := range cs {
		d = min(d, c.Depth)
	}
	return d
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// AffectedView is the JSON view of an Affected answer.
type AffectedView struct {
	Pos      uint64          `json:"pos"`
	Player   uint32          `json:"player"`
	Tick     uint64          `json:"tick"`
	Kind     string          `json:"kind"`
	Through  uint64          `json:"through"`
	Entities []InfluenceView `json:"entities"`
	Counts   map[string]int  `json:"counts"`
}

// InfluenceView is an entity of an AffectedView.
type InfluenceView struct {
	Entity    string `json:"entity"`
	EntityID  uint64 `json:"entity_id"`
	Since     uint64 `json:"since"`
	Shard     uint32 `json:"shard"`
	From      string `json:"from,omitempty"`
	Depth     int    `json:"depth"`
	LastEvent uint64 `json:"last_event"`
}

// Affected returns the JSON view of an Affected answer.
func (n Names) Affected(r *AffectedResult) AffectedView {
	out := AffectedView{Pos: r.Command.Pos, Player: r.Command.Player, Tick: r.Command.Tick, Kind: r.KindName, Through: r.Through,
		Entities: []InfluenceView{}, Counts: map[string]int{}}
	for _, in := range r.Entities {
		j := InfluenceView{Entity: n.entity(in.Entity), EntityID: uint64(in.Entity), Since: in.Since, Shard: uint32(in.Shard),
			Depth: in.Depth, LastEvent: in.LastEvent}
		if in.From != 0 {
			j.From = n.entity(in.From)
		}
		out.Entities = append(out.Entities, j)
		out.Counts[n.kind(in.Entity)]++
	}
	return out
}

// PrintAffected writes an Affected answer for people, listing at most
// limit entities (0: all).
func (n Names) PrintAffected(w io.Writer, r *AffectedResult, limit int) {
	who := fmt.Sprintf("player %d", r.Command.Player)
	if r.Command.Player == 0 {
		who = "the engine"
	}
	fmt.Fprintf(w, "The command at position %d (%s, %s, input to tick %d) influenced %d entities through tick %d:",
		r.Command.Pos, who, r.KindName, r.Command.Tick, len(r.Entities), r.Through)
	counts := map[string]int{}
	for _, in := range r.Entities {
		counts[n.kind(in.Entity)]++
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%d %s", counts[k], k))
	}
	fmt.Fprintf(w, " %s", strings.Join(parts, ", "))
	fmt.Fprintf(w, ".\nEach is influenced at every tick from 'since' on.\n\n  %-8s %-16s %-7s %-16s %-6s %s\n", "since", "entity", "sector", "derived from", "depth", "last event")
	for i, in := range r.Entities {
		if limit > 0 && i >= limit {
			fmt.Fprintf(w, "  ... %d more (--limit 0 lists all)\n", len(r.Entities)-limit)
			break
		}
		from := "(the command)"
		if in.From != 0 {
			from = n.entity(in.From)
		}
		fmt.Fprintf(w, "  %-8d %-16s %-7d %-16s %-6d %d\n", in.Since, n.entity(in.Entity), in.Shard, from, in.Depth, in.LastEvent)
	}
}

// FrameView is the JSON view of a Frame answer.
type FrameView struct {
	Tick   uint64 `json:"tick"`
	Shards []struct {
		Shard  uint32 `json:"shard"`
		Inputs []struct {
			Pos     uint64   `json:"pos"`
			Player  uint32   `json:"player"`
			Kind    string   `json:"kind"`
			Applied []string `json:"applied"`
		} `json:"inputs"`
	} `json:"shards"`
}

// Frame returns the JSON view of a Frame answer.
func (n Names) Frame(r *FrameResult) FrameView {
	out := FrameView{Tick: r.Tick}
	for _, s := range r.Shards {
		js := struct {
			Shard  uint32 `json:"shard"`
			Inputs []struct {
				Pos     uint64   `json:"pos"`
				Player  uint32   `json:"player"`
				Kind    string   `json:"kind"`
				Applied []string `json:"applied"`
			} `json:"inputs"`
		}{Shard: uint32(s.Shard)}
		for _, in := range s.Inputs {
			ji := struct {
				Pos     uint64   `json:"pos"`
				Player  uint32   `json:"player"`
				Kind    string   `json:"kind"`
				Applied []string `json:"applied"`
			}{Pos: in.Pos, Player: in.Player, Kind: in.KindName, Applied: []string{}}
			for _, e := range in.Applied {
				ji.Applied = append(ji.Applied, n.entity(e))
			}
			js.Inputs = append(js.Inputs, ji)
		}
		out.Shards = append(out.Shards, js)
	}
	return out
}

// PrintFrame writes a Frame answer for people.
func (n Names) PrintFrame(w io.Writer, r *FrameResult) {
	if len(r.Shards) == 0 {
		fmt.Fprintf(w, "No lineage recorded for tick %d.\n", r.Tick)
		return
	}
	fmt.Fprintf(w, "Records input to tick %d, per sector, in log order:\n", r.Tick)
	for _, s := range r.Shards {
		fmt.Fprintf(w, "\nsector %d: %d records\n", s.Shard, len(s.Inputs))
		for _, in := range s.Inputs {
			who := fmt.Sprintf("player %d", in.Player)
			if in.Player == 0 {
				who = "engine"
			}
			applied := "applied to nothing here"
			if len(in.Applied) > 0 {
				var names []string
				for _, e := range in.Applied {
					names = append(names, n.entity(e))
				}
				applied = "applied to " + strings.Join(names, ", ")
			}
			fmt.Fprintf(w, "  pos %-8d %-12s %-10s %s\n", in.Pos, who, in.KindName, applied)
		}
	}
}
