// Command broadside is Broadside's one CLI: it runs the demo, the log and
// game server nodes, the load bots, replay tools and benchmarks.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	if err := newRoot().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "broadside:", err)
		os.Exit(1)
	}
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "broadside",
		Short: "Recoverable, replayable authoritative game servers on a lazily ordered command log",
		Long: `Broadside appends players' commands to a lazily ordered, replicated command log
(LazyLog) and runs simulation shards as deterministic functions of that log.

Start with 'broadside demo'.`,
		Example: `  broadside demo
  broadside demo --duration 6s --recording match.bsr
  broadside replay info match.bsr`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	registerBenchCmd(newBenchSimCmd)
	registerBenchCmd(newBenchLineageCmd)
	root.AddCommand(newDemoCmd(), newServeCmd(), newBotsCmd(), newTokenCmd(), newLogdCmd(), newLogCmd(),
		newLineageCmd(), newBenchCmd(), newKeygenCmd(), newCertCmd())
	root.AddCommand(newReplayCmd())
	root.AddCommand(newSectorCmd(), newNatsCmd())
	root.AddCommand(newViewCmd())
	return root
}
