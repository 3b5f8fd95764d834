package main

import (
	"time"

	"github.com/anoptic/broadside/demo/failover"
	"github.com/spf13/cobra"
)

func newDemoLogCmd() *cobra.Command {
	var o failover.Options
	cmd := &cobra.Command{
		Use:   "log",
		Short: "Run a 3-replica, 2-shard command log on loopback QUIC, crash its leader, read everything back",
		Long: `Start a command log cluster in this process — 3 sequencing replicas and 2 shards,
each with its own QUIC endpoint on 127.0.0.1, shards on Pebble — append from
several clients, stop the sequencing leader mid-run (a crash: it loses its
memory) and restart it, then read the whole log back and check that every
acknowledged append is there exactly once.`,
		Example: `  broadside demo log
  broadside demo log --duration 3s --clients 2 --fsync`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := failover.Run(cmd.Context(), cmd.OutOrStdout(), o)
			return err
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Clients, "clients", 3, "appending clients")
	f.IntVar(&o.Concurrency, "concurrency", 16, "concurrent appends per client")
	f.DurationVar(&o.Duration, "duration", 6*time.Second, "how long to append")
	f.IntVar(&o.Size, "size", 100, "record size in bytes")
	f.BoolVar(&o.Fsync, "fsync", false, "sequencing replicas in fsync durability (write-ahead log synced before acknowledging)")
	f.StringVar(&o.Dir, "dir", "", "data directory (default: a temporary one, removed afterwards)")
	return cmd
}
