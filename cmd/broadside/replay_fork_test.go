package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestReplayForkDiff: fork a generated bot match without a player and
// with a bot in its place; each fork verifies, diff names the player's
// ship, a fork that changes nothing diffs SAME, and lineage why answers
// from the fork.
func TestReplayForkDiff(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "m.bsr")
	if _, _, err := runCLI(t, "replay", "export", "--bots", "12", "--minutes", "0.25", "-o", path, "--no-progress"); err != nil {
		t.Fatal(err)
	}
	same, without, bot := filepath.Join(dir, "same.bsr"), filepath.Join(dir, "without.bsr"), filepath.Join(dir, "bot.bsr")
	for _, args := range [][]string{{"-o", same}, {"--without", "player:3", "-o", without}, {"--as-bot", "player:3", "-o", bot}} {
		out, _, err := runCLI(t, append([]string{"replay", "fork", path, "--at", "200"}, args...)...)
		if err != nil || !strings.Contains(out, "fork of m.bsr at tick 200") {
			t.Fatalf("fork %v: %v\n%s", args, err, out)
		}
		if out, _, err := runCLI(t, "replay", "verify", args[len(args)-1], "--no-progress"); err != nil || !strings.HasPrefix(out, "OK:") {
			t.Fatalf("verify %v: %v\n%s", args, err, out)
		}
	}
	if out, _, err := runCLI(t, "replay", "diff", path, same); err != nil || !strings.HasPrefix(out, "SAME:") {
		t.Fatalf("diff of an unchanged fork: %v\n%s", err, out)
	}
	for _, f := range []string{without, bot} {
		out, _, err := runCLI(t, "replay", "diff", path, f, "--limit", "0")
		if err != nil || !strings.HasPrefix(out, "DIFFER from tick 20") || !strings.Contains(out, "ship:3 ") || !strings.Contains(out, "only in A: position") {
			t.Fatalf("diff %s: %v\n%s", f, err, out)
		}
	}
	out, _, err := runCLI(t, "lineage", "why", "--recording", without, "--entity", "ship:4", "--tick", "400")
	if err != nil || !strings.Contains(out, "Why is ship:4") {
		t.Fatalf("lineage why on a fork: %v\n%s", err, out)
	}
}
