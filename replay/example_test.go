package replay_test

import (
	"context"
	"log/slog"
	"time"

	"github.com/anoptic/broadside/cmdlog"
	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/replay"
	"github.com/anoptic/broadside/replay/snapshot"
)

// Example_server shows how a game server runs a world on the command log:
// one Ticker, one Supervisor running a Runner per sector with snapshots in
// Pebble, and a periodic safe trim. Players' commands are appended by the
// server's sessions as wire.EnvelopePlayerCommand records; state for
// clients comes from OnTick.
func Example_server() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var client *cmdlog.Client // e.g. lc.NewClient(cmdlog.ClientConfig{}) or a remote client
	const world = 7
	cfg := broadside.DefaultConfig()

	store, err := snapshot.OpenPebble("/var/lib/broadside/snapshots", snapshot.PebbleOptions{})
	if err != nil {
		slog.Error("snapshots", "err", err)
		return
	}
	defer store.Close()

	var shards []replay.ShardSpec
	var ids []uint32
	for i := range cfg.Sectors() {
		shards = append(shards, replay.ShardSpec{Shard: uint32(i), NewSim: func() (replay.TableSim, error) {
			return broadside.NewSector(cfg, i)
		}})
		ids = append(ids, uint32(i))
	}
	sup, err := replay.NewSupervisor(replay.SupervisorConfig{
		World: world, Shards: shards, Appender: client, Store: store,
		Policy: snapshot.Policy{RecoveryTarget: 200 * time.Millisecond},
		Open: func(_ context.Context, _ uint32, from uint64) (replay.Source, error) {
			return client.Subscribe(from), nil
		},
		LogTail: client.CheckTail,
		OnTick: func(info replay.TickInfo) {
			// Runs on the shard's goroutine between two Steps: copy
			// what clients need from the shard's sim for the state
			// fan-out, quickly, and compare info.Hash with clients'.
		},
		OnRecovery: func(r replay.Recovery) {
			slog.Info("shard recovered", "shard", r.Shard, "ms", r.Duration.Milliseconds())
		},
	})
	if err != nil {
		return
	}
	go func() { _ = sup.Run(ctx) }()

	ticker, err := replay.NewTicker(replay.TickerConfig{World: world, Log: client, Rate: broadside.TickRate})
	if err != nil {
		return
	}
	go func() { _ = ticker.Run(ctx) }()

	// Trim the log behind the snapshots, in large steps.
	var trimmed uint64
	for range time.Tick(time.Minute) {
		trimmed, _ = replay.SafeTrim(ctx, client, store, ids, nil, trimmed, 100_000)
	}
}
