package main

import (
	"fmt"

	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/internal/report"
	"github.com/anoptic/broadside/replay/bsr"
	"github.com/spf13/cobra"
)

// newReplayForkCmd is `broadside replay fork`: a what-if recording.
func newReplayForkCmd() *cobra.Command {
	var o broadside.ForkOptions
	var keyFile string
	cmd := &cobra.Command{
		Use:   "fork FILE --at T (--without player:P | --drop POS,... | --as-bot player:P) -o OUT",
		Short: "Re-simulate a match from a tick with changed inputs, into a new recording",
		Long: `Fork restores every sector from the recording's newest snapshot at or before
--at and re-simulates the match from there, the sectors running live (their
migrations follow from the changed commands), without the commands of the
--without players from --at on, without the --drop log positions, and with
the --as-bot players' ships sailed by a bot from --at on. The fork is a
normal recording: verify, seek, lineage and diff work on it. With --key (a
signer key of broadside keygen) the fork's log checkpoints are signed with it,
for 'replay verify --key' with its verifier key; without, the fork is marked
unsigned (the original's signatures never cover a fork's log).`,
		Example: `  broadside replay fork demo.bsr --at 300 --without player:2 -o fork.bsr
  broadside replay fork demo.bsr --at 300 --as-bot player:3 --key analyst.key -o fork.bsr
  broadside replay diff demo.bsr fork.bsr`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.In = args[0]
			var err error
			if o.Signer, err = bsr.LoadSigner(keyFile); err != nil {
				return err
			}
			st, fi, err := broadside.ForkRecording(cmd.Context(), o)
			if err != nil {
				return err
			}
			signed := "unsigned"
			if fi.Signer != "" {
				signed = "signed by " + fi.Signer
			}
			fmt.Fprintf(cmd.OutOrStdout(), "fork of %s at tick %d (re-simulated from the snapshot of tick %d): %d entries removed, ticks %d..%d (%s) written to %s, %s\n",
				fi.Of, fi.At, fi.From, fi.Removed, st.FirstTick, st.LastTick, report.PlayTime(st.Ticks, broadside.TickRate), o.Out, signed)
			return nil
		},
	}
	f := cmd.Flags()
	f.Uint64Var(&o.At, "at", 0, "first tick whose inputs change")
	f.StringSliceVar(&o.Without, "without", nil, "remove these players' commands from --at on (player:P)")
	f.StringSliceVar(&o.Drop, "drop", nil, "remove these log positions (player commands of ticks ≥ --at)")
	f.StringSliceVar(&o.AsBot, "as-bot", nil, "hand these players' ships to a bot from --at on (player:P)")
	f.Uint64Var(&o.BotSeed, "bot-seed", 1, "seed of the bots' variety")
	f.StringVarP(&o.Out, "out", "o", "fork.bsr", "the fork to write")
	f.StringVar(&keyFile, "key", "", "sign the fork's log checkpoints with this signer key `FILE` (broadside keygen); without, the fork is unsigned")
	_ = cmd.MarkFlagRequired("at")
	return cmd
}

// newReplayDiffCmd is `broadside replay diff`.
func newReplayDiffCmd() *cobra.Command {
	var maxTicks uint64
	var limit int
	cmd := &cobra.Command{
		Use:   "diff A B",
		Short: "Every entity that differs between two recordings, and the commands that explain it",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := broadside.DiffRecordings(cmd.Context(), args[0], args[1], maxTicks)
			if err != nil {
				return err
			}
			broadside.WriteDiff(cmd.OutOrStdout(), res, limit)
			return nil
		},
	}
	cmd.Flags().Uint64Var(&maxTicks, "ticks", 0, "ticks to step after the first difference (0: to the end)")
	cmd.Flags().IntVar(&limit, "limit", 40, "entities to print (0: all)")
	return cmd
}
