package main

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anoptic/broadside/replay/bsr"
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

// TestReplayForkSigned: a fork of a server-signed recording made with
// --key verifies with that key's verifier (SIGNED, OK) and is refused,
// naming its signer, by the server's key (its log is not the original's);
// a fork without --key says it is unsigned, and verify --key on it says
// clearly that it is not signed by that key, an unsigned fork; neither is
// a crash.
func TestReplayForkSigned(t *testing.T) {
	server, analyst := t.TempDir(), t.TempDir()
	if _, _, err := runCLI(t, "keygen", "--dir", server, "--name", "test-server"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runCLI(t, "keygen", "--dir", analyst, "--name", "analyst"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "m.bsr")
	if _, _, err := runCLI(t, "replay", "export", "--bots", "8", "--minutes", "0.2", "-o", path, "--no-progress",
		"--key", filepath.Join(server, "server.key")); err != nil {
		t.Fatal(err)
	}
	signed, unsigned := filepath.Join(dir, "signed.bsr"), filepath.Join(dir, "unsigned.bsr")
	out, _, err := runCLI(t, "replay", "fork", path, "--at", "150", "--as-bot", "player:2", "--key", filepath.Join(analyst, "server.key"), "-o", signed)
	if err != nil || !strings.Contains(out, "signed by analyst") {
		t.Fatalf("fork --key: %v\n%s", err, out)
	}
	out, _, err = runCLI(t, "replay", "verify", "--no-progress", "--key", filepath.Join(analyst, "server.pub"), signed)
	if err != nil || !strings.Contains(out, "SIGNED: ") || !strings.Contains(out, "analyst") || !strings.Contains(out, "OK: ") {
		t.Fatalf("verify the signed fork with its key: %v\n%s", err, out)
	}
	_, _, err = runCLI(t, "replay", "verify", "--no-progress", "--key", filepath.Join(server, "server.pub"), signed)
	if !errors.Is(err, bsr.ErrSignature) || !strings.Contains(err.Error(), "not signed by test-server") || !strings.Contains(err.Error(), "signed by analyst") {
		t.Fatalf("verify the analyst's fork with the server's key: %v", err)
	}
	out, _, err = runCLI(t, "replay", "fork", path, "--at", "150", "--without", "player:2", "-o", unsigned)
	if err != nil || !strings.Contains(out, ", unsigned") {
		t.Fatalf("fork without --key: %v\n%s", err, out)
	}
	for _, key := range []string{server, analyst} {
		_, _, err = runCLI(t, "replay", "verify", "--no-progress", "--key", filepath.Join(key, "server.pub"), unsigned)
		if !errors.Is(err, bsr.ErrSignature) || !strings.Contains(err.Error(), "not signed by ") || !strings.Contains(err.Error(), "an unsigned fork of m.bsr") {
			t.Fatalf("verify --key %s on an unsigned fork: %v", key, err)
		}
	}
	if out, _, err := runCLI(t, "replay", "verify", "--no-progress", unsigned); err != nil || !strings.HasPrefix(out, "OK:") {
		t.Fatalf("verify of the unsigned fork without --key: %v\n%s", err, out)
	}
}
