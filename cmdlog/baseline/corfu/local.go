// Package corfu is a Corfu-style shared log (Balakrishnan et al., NSDI'12),
// the baseline cmdlog's lazily ordered log is benchmarked against. An
// append first takes a token (a position) from a sequencer, then the client
// writes the record through a chain of storage replicas, head to tail,
// waiting for each to persist it: with 3 replicas, 4 round trips, every one
// on the append's critical path. cmdlog instead makes an append durable in
// one round trip to its sequencing replicas and binds positions later.
//
// It runs over the same transport (netcode/transport: QUIC, length-prefixed
// frames on long-lived streams, pipelined requests) and the same storage
// (cmdlog/shardstore) as cmdlog, batches concurrent appends in the client
// and group-commits writes in the replicas, so that a comparison measures
// the protocols rather than the plumbing. It has no reconfiguration (no
// sealing, hole filling or sequencer recovery): the benchmark does not
// crash nodes.
package corfu

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/anoptic/broadside/cmdlog/shard"
	"github.com/anoptic/broadside/cmdlog/shardstore"
	"github.com/anoptic/broadside/netcode/transport"
)

// LocalConfig configures an in-process Corfu cluster on loopback.
type LocalConfig struct {
	// Replicas is the chain length (default 3).
	Replicas int
	// Dir holds each replica's Pebble store (Dir/replica-N). Empty keeps
	// the replicas' entries in memory (shardstore.Memory), for tests.
	Dir string
	// Durability of the Pebble stores: shardstore.SyncWrites (each replica
	// fsyncs before acknowledging) or shardstore.NoSyncWrites (each
	// replica acknowledges once the write is in Pebble's memtable and log
	// buffer, the durability of cmdlog's memory mode).
	Durability shardstore.Durability
	// ServerTLS and ClientTLS secure the links; nil creates a fresh
	// development CA and mutual TLS.
	ServerTLS, ClientTLS *tls.Config
	Logger               *slog.Logger
}

// LocalCluster is a sequencer and a chain of storage replicas, each with
// its own QUIC endpoint on 127.0.0.1.
type LocalCluster struct {
	cfg       LocalConfig
	Sequencer *Sequencer
	Replicas  []*StorageNode
	stores    []shard.Storage
}

// StartLocal starts the cluster.
func StartLocal(cfg LocalConfig) (_ *LocalCluster, err error) {
	if cfg.Replicas <= 0 {
		cfg.Replicas = 3
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ServerTLS == nil || cfg.ClientTLS == nil {
		ca, err := transport.NewDevCA()
		if err != nil {
			return nil, fmt.Errorf("corfu: start: %w", err)
		}
		if cfg.ServerTLS, cfg.ClientTLS, err = ca.MutualTLS("localhost", "127.0.0.1"); err != nil {
			return nil, fmt.Errorf("corfu: start: %w", err)
		}
	}
	lc := &LocalCluster{cfg: cfg}
	defer func() {
		if err != nil {
			lc.Close()
		}
	}()
	node := NodeConfig{ListenAddr: "127.0.0.1:0", ServerTLS: cfg.ServerTLS, Logger: cfg.Logger}
	if lc.Sequencer, err = StartSequencer(node); err != nil {
		return nil, err
	}
	for i := range cfg.Replicas {
		var st shard.Storage
		if cfg.Dir == "" {
			st = shardstore.NewMemory()
		} else {
			p, err := shardstore.Open(filepath.Join(cfg.Dir, fmt.Sprintf("replica-%d", i+1)),
				shardstore.Options{Durability: cfg.Durability, Logger: cfg.Logger})
			if err != nil {
				return nil, fmt.Errorf("corfu: start replica %d: %w", i+1, err)
			}
			st = p
		}
		lc.stores = append(lc.stores, st)
		rn, err := StartStorageNode(node, st)
		if err != nil {
			return nil, fmt.Errorf("corfu: start replica %d: %w", i+1, err)
		}
		lc.Replicas = append(lc.Replicas, rn)
	}
	return lc, nil
}

// ClientConfig returns a client configuration for this cluster.
func (lc *LocalCluster) ClientConfig() ClientConfig {
	cfg := ClientConfig{Sequencer: lc.Sequencer.Addr(), ClientTLS: lc.cfg.ClientTLS, Logger: lc.cfg.Logger}
	for _, r := range lc.Replicas {
		cfg.Chain = append(cfg.Chain, r.Addr())
	}
	return cfg
}

// NewClient dials a client of this cluster with default settings.
func (lc *LocalCluster) NewClient(ctx context.Context) (*Client, error) {
	return Dial(ctx, lc.ClientConfig())
}

// Close stops every node and closes the stores.
func (lc *LocalCluster) Close() error {
	var errs []error
	if lc.Sequencer != nil {
		errs = append(errs, lc.Sequencer.Close())
	}
	for _, r := range lc.Replicas {
		errs = append(errs, r.Close())
	}
	for _, st := range lc.stores {
		if p, ok := st.(*shardstore.Pebble); ok {
			errs = append(errs, p.Close())
		}
	}
	return errors.Join(errs...)
}
