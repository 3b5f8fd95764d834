package main

import (
	"context"
	"fmt"
	"time"

	"github.com/anoptic/broadside/cmdlog"
	"github.com/anoptic/broadside/cmdlog/logd"
	"github.com/spf13/cobra"
)

func newLogCmd() *cobra.Command {
	lc := &logClientFlags{}
	cmd := &cobra.Command{
		Use:   "log",
		Short: "Talk to a command log cluster: append, read, tail, trim",
		Long: `Talk to a command log cluster started with 'broadside logd'.

Every subcommand needs the cluster's --peers, --coord and TLS flags (the same
values the nodes got). The examples talk to the cluster that the example of
'broadside logd --help' starts, whose peers are $P:`,
		Example: `  P=1=127.0.0.1:7001,2=127.0.0.1:7002,3=127.0.0.1:7003,101=127.0.0.1:7101,102=127.0.0.1:7102
  broadside log append --peers $P --coord nats://127.0.0.1:4222 --tls-dir /tmp/bs/tls hello world
  broadside log tail --peers $P --coord nats://127.0.0.1:4222 --tls-dir /tmp/bs/tls
  broadside log read --peers $P --coord nats://127.0.0.1:4222 --tls-dir /tmp/bs/tls --from 1 --n 2
  broadside log trim --peers $P --coord nats://127.0.0.1:4222 --tls-dir /tmp/bs/tls --to 1`,
	}
	lc.cf.register(cmd.PersistentFlags())
	cmd.PersistentFlags().DurationVar(&lc.timeout, "timeout", 30*time.Second, "give up after this long")
	cmd.AddCommand(newLogAppendCmd(lc), newLogReadCmd(lc), newLogTailCmd(lc), newLogTrimCmd(lc))
	return cmd
}

// logClientFlags are the flags every 'broadside log' subcommand shares:
// the cluster and how long to try.
type logClientFlags struct {
	cf      clusterFlags
	timeout time.Duration
}

// withClient runs fn with a client of the cluster, bounded by --timeout.
func (lc *logClientFlags) withClient(cmd *cobra.Command, fn func(ctx context.Context, c *cmdlog.RemoteClient) error) error {
	ctx, cancel := context.WithTimeout(cmd.Context(), lc.timeout)
	defer cancel()
	c, closeAll, err := lc.cf.dialCluster(ctx, cmdlog.ClientConfig{})
	if err != nil {
		return err
	}
	defer closeAll()
	return fn(ctx, c)
}

func newLogAppendCmd(lc *logClientFlags) *cobra.Command {
	var load logd.AppendLoad
	appendCmd := &cobra.Command{
		Use:   "append [DATA...]",
		Short: "Append records; each argument is one record, or --count generated ones",
		Long: `Append records to the log; each argument is one record, or --count generated
records of --size bytes are appended by --concurrency appenders (a quick load
test). An append returns once the record is durable on every sequencing
replica of the current view; its position is assigned later, when the leader
orders it (see 'log read').`,
		Example: `  # with the cluster of 'broadside logd --help' running:
  P=1=127.0.0.1:7001,2=127.0.0.1:7002,3=127.0.0.1:7003,101=127.0.0.1:7101,102=127.0.0.1:7102
  broadside log append --peers $P --coord nats://127.0.0.1:4222 --tls-dir /tmp/bs/tls hello world
  broadside log append --peers $P --coord nats://127.0.0.1:4222 --tls-dir /tmp/bs/tls --count 100000 --concurrency 64`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return lc.withClient(cmd, func(ctx context.Context, c *cmdlog.RemoteClient) error {
				if len(args) > 0 {
					for _, a := range args {
						if err := c.Append(ctx, []byte(a)); err != nil {
							return fmt.Errorf("append %q: %w", a, err)
						}
					}
					fmt.Fprintf(cmd.OutOrStdout(), "appended %d records (durable on every sequencing replica)\n", len(args))
					return nil
				}
				if load.Count <= 0 {
					return fmt.Errorf("give records as arguments or --count N")
				}
				return load.Run(ctx, cmd.OutOrStdout(), c)
			})
		},
	}
	appendCmd.Flags().IntVar(&load.Count, "count", 0, "append this many generated records")
	appendCmd.Flags().IntVar(&load.Concurrency, "concurrency", 16, "concurrent appends (with --count)")
	appendCmd.Flags().IntVar(&load.Size, "size", 100, "record size in bytes (with --count)")
	return appendCmd
}

func newLogReadCmd(lc *logClientFlags) *cobra.Command {
	var from uint64
	var n int
	readCmd := &cobra.Command{
		Use:   "read",
		Short: "Read stable records from a position",
		Long: `Read --n records from position --from on, once they are stable (ordered
into the shards), printing each one's position, record id and data; it waits
for records not yet stable, up to --timeout.`,
		Example: `  # with the cluster of 'broadside logd --help' running:
  P=1=127.0.0.1:7001,2=127.0.0.1:7002,3=127.0.0.1:7003,101=127.0.0.1:7101,102=127.0.0.1:7102
  broadside log read --peers $P --coord nats://127.0.0.1:4222 --tls-dir /tmp/bs/tls --from 1 --n 2`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return lc.withClient(cmd, func(ctx context.Context, c *cmdlog.RemoteClient) error {
				sub := c.Subscribe(from)
				for i := 0; i < n; i++ {
					e, err := sub.Next(ctx)
					if err != nil {
						return err
					}
					fmt.Fprintf(cmd.OutOrStdout(), "%d\t%s\t%q\n", e.Pos, e.Record.ID, e.Record.Data)
				}
				return nil
			})
		},
	}
	readCmd.Flags().Uint64Var(&from, "from", 1, "first position")
	readCmd.Flags().IntVar(&n, "n", 10, "number of records (waits for records not yet stable)")
	return readCmd
}

func newLogTailCmd(lc *logClientFlags) *cobra.Command {
	tailCmd := &cobra.Command{
		Use:   "tail",
		Short: "Print the log's tail (every completed append is at or below it)",
		Example: `  # with the cluster of 'broadside logd --help' running:
  P=1=127.0.0.1:7001,2=127.0.0.1:7002,3=127.0.0.1:7003,101=127.0.0.1:7101,102=127.0.0.1:7102
  broadside log tail --peers $P --coord nats://127.0.0.1:4222 --tls-dir /tmp/bs/tls`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return lc.withClient(cmd, func(ctx context.Context, c *cmdlog.RemoteClient) error {
				t, err := c.CheckTail(ctx)
				if err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), t)
				return nil
			})
		},
	}
	return tailCmd
}

func newLogTrimCmd(lc *logClientFlags) *cobra.Command {
	var upTo uint64
	trimCmd := &cobra.Command{
		Use:   "trim",
		Short: "Discard every position up to and including --to (at most up to stable-gp)",
		Example: `  # with the cluster of 'broadside logd --help' running:
  P=1=127.0.0.1:7001,2=127.0.0.1:7002,3=127.0.0.1:7003,101=127.0.0.1:7101,102=127.0.0.1:7102
  broadside log trim --peers $P --coord nats://127.0.0.1:4222 --tls-dir /tmp/bs/tls --to 1`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return lc.withClient(cmd, func(ctx context.Context, c *cmdlog.RemoteClient) error {
				t, err := c.Trim(ctx, upTo)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "trimmed up to %d\n", t)
				return nil
			})
		},
	}
	trimCmd.Flags().Uint64Var(&upTo, "to", 0, "last position to discard")
	trimCmd.MarkFlagRequired("to")
	return trimCmd
}
