package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/anoptic/broadside/cmdlog"
	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/internal/adminauth"
	"github.com/anoptic/broadside/internal/report"
	"github.com/anoptic/broadside/netcode/wire"
	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/bsr"
	"github.com/anoptic/broadside/replay/inspect"
	"github.com/anoptic/broadside/replay/world"
	"github.com/spf13/cobra"
	"golang.org/x/mod/sumdb/note"
)

// Recordings of Broadside matches: the header names the game
// (broadside.GameName) and its schema version and carries the world's
// broadside.Config, so 'replay info|verify|seek' need no game flags; the
// world id is world.DefaultID (the world serve and demo run) unless told.

// recordMatch records the log src delivers (from position 1) of world id
// of game with cfg (world.Record, with the CLI's quiet logger).
func recordMatch(ctx context.Context, path string, game world.Game, id uint32, src replay.Source, cfg bsr.RecordConfig) (bsr.RecordStats, int64, error) {
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	return world.Record(ctx, path, game, id, src, cfg)
}

// openRecording opens a Broadside recording and decodes its world.
func openRecording(path string) (*bsr.Reader, world.Game, broadside.Config, error) {
	return broadside.OpenRecording(path)
}

// recGame is what the replay reports need of Broadside.
var recGame = inspect.Game{TickRate: broadside.TickRate, SchemaVersion: broadside.SchemaVersion, FieldValues: broadside.FieldValues}

// newReplayCmd is `broadside replay`: export, info, verify and seek of .bsr
// recordings.
func newReplayCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "replay",
		Short: "Record matches to .bsr files, and inspect, verify and seek them",
		Long: `A recording (.bsr) holds a match's command log, every tick's state hash per
sector, incremental snapshots and lineage, checksummed chunk by chunk, with a
seek index at the end. 'broadside demo' writes one of its match; 'replay export'
records one from a running 'serve' (--server, --log), from the stored log of a
stopped one (--log-dir), from another recording, or from a bot match it
generates ('serve' itself writes none).

  export   record a match: from a running server's log, a stored log, another
           recording, or a generated bot match
  info     what a recording holds
  verify   re-simulate every tick and compare its hash; name the first tick,
           entity and field that differ (exit status 1)
  seek     the state at a tick, and how long the seek took
  fork     re-simulate from a tick with changed inputs (what-if), into a new recording
  diff     every entity that differs between two recordings, and why`,
		Example: `  broadside replay export --bots 200 --minutes 5 -o match.bsr
  broadside replay info match.bsr
  broadside replay verify match.bsr
  broadside replay seek match.bsr --tick 4500

  broadside demo --duration 6s --recording demo.bsr
  broadside replay verify demo.bsr`,
	}
	cmd.AddCommand(newReplayExportCmd(), newReplayInfoCmd(), newReplayVerifyCmd(), newReplaySeekCmd(), newReplayForkCmd(), newReplayDiffCmd())
	return cmd
}

type exportOptions struct {
	out                string
	server             string
	adminToken         string
	logDir             string
	useLog             bool
	external           clusterFlags
	follow             bool
	fromFile           string
	bots               int
	minutes            float64
	world              uint32
	seed               uint64
	worldSize          int32
	sectors, islands   int
	fromTick, toTick   uint64
	fullEvery, deltaEv uint64
	seekTarget         time.Duration
	noProgress         bool
	asJSON             bool
	key                string
}

