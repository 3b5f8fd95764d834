package main

import (
	"fmt"
	"time"

	"github.com/anoptic/broadside/netcode/server"
	"github.com/spf13/cobra"
)

func newTokenCmd() *cobra.Command {
	var player, secretFile, playersFile, audience string
	var ttl time.Duration
	var id uint32
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Issue a signed, expiring player or spectator token (HMAC with the server secret)",
		Long: `Issue a token for 'broadside serve'. The token carries the player's name, a
numeric player id, an audience (player: plays, sees its own view live;
spectator: sees the whole world --spectator-delay behind, sends no commands),
a random token id, its issue time and an expiry (at most 7 days later),
signed with HMAC-SHA256 and the server's secret. The server stamps every
command with the authenticated player id.

Player ids are assigned, never derived from names: the first token for a name
gets the next free id from the players file (--players-file, default
"players" beside the secret; one "id name" line per player, shared with
'broadside bots'), and the name keeps it. --id overrides it.

One live session per player: a second connection takes over only with a
newer token; the live session's token presented again, or an older one, is
refused (code 0x110, stale or replayed). A token may resume its own session
after that session's connection ended.

The secret is read from --secret-file (hex or raw bytes, at least 16 bytes);
if the file does not exist it is created with 32 random bytes.`,
		Example: `  broadside token --player ada --secret-file ./server.secret --ttl 24h
  broadside token --player ada-watch --audience spectator --secret-file ./server.secret`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			aud, err := server.ParseAudience(audience)
			if err != nil {
				return err
			}
			secret, err := server.LoadOrCreateSecret(secretFile)
			if err != nil {
				return err
			}
			if id == 0 {
				if playersFile == "" {
					playersFile = server.PlayersFileBeside(secretFile)
				}
				if id, err = server.OpenRegistry(playersFile).ID(player); err != nil {
					return err
				}
			}
			tok, err := server.IssueToken(secret, server.Claims{Player: player, PlayerID: id, Audience: aud, Expires: time.Now().Add(ttl)})
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), tok)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&player, "player", "", "player name (1..64 bytes, no spaces)")
	f.Uint32Var(&id, "id", 0, "numeric player id (default: the name's id in --players-file, assigned on first use)")
	f.StringVar(&secretFile, "secret-file", "server.secret", "server secret file (created if missing)")
	f.StringVar(&playersFile, "players-file", "", `player id registry (default: "players" beside --secret-file)`)
	f.StringVar(&audience, "audience", "player", "what the token opens: player or spectator")
	f.DurationVar(&ttl, "ttl", 24*time.Hour, "how long the token is valid (at most 168h)")
	cmd.MarkFlagRequired("player")
	return cmd
}
