package main

import (
	"encoding/json"
	"fmt"
	"image/color"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/anoptic/broadside/demo/bots"
	"github.com/anoptic/broadside/internal/report"
	"github.com/anoptic/broadside/netcode/server"
	"github.com/anoptic/broadside/netcode/transport"
	"github.com/spf13/cobra"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

func newBotsCmd() *cobra.Command {
	var cfg bots.Config
	var caFile, secretFile, playersFile, jsonFile, pngFile string
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
			if cfg.Secret, err = loadOrCreateSecret(secretFile); err != nil {
				return err
			}
			if playersFile == "" {
				playersFile = filepath.Join(filepath.Dir(secretFile), "players")
			}
			cfg.Players = server.OpenRegistry(playersFile)
			if cfg.ReconnectAttempts == 0 {
				cfg.NoReconnect = true
			}
			out := cmd.OutOrStdout()
			cfg.Progress = func(s bots.Snapshot) {
				fmt.Fprintf(os.Stderr, "\r%6s  %d bots  sent %d  durable %d  replicated %d  applied %d  ack p50 %dus p99 %dus  applied p99 %dms   ",
					s.Elapsed, s.Connected, s.Sent, s.Durable, s.Replicated, s.Applied, s.P50us, s.P99us, s.AppliedP99us/1000)
			}
			rep, err := bots.Run(ctx, cfg)
			fmt.Fprintln(os.Stderr)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "bots:        %d x %.0f commands/s for %.1fs (%s)\n", rep.Bots, rep.RatePerBot, rep.DurationSec, cfg.Behaviour)
			rep.WriteText(out)
			if len(rep.Errors) == 0 {
				fmt.Fprintf(out, "errors:      none\n")
			}
			for _, k := range rep.ErrorKinds() {
				if first, ok := rep.FirstErrors[k]; ok {
					fmt.Fprintf(out, "errors:      %s: %d (first: %s)\n", k, rep.Errors[k], first)
					continue
				}
				fmt.Fprintf(out, "errors:      %s: %d\n", k, rep.Errors[k])
			}
			if jsonFile != "" {
				b, _ := json.MarshalIndent(rep, "", "  ")
				if err := os.WriteFile(jsonFile, b, 0o644); err != nil {
					return err
				}
			}
			if pngFile != "" {
				if err := plotTimeline(rep, pngFile); err != nil {
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
	return cmd
}

// plotTimeline draws the report's ack and applied latency over time.
func plotTimeline(rep bots.Report, file string) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%d bots x %.0f cmd/s: command to ack (%s) and to applied", rep.Bots, rep.RatePerBot, rep.AckStatus)
	p.X.Label.Text = "seconds"
	p.Y.Label.Text = "latency (µs)"
	p50, p99, app := make(plotter.XYs, len(rep.Timeline)), make(plotter.XYs, len(rep.Timeline)), make(plotter.XYs, len(rep.Timeline))
	for i, s := range rep.Timeline {
		p50[i] = plotter.XY{X: s.Elapsed.Seconds(), Y: float64(s.P50us)}
		p99[i] = plotter.XY{X: s.Elapsed.Seconds(), Y: float64(s.P99us)}
		app[i] = plotter.XY{X: s.Elapsed.Seconds(), Y: float64(s.AppliedP99us)}
	}
	l50, err := plotter.NewLine(p50)
	if err != nil {
		return err
	}
	l99, err := plotter.NewLine(p99)
	if err != nil {
		return err
	}
	l99.Color = color.RGBA{R: 200, A: 255}
	lapp, err := plotter.NewLine(app)
	if err != nil {
		return err
	}
	lapp.Color = color.RGBA{B: 200, A: 255}
	p.Add(l50, l99, lapp)
	p.Legend.Add("ack p50", l50)
	p.Legend.Add("ack p99", l99)
	p.Legend.Add("applied p99", lapp)
	return report.Chart{Plots: []*plot.Plot{p}, PanelWidth: 8 * vg.Inch, PanelHeight: 4 * vg.Inch}.WritePNG(file)
}