func newReplayExportCmd() *cobra.Command {
	var o exportOptions
	cmd := &cobra.Command{
		Use:   "export",
		Short: "Record a match to a .bsr file",
		Long: `Record a match to a .bsr file, from one of:

  --server ADDR    a running 'serve', through its admin address (--admin-addr):
                   the match up to now, with the server's world
  --log-dir DIR    a stored command log: the data directory of a stopped 'serve'
                   (its log/ holds the Pebble shard stores)
  --log            a running server's command log cluster (give its --log-peers,
                   --log-coord and TLS flags); records up to the log's tail when the
                   export started, or with --follow keeps recording the match as it is
                   played until --to-tick or Ctrl-C
  --from FILE      another recording (to re-record it, e.g. with another snapshot
                   policy)
  --bots N         a match of N bots generated here (--minutes long), to try the tools
                   without a server

The world is described by --seed, --world-size, --sectors and --islands (the
same flags and defaults as 'serve'); the recording keeps it, so the other
replay commands need no game flags. Snapshots are placed so that a seek to
any tick takes under --seek-target, unless --full-every fixes the schedule.
The file is written as the match is read: if export is interrupted, the file
holds every tick up to where it stopped.`,
		Example: `  broadside replay export --bots 20 --minutes 1 -o bots.bsr
  broadside replay export --from bots.bsr --full-every 300 --delta-every 30 -o bots-dense.bsr

  # a running server (broadside serve --dev, with bots playing):
  broadside replay export --server 127.0.0.1:9090 -o live.bsr
  # the same match after the server stopped (its --data directory):
  broadside replay export --log-dir broadside-dev/data -o stopped.bsr`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runReplayExport(ctx, cmd.OutOrStdout(), cmd.ErrOrStderr(), o)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.out, "out", "o", "", "the recording to write (.bsr)")
	f.StringVar(&o.server, "server", "", "record a running server's match up to now, through its admin address (serve --admin-addr)")
	f.StringVar(&o.adminToken, "admin-token-file", "", "with --server: the admin bearer token file (serve --admin-token-file)")
	f.StringVar(&o.logDir, "log-dir", "", "record a stored command log: DIR or DIR/log holds its shard-* stores (the server must be stopped)")
	f.BoolVar(&o.useLog, "log", false, "record from a running command log cluster (--log-peers, --log-coord, TLS flags)")
	o.external.registerPrefixed(f, "log-")
	f.BoolVar(&o.follow, "follow", false, "with --log: keep recording as the match goes on, until --to-tick or Ctrl-C")
	f.StringVar(&o.fromFile, "from", "", "re-record this recording")
	f.IntVar(&o.bots, "bots", 0, "record a generated match of this many bots")
	f.Float64Var(&o.minutes, "minutes", 5, "with --bots: the match's length in minutes")
	f.Uint32Var(&o.world, "world", world.DefaultID, "world id (the one 'serve' runs)")
	def := defaultRecordGame()
	f.Uint64Var(&o.seed, "seed", def.Seed, "world seed (as given to 'serve')")
	f.Int32Var(&o.worldSize, "world-size", def.Width, "width and height of the sea in metres (as given to 'serve')")
	f.IntVar(&o.sectors, "sectors", def.SectorsX, "sectors per side (as given to 'serve')")
	f.IntVar(&o.islands, "islands", def.Islands, "islands (as given to 'serve')")
	f.Uint64Var(&o.fromTick, "from-tick", 0, "first tick to record (0: the start of the match)")
	f.Uint64Var(&o.toTick, "to-tick", 0, "last tick to record (0: the end)")
	f.Uint64Var(&o.fullEvery, "full-every", 0, "fixed schedule: a full snapshot every this many ticks (0: adaptive)")
	f.Uint64Var(&o.deltaEv, "delta-every", 0, "fixed schedule: a delta snapshot every this many ticks between full ones")
	f.DurationVar(&o.seekTarget, "seek-target", bsr.DefaultSeekTarget, "adaptive schedule: seeks to any tick must take less than this")
	f.BoolVar(&o.noProgress, "no-progress", false, "no progress display")
	f.BoolVar(&o.asJSON, "json", false, "print the result as JSON")
	f.StringVar(&o.key, "key", "", "sign the recording's log checkpoints with this signer key `FILE` (broadside keygen)")
	_ = cmd.MarkFlagRequired("out")
	return cmd
}

