//go:build !js

package broadside

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/anoptic/broadside/replay/bsr"
	"golang.org/x/mod/sumdb/note"
)

// ForkOptions say what a what-if fork of a recording changes
// (`broadside replay fork`).
type ForkOptions struct {
	// In is the original recording, Out the fork to write.
	In, Out string
	// At is the first tick whose inputs change.
	At uint64
	// Without, Drop and AsBot: players ("player:P" or "P") whose commands
	// from At on are removed, log positions removed, players whose ships
	// a bot (ForkBot) sails from At on.
	Without []string
	Drop    []string
	AsBot   []string
	// BotSeed seeds the bots' variety.
	BotSeed uint64
	// Signer, if set, signs the fork's log checkpoints (bsr.ForkConfig.
	// Signer); nil writes a fork marked unsigned.
	Signer note.Signer
}

// ParsePlayer reads "player:P" (or "P").
func ParsePlayer(s string) (uint32, error) {
	p, err := strconv.ParseUint(strings.TrimPrefix(s, "player:"), 10, 32)
	if err != nil || p == 0 {
		return 0, fmt.Errorf("player %q: want player:P with P ≥ 1", s)
	}
	return uint32(p), nil
}

// ForkRecording writes the fork o describes (bsr.Fork with Broadside's
// sims, lineage kinds and bots).
func ForkRecording(ctx context.Context, o ForkOptions) (bsr.RecordStats, bsr.ForkInfo, error) {
	r, game, _, err := OpenRecording(o.In)
	if err != nil {
		return bsr.RecordStats{}, bsr.ForkInfo{}, err
	}
	defer r.Close()
	cfg := bsr.ForkConfig{Reader: r, NewSim: game.NewSim, CommandKind: game.CommandKind, KindNames: game.KindNames,
		At: o.At, Of: filepath.Base(o.In), Signer: o.Signer}
	for _, s := range o.Drop {
		pos, err := strconv.ParseUint(s, 10, 64)
		if err != nil || pos == 0 {
			return bsr.RecordStats{}, bsr.ForkInfo{}, fmt.Errorf("--drop %q: want a log position", s)
		}
		cfg.Drop = append(cfg.Drop, pos)
	}
	for _, s := range o.Without {
		p, err := ParsePlayer(s)
		if err != nil {
			return bsr.RecordStats{}, bsr.ForkInfo{}, err
		}
		cfg.WithoutPlayers = append(cfg.WithoutPlayers, p)
	}
	for _, s := range o.AsBot {
		p, err := ParsePlayer(s)
		if err != nil {
			return bsr.RecordStats{}, bsr.ForkInfo{}, err
		}
		if cfg.Bots == nil {
			cfg.Bots = map[uint32]bsr.Bot{}
		}
		cfg.Bots[p] = ForkBot(p, o.BotSeed)
	}
	w, err := bsr.Create(o.Out, r.Header(), bsr.WriterOptions{})
	if err != nil {
		return bsr.RecordStats{}, bsr.ForkInfo{}, err
	}
	cfg.Writer = w
	st, fi, err := bsr.Fork(ctx, cfg)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	return st, fi, err
}

// DiffRecordings compares two recordings of one Broadside world (bsr.Diff).
func DiffRecordings(ctx context.Context, a, b string, maxTicks uint64) (bsr.DiffResult, error) {
	ra, game, _, err := OpenRecording(a)
	if err != nil {
		return bsr.DiffResult{}, err
	}
	defer ra.Close()
	rb, _, _, err := OpenRecording(b)
	if err != nil {
		return bsr.DiffResult{}, err
	}
	defer rb.Close()
	return bsr.Diff(ctx, bsr.DiffConfig{A: ra, B: rb, NewSim: game.NewSim, MaxTicks: maxTicks})
}

// WriteDiff prints a diff for people: the first tick, then every entity
// that differs with its first tick, fields and the commands that explain
// it (at most limit entities; 0: all).
func WriteDiff(w io.Writer, res bsr.DiffResult, limit int) {
	if res.FirstTick == 0 {
		fmt.Fprintf(w, "SAME: ticks %d..%d hold the same state in both recordings\n", res.From, res.To)
		return
	}
	fmt.Fprintf(w, "DIFFER from tick %d (compared ticks %d..%d, stepped to %d): %d entities differ\n",
		res.FirstTick, res.From, res.To, res.Through, len(res.Entities))
	for i, e := range res.Entities {
		if limit > 0 && i == limit {
			fmt.Fprintf(w, "  ... %d more\n", len(res.Entities)-limit)
			break
		}
		fmt.Fprintf(w, "  %-16s sector %d from tick %d: %s\n", e.Entity, e.Shard, e.FirstTick, strings.Join(e.Fields, ", "))
		for k, c := range e.Causes {
			if k == 2 && len(e.Causes) > 3 {
				fmt.Fprintf(w, "      ... and %d more commands\n", len(e.Causes)-2)
				break
			}
			fmt.Fprintf(w, "      only in %s: position %d, player %d %s, input of tick %d\n", c.In, c.Pos, c.Player, c.Kind, c.Tick)
		}
	}
	if res.Truncated {
		fmt.Fprintln(w, "  (list truncated)")
	}
}
