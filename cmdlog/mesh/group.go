package mesh

import (
	"crypto/rand"
	"crypto/tls"
	"log/slog"
	"sync"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/cmdlog/node"
)

// ClientIDBase is the lowest node id of clients: they dial and are never
// dialed.
const ClientIDBase msg.NodeID = 1 << 24

// Group runs one Mesh per node of this process over loopback QUIC, and
// keeps their address books in sync: an in-process cluster whose nodes talk
// over real QUIC connections (cmdlog.LocalCluster's Network for demos,
// benchmarks and the game server's embedded log).
type Group struct {
	server, client *tls.Config
	log            *slog.Logger
	mu             sync.Mutex
	meshes         map[msg.NodeID]*Mesh
	addrs          map[msg.NodeID]string
	// resetSecret derives each server node's stateless reset key, the
	// same across its restarts in this group.
	resetSecret [32]byte
}

// NewGroup returns an empty group whose links use the given TLS configs.
func NewGroup(server, client *tls.Config, log *slog.Logger) *Group {
	if log == nil {
		log = slog.Default()
	}
	g := &Group{server: server, client: client, log: log, meshes: map[msg.NodeID]*Mesh{}, addrs: map[msg.NodeID]string{}}
	rand.Read(g.resetSecret[:])
	return g
}

// Register starts a mesh for id delivering to in (replacing an earlier one).
func (g *Group) Register(id msg.NodeID, in node.Inbox) {
	g.Unregister(id)
	cfg := Config{Self: id, ListenAddr: "127.0.0.1:0", ClientTLS: g.client, Inbox: in, Logger: g.log}
	if id < ClientIDBase {
		cfg.ServerTLS = g.server
		cfg.StatelessResetKey = deriveResetKey(g.resetSecret, id)
	}
	g.mu.Lock()
	cfg.Peers = make(map[msg.NodeID]string, len(g.addrs))
	for p, a := range g.addrs {
		cfg.Peers[p] = a
	}
	g.mu.Unlock()
	m, err := New(cfg)
	if err != nil {
		g.log.Error("mesh group: start node", "id", id, "err", err)
		return
	}
	g.mu.Lock()
	g.meshes[id] = m
	if id < ClientIDBase {
		g.addrs[id] = m.Addr()
		for other, om := range g.meshes {
			if other != id {
				om.SetPeer(id, m.Addr())
			}
		}
	}
	g.mu.Unlock()
}

// Unregister closes id's mesh.
func (g *Group) Unregister(id msg.NodeID) {
	g.mu.Lock()
	m := g.meshes[id]
	delete(g.meshes, id)
	g.mu.Unlock()
	if m != nil {
		m.Close()
	}
}

// Send routes env through the sender's mesh.
func (g *Group) Send(env msg.Envelope) {
	g.mu.Lock()
	m := g.meshes[env.From]
	g.mu.Unlock()
	if m != nil {
		m.Send(env)
	}
}

// Addr returns the address of a registered server node.
func (g *Group) Addr(id msg.NodeID) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.addrs[id]
}

// Close closes every mesh.
func (g *Group) Close() {
	g.mu.Lock()
	ms := g.meshes
	g.meshes = map[msg.NodeID]*Mesh{}
	g.mu.Unlock()
	for _, m := range ms {
		m.Close()
	}
}