func (o exportOptions) gameConfig() broadside.Config {
	return broadside.Config{Seed: o.seed, Width: o.worldSize, Height: o.worldSize, SectorsX: o.sectors, SectorsY: o.sectors, Islands: o.islands}
}

// exportSource is what 'replay export' records: a log source and the world
// it belongs to.
type exportSource struct {
	src   replay.Source
	game  world.Game
	total uint64 // ticks (bots, to-tick) or positions (logs) to go, 0 if unknown
	inPos bool   // total counts log positions
	what  string
	close func()
}

// openExportSource opens the one source the flags name.
func openExportSource(ctx context.Context, o *exportOptions) (*exportSource, error) {
	sources := 0
	for _, set := range []bool{o.logDir != "", o.useLog, o.fromFile != "", o.bots > 0, o.server != ""} {
		if set {
			sources++
		}
	}
	if sources != 1 {
		return nil, errors.New("give exactly one of --server, --log-dir, --log, --from and --bots")
	}
	if o.follow && !o.useLog {
		return nil, errors.New("--follow goes with --log")
	}
	game, err := broadside.NewGame(o.gameConfig(), 0)
	if err != nil {
		return nil, err
	}
	es := &exportSource{game: game, close: func() {}}
	switch {
	case o.bots > 0:
		ticks := uint64(o.minutes * 60 * broadside.TickRate)
		m, err := broadside.NewBotMatch(o.gameConfig(), o.bots, o.seed, world.LocalConfig{ID: o.world, Logger: quietLogger()})
		if err != nil {
			return nil, err
		}
		es.src, es.total, es.close = m.Source(ticks), ticks, m.Close
		es.what = fmt.Sprintf("a generated match of %d bots, %d ticks", o.bots, ticks)
	case o.fromFile != "":
		r, g, _, err := openRecording(o.fromFile)
		if err != nil {
			return nil, err
		}
		if es.src, err = r.Source(); err != nil {
			r.Close()
			return nil, err
		}
		es.game, es.total, es.close = g, r.LastTick(), func() { r.Close() }
		if o.world == world.DefaultID {
			o.world = r.Header().World
		}
		es.what = fmt.Sprintf("recording %s (ticks %d..%d)", o.fromFile, r.FirstTick(), r.LastTick())
	case o.server != "":
		var token []byte
		if o.adminToken != "" {
			if token, err = adminauth.ReadToken(o.adminToken); err != nil {
				return nil, err
			}
		}
		hs, conf, err := world.OpenExportWithToken(ctx, o.server, string(token), wire.MaxWelcomeWorld)
		if err != nil {
			return nil, err
		}
		if es.game, _, err = broadside.GameOf(conf); err != nil {
			hs.Close()
			return nil, fmt.Errorf("server %s: its world: %w", o.server, err)
		}
		es.src, es.total, es.inPos, es.close = hs, hs.To(), true, func() { hs.Close() }
		es.what = fmt.Sprintf("the running server at %s (positions 1..%d)", o.server, hs.To())
	case o.logDir != "":
		sl, err := world.OpenStored(o.logDir, quietLogger())
		if err != nil {
			return nil, err
		}
		es.src, es.total, es.inPos, es.close = sl, sl.Last(), true, sl.Close
		es.what = fmt.Sprintf("the stored log in %s (positions 1..%d)", sl.Dir(), sl.Last())
	case o.useLog:
		return es, es.openCluster(ctx, o)
	}
	return es, nil
}

// openCluster sets es to the log of a running cluster.
func (es *exportSource) openCluster(ctx context.Context, o *exportOptions) error {
	c, closeAll, err := o.external.dialCluster(ctx, cmdlog.ClientConfig{})
	if err != nil {
		return err
	}
	sub := c.Subscribe(1)
	es.src, es.close, es.what = sub, closeAll, "the running log cluster"
	if o.follow {
		es.what += ", following the match (Ctrl-C to stop)"
		return nil
	}
	tail, err := c.CheckTail(ctx)
	if err != nil {
		closeAll()
		return fmt.Errorf("log tail: %w", err)
	}
	es.src, es.total, es.inPos = &replay.UpTo{Src: sub, Last: tail}, tail, true
	es.what += fmt.Sprintf(" up to its tail (position %d)", tail)
	return nil
}

