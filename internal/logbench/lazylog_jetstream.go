package logbench

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/anoptic/broadside/cmdlog"
	"github.com/anoptic/broadside/cmdlog/coord"
	"github.com/anoptic/broadside/cmdlog/coord/natscoord"
	"github.com/anoptic/broadside/cmdlog/mesh"
	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/cmdlog/seq"
	"github.com/anoptic/broadside/cmdlog/shard"
	"github.com/anoptic/broadside/cmdlog/shardstore/jsstore"
	"github.com/anoptic/broadside/netcode/transport"
)

// lazylogJetStream is lazylog-memory with its 2 shards on JetStream
// streams (cmdlog/shardstore/jsstore) instead of Pebble: R3 file streams
// on a 3-node embedded NATS cluster that syncs every write, each shard on
// a connection of its own. Appends are acknowledged as in lazylog-memory
// (the shards are not on that path); what changes is ordering, which
// Settle waits for, so a rate is called sustained only if the shards kept
// up.
type lazylogJetStream struct {
	*lazylog
	cluster *natscoord.Cluster
	conns   []*nats.Conn
	jstores []*jsstore.Store
}

const describeLazylogJetStream = "cmdlog as lazylog-memory with its 2 shards on JetStream R3 file streams (3-node embedded cluster, sync always) instead of Pebble"

func startLazylogJetStream(ctx context.Context, env Env) (_ System, err error) {
	ca, err := transport.NewDevCA()
	if err != nil {
		return nil, err
	}
	server, client, err := ca.MutualTLS("localhost", "127.0.0.1")
	if err != nil {
		return nil, err
	}
	l := &lazylogJetStream{lazylog: &lazylog{group: mesh.NewGroup(server, client, env.Logger)}}
	l.net = &countingNet{Group: l.group}
	defer func() {
		if err != nil {
			l.Close()
		}
	}()
	if l.cluster, err = natscoord.StartCluster(3, filepath.Join(env.Dir, "nats"), natscoord.ClusterOptions{Sync: natscoord.SyncAlways}); err != nil {
		return nil, err
	}
	cfg := cmdlog.LocalConfig{
		Replicas:    3,
		Shards:      2,
		Durability:  seq.Memory,
		Coordinator: coord.NewMemory(),
		Network:     l.net,
		Logger:      env.Logger,
		NewStorage: func(id msg.NodeID) (shard.Storage, error) {
			nc, err := l.cluster.Connect(nats.MaxReconnects(-1))
			if err != nil {
				return nil, err
			}
			l.conns = append(l.conns, nc)
			js, err := jetstream.New(nc)
			if err != nil {
				return nil, err
			}
			st, err := jsstore.Open(ctx, js, jsstore.Options{Stream: fmt.Sprintf("bench-shard-%d", id), Replicas: 3, Logger: env.Logger})
			if err != nil {
				return nil, err
			}
			l.jstores = append(l.jstores, st)
			return st, nil
		},
	}
	if err := l.start(ctx, cfg, "lazylog-jetstream"); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *lazylogJetStream) Close() error {
	err := l.lazylog.Close()
	var errs []error
	for _, s := range l.jstores {
		errs = append(errs, s.Close())
	}
	for _, nc := range l.conns {
		nc.Close()
	}
	if l.cluster != nil {
		l.cluster.Shutdown()
	}
	return errors.Join(append(errs, err)...)
}
