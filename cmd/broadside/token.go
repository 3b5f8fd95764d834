package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"time"

	"github.com/anoptic/broadside/netcode/server"
	"github.com/spf13/cobra"
)

func newTokenCmd() *cobra.Command {
	var player, secretFile string
	var ttl time.Duration
	var id uint32
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Issue a signed, expiring player token (HMAC with the server secret)",
		Long: `Issue a player token for 'broadside serve'. The token carries the player's name
and numeric id and an expiry, signed with HMAC-SHA256 and the server's secret;
the server stamps every command with the authenticated player.

The secret is read from --secret-file (hex or raw bytes, at least 16 bytes);
if the file does not exist it is created with 32 random bytes.`,
		Example: `  broadside token --player ada --secret-file ./server.secret --ttl 24h`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			secret, err := loadOrCreateSecret(secretFile)
			if err != nil {
				return err
			}
			if id == 0 {
				id = server.PlayerIDFor(player)
			}
			tok, err := server.IssueToken(secret, server.Claims{Player: player, PlayerID: id, Expires: time.Now().Add(ttl)})
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), tok)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&player, "player", "", "player name (1..64 bytes)")
	f.Uint32Var(&id, "id", 0, "numeric player id (default: derived from the name)")
	f.StringVar(&secretFile, "secret-file", "server.secret", "server secret file (created if missing)")
	f.DurationVar(&ttl, "ttl", 24*time.Hour, "how long the token is valid")
	cmd.MarkFlagRequired("player")
	return cmd
}

// loadOrCreateSecret reads a server secret (hex or raw), creating a random
// one if the file does not exist.
func loadOrCreateSecret(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		s := make([]byte, 32)
		if _, err := rand.Read(s); err != nil {
			return nil, err
		}
		if err := os.WriteFile(path, []byte(hex.EncodeToString(s)+"\n"), 0o600); err != nil {
			return nil, fmt.Errorf("create secret %s: %w", path, err)
		}
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read secret %s: %w", path, err)
	}
	b = bytes.TrimSpace(b)
	if h, err := hex.DecodeString(string(b)); err == nil {
		b = h
	}
	if len(b) < 16 {
		return nil, fmt.Errorf("secret %s: shorter than 16 bytes", path)
	}
	return b, nil
}