func runReplayExport(ctx context.Context, out, errOut io.Writer, o exportOptions) error {
	signer, err := bsr.LoadSigner(o.key)
	if err != nil {
		return err
	}
	es, err := openExportSource(ctx, &o)
	if err != nil {
		return err
	}
	defer es.close()
	fmt.Fprintf(errOut, "recording %s into %s\n", es.what, o.out)
	src, progress, finish := inspect.ExportProgress(errOut, es.src, es.total, es.inPos, o.toTick, o.noProgress)
	cfg := bsr.RecordConfig{FromTick: o.fromTick, ToTick: o.toTick, Signer: signer, Progress: progress,
		Snapshots: bsr.SnapshotPolicy{FullEvery: o.fullEvery, DeltaEvery: o.deltaEv, SeekTarget: o.seekTarget}}
	st, size, err := recordMatch(ctx, o.out, es.game, o.world, src, cfg)
	finish()
	if err != nil {
		return err
	}
	if st.Ticks == 0 {
		fmt.Fprintf(errOut, "warning: no tick was recorded (%s)\n", st.Stopped)
	}
	res := recGame.NewExport(o.out, size, st)
	if o.asJSON {
		return report.WriteJSON(out, res)
	}
	recGame.PrintExport(out, res)
	return nil
}

func newReplayInfoCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "info FILE",
		Short: "What a recording holds",
		Long: `Info reads a recording's header, seek index and chunk directory and prints
the world it is of (id, seed, size, sectors, islands), when it was recorded,
the ticks and log positions it covers, its size per minute of play, its
snapshots and schedule, its lineage, and the size of each kind of chunk.`,
		Example: `  broadside replay export --bots 20 --minutes 1 -o bots.bsr
  broadside replay info bots.bsr
  broadside replay info bots.bsr --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, _, game, err := openRecording(args[0])
			if err != nil {
				return err
			}
			defer r.Close()
			in := r.Info()
			if asJSON {
				return report.WriteJSON(cmd.OutOrStdout(), inspect.InfoJSON(in, game))
			}
			recGame.PrintInfo(cmd.OutOrStdout(), in, fmt.Sprintf("%d × %d m in %d sectors, %d islands", game.Width, game.Height, in.Header.Shards, game.Islands))
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newReplayVerifyCmd() *cobra.Command {
	var asJSON, noProgress bool
	var keyFile string
	cmd := &cobra.Command{
		Use:   "verify FILE",
		Short: "Re-simulate a recording and compare every tick's state hash",
		Long: `Re-simulate a recording from its start with one replay.Runner per sector (the
code that runs a live match) and compare every tick's state hash with the
recorded one; every chunk's checksum is checked too. On a divergence the
diverged sector is re-simulated up to its next recorded snapshot and compared
with it record by record, to name the first entity and field that differ. The
exit status is 1 when the recording does not re-simulate.

