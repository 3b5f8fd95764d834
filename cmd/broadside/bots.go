package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/anoptic/broadside/demo/bots"
	"github.com/anoptic/broadside/internal/report"
	"github.com/anoptic/broadside/netcode/server"
	"github.com/anoptic/broadside/netcode/transport"
	"github.com/spf13/cobra"
)

func newBotsCmd() *cobra.Command {
	var cfg bots.Config
	var caFile, secretFile, playersFile, jsonFile, pngFile, cpuProfile string
	cmd := &cobra.Command{
		Use:   "bots",
		Short: "Run N load bots against a game server and report latency and bandwidth",
		Long: `Run N headless bots, each with its own QUIC connection and token, sending
commands at --rate per second for --duration, and report command-to-
acknowledgement latency (p50/p99/p99.9; the report says whether the server
acknowledged durable, fsynced on every sequencing replica, or replicated, in
memory on every one), command-to-applied latency (the
first state update whose tick applied the command), state update jitter,
bytes per second per client up and down, and errors by kind. Tokens are
minted from the server's secret file (development setups), a fresh one for
every connection (a reconnection takes over the old session only with a newer
token); the bots' player ids come from the players file beside it (the one
'broadside token' uses), assigned to the names bot-1..bot-N on first use.

A bot whose connection is lost (a server crash or restart) reconnects with
backoff, up to --reconnect-attempts failed attempts in a row, resumes its
session and resends what was not acknowledged; the server stores each command
once. The report counts reconnections and resent commands, and gives the
latency of commands that waited across a reconnection separately.

Behaviours: captain (default) plays from the state updates: it steers toward
the nearest enemy it sees and fires the broadside that bears; random steers
and fires blindly.`,
		Example: `  broadside bots --server 127.0.0.1:4433 --ca broadside-dev/tls/ca.pem --secret-file broadside-dev/server.secret --n 50 --rate 30 --duration 30s`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			tlsCfg, err := transport.ClientTLS(caFile)
			if err != nil {
				return err
			}
			cfg.TLS = tlsCfg
			if cfg.Secret, err = server.LoadOrCreateSecret(secretFile); err != nil {
				return err
			}
			if playersFile == "" {
				playersFile = server.PlayersFileBeside(secretFile)
			}
			cfg.Players = server.OpenRegistry(playersFile)
			if cfg.ReconnectAttempts == 0 {
				cfg.NoReconnect = true
			}
			if cpuProfile != "" {
				stopProfile, err := report.CPUProfileToFile(cpuProfile)
				if err != nil {
					return err
				}
				defer stopProfile()
			}
			out := cmd.OutOrStdout()
			cfg.Progress = func(s bots.Snapshot) { s.WriteProgress(os.Stderr) }
			rep, err := bots.Run(ctx, cfg)
			fmt.Fprintln(os.Stderr)
			if err != nil {
				return err
			}
			rep.WriteSummary(out, cfg.Behaviour)
			if jsonFile != "" {
				if err := rep.WriteJSONFile(jsonFile); err != nil {
					return err
				}
			}
			if pngFile != "" {
				if err := rep.WritePNG(pngFile); err != nil {
					return err
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Server, "server", "127.0.0.1:4433", "game server address")
	f.StringVar(&caFile, "ca", "broadside-dev/tls/ca.pem", "CA certificate the server's certificate chains to")
	f.StringVar(&secretFile, "secret-file", "broadside-dev/server.secret", "server secret (to mint bot tokens)")
	f.StringVar(&playersFile, "players-file", "", `player id registry (default: "players" beside --secret-file)`)
	f.IntVar(&cfg.N, "n", 10, "number of bots")
	f.Float64Var(&cfg.Rate, "rate", 10, "commands per second per bot")
	f.DurationVar(&cfg.Duration, "duration", 10*time.Second, "how long to run")
	f.StringVar(&cfg.Behaviour, "behaviour", bots.Captain, "bot behaviour: captain (plays from the state) or random")
	f.Uint64Var(&cfg.Seed, "seed", 1, "random seed")
	f.IntVar(&cfg.ReconnectAttempts, "reconnect-attempts", 10, "failed reconnection attempts in a row before a bot gives up (0: never reconnect)")
	f.IntVar(&cfg.Window, "window", 64, "commands a bot may have awaiting acknowledgement; with the window full it skips its turn")
	f.StringVar(&jsonFile, "json", "", "write the report as JSON")
	f.StringVar(&pngFile, "png", "", "write ack latency (p50, p99) over time as a PNG chart")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write the bots' CPU profile (the whole run, connections included) to this file, for go tool pprof")
	f.IntVar(&cfg.BotsPerSocket, "bots-per-socket", 0, "bots sharing one UDP socket (0: 32; 1: a socket each)")
	return cmd
}
