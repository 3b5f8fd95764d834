package cmdlog

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"slices"

	"github.com/anoptic/broadside/cmdlog/coord"
	"github.com/anoptic/broadside/cmdlog/mesh"
	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/cmdlog/node"
)

// RemoteConfig describes a cluster running in other processes.
type RemoteConfig struct {
	// Peers maps every sequencing replica and shard to its address.
	Peers map[msg.NodeID]string
	// StripeUnit is the cluster's stripe unit (positions per shard run).
	StripeUnit uint64
	// Coordinator holds the view record (NATS KV for several processes).
	Coordinator coord.Coordinator
	// ClientTLS secures the links (it must trust the nodes' CA).
	ClientTLS *tls.Config
	Timing    node.Timing
	Logger    *slog.Logger
	// Client tunes the client (ID, ClientID, latency hook).
	Client ClientConfig
}

// LayoutOf returns the layout of a cluster: shards are the ids >=
// FirstShardID, in ascending order.
func LayoutOf(peers map[msg.NodeID]string, stripeUnit uint64) msg.Layout {
	l := msg.Layout{StripeUnit: stripeUnit}
	for id := range peers {
		if id >= FirstShardID && id < mesh.ClientIDBase {
			l.Shards = append(l.Shards, id)
		}
	}
	slices.Sort(l.Shards)
	return l
}

// RemoteClient is a Client with its own QUIC mesh, talking to a cluster of
// other processes. Close closes both.
type RemoteClient struct {
	*Client
	mesh *mesh.Mesh
}

// DialRemote starts a client of a remote cluster.
func DialRemote(cfg RemoteConfig) (*RemoteClient, error) {
	if cfg.StripeUnit == 0 {
		cfg.StripeUnit = 256
	}
	cc := cfg.Client
	cc.Layout = LayoutOf(cfg.Peers, cfg.StripeUnit)
	if len(cc.Layout.Shards) == 0 {
		return nil, fmt.Errorf("cmdlog: no shards among peers (shard ids start at %d)", FirstShardID)
	}
	cc.Coordinator = cfg.Coordinator
	cc.Timing = cfg.Timing
	cc.Inbox = node.NewInbox()
	if cc.ID == 0 {
		cc.ID = randomClientID()
	}
	m, err := mesh.New(mesh.Config{Self: cc.ID, ListenAddr: "127.0.0.1:0", Peers: cfg.Peers, ClientTLS: cfg.ClientTLS,
		Inbox: cc.Inbox, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	cc.Transport = m
	return &RemoteClient{Client: NewClient(cc), mesh: m}, nil
}

// Close stops the client and its mesh.
func (r *RemoteClient) Close() {
	r.Client.Close()
	r.mesh.Close()
}