With --key server.pub (broadside keygen) it first checks the recording's signed
log, offline: it recomputes the Merkle tree (RFC 6962, golang.org/x/mod/sumdb/tlog)
of the recorded command log and requires every recorded checkpoint to carry the
key's signature and to match it, and the last one to cover every recorded
command. So no command was added, dropped, reordered or changed after the
server signed it; the re-simulation then shows that the state hashes follow from
those commands. Several files are the segments of one match (serve --record
after restarts): each later one must prove its log extends the earlier one's.`,
		Example: `  broadside demo --duration 6s --recording demo.bsr
  broadside replay verify demo.bsr
  broadside replay verify demo.bsr --json --no-progress
  broadside replay verify --key server.pub demo.bsr`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			out := cmd.OutOrStdout()
			if len(args) > 1 && keyFile == "" {
				return errors.New("several segments are verified with --key")
			}
			var signed *bsr.SignedResult
			if keyFile != "" {
				v, err := bsr.LoadVerifier(keyFile)
				if err != nil {
					return err
				}
				for i, path := range args {
					res, err := verifySignedFile(path, v)
					if err != nil {
						return err
					}
					if signed != nil {
						if err := bsr.CheckSegments(*signed, res); err != nil {
							return fmt.Errorf("%s does not continue %s: %w", path, args[i-1], err)
						}
					}
					signed = &res
					if !asJSON {
						inspect.PrintSigned(out, path, res)
					}
				}
			}
			for _, path := range args[:len(args)-1] {
				if err := verifyOne(ctx, out, path, nil, asJSON, noProgress, cmd.ErrOrStderr()); err != nil {
					return err
				}
			}
			return verifyOne(ctx, out, args[len(args)-1], signed, asJSON, noProgress, cmd.ErrOrStderr())
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().BoolVar(&noProgress, "no-progress", false, "no progress display")
	cmd.Flags().StringVar(&keyFile, "key", "", "check the signed log with this verifier key `FILE` (broadside keygen's server.pub)")
	return cmd
}

// verifySignedFile checks one recording's signed log.
func verifySignedFile(path string, v note.Verifier) (bsr.SignedResult, error) {
	r, err := bsr.Open(path)
	if err != nil {
		return bsr.SignedResult{}, err
	}
	defer r.Close()
	return bsr.VerifySigned(r, v)
}

// verifyOne re-simulates one recording (signed, if set, is its signed log
// check, for the JSON output).
func verifyOne(ctx context.Context, out io.Writer, path string, signed *bsr.SignedResult, asJSON, noProgress bool, errOut io.Writer) error {
	r, game, _, err := openRecording(path)
	if err != nil {
		return err
	}
	defer r.Close()
	return recGame.Verify(ctx, out, errOut, r, game.NewSim, inspect.VerifyOptions{JSON: asJSON, Signed: signed, NoProgress: noProgress})
}

func newReplaySeekCmd() *cobra.Command {
	var tick uint64
	var ships int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "seek FILE --tick T",
		Short: "The state of the world at a tick, and how long the seek took",
		Long: `Seek restores every sector at --tick from the recording's nearest snapshots
and replays the log from them up to the tick (the code the viewer seeks
with), checks each sector's state hash against the recorded one, and prints
how long that took, what each sector holds, and the --ships most damaged
ships.`,
		Example: `  broadside replay export --bots 20 --minutes 1 -o bots.bsr
  broadside replay seek bots.bsr --tick 900
  broadside replay seek bots.bsr --tick 1800 --ships 10 --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, game, _, err := openRecording(args[0])
			if err != nil {
				return err
			}
			defer r.Close()
			sk, err := bsr.NewSeeker(r, game.NewSim)
			if err != nil {
				return err
			}
			sk.Reset() // a cold seek: restore from snapshots, as for any tick
			if err := sk.Seek(tick); err != nil {
				return err
			}
			sum := seekSummary{inspect.SeekOf(sk), broadside.Summarize(sk.Sims(), ships)}
			if asJSON {
				return report.WriteJSON(cmd.OutOrStdout(), sum)
			}
			recGame.PrintSeek(cmd.OutOrStdout(), r, sum.Seek)
			sum.WriteText(cmd.OutOrStdout())
			return nil
		},
	}
	cmd.Flags().Uint64Var(&tick, "tick", 0, "the tick")
	cmd.Flags().IntVar(&ships, "ships", 5, "list this many ships (most damaged first)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	_ = cmd.MarkFlagRequired("tick")
	return cmd
}

// seekSummary is 'replay seek --json': the seek and the state.
type seekSummary struct {
	inspect.Seek
	broadside.StateSummary
}
