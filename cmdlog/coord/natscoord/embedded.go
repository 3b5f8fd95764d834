package natscoord

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// SyncPolicy says when an embedded JetStream server fsyncs its file store.
type SyncPolicy uint8

const (
	// SyncAlways (the default) fsyncs after every write
	// (server.Options.SyncAlways, "sync: always" in a config file): an
	// acknowledged write survives a crash of the node, machine or power.
	// In a cluster, replicated streams keep the same guarantee through
	// their Raft log, which is synced. The coordinator needs this: a view
	// written with compare-and-set must not roll back.
	SyncAlways SyncPolicy = iota
	// SyncPeriodic is nats-server's default: writes reach the OS at once but
	// are fsynced only every SyncInterval (2 minutes). A process crash loses
	// nothing, a machine crash or power loss may lose the last interval.
	// Benchmarks use it to compare with JetStream as usually deployed.
	SyncPeriodic
)

func (p SyncPolicy) String() string {
	switch p {
	case SyncAlways:
		return "always"
	case SyncPeriodic:
		return "periodic"
	}
	return fmt.Sprintf("SyncPolicy(%d)", uint8(p))
}

// EmbeddedOptions configures an in-process nats-server with JetStream.
type EmbeddedOptions struct {
	// StoreDir is the JetStream storage directory (required).
	StoreDir string
	// Host is the listen address; default 127.0.0.1.
	Host string
	// Port is the client port; 0 picks a free one.
	Port int
	// ServerName names the server; empty lets nats-server choose.
	ServerName string
	// Sync is the fsync policy; default SyncAlways.
	Sync SyncPolicy
	// Logger receives the server's log (debug and trace off); nil keeps it
	// silent.
	Logger *slog.Logger
	// ReadyTimeout bounds the wait for the server to accept connections;
	// default 10 s.
	ReadyTimeout time.Duration
	// Auth is what the server demands of clients; the zero value demands
	// nothing (loopback development and tests).
	Auth ServerAuth
}

// ServerAuth is what an embedded server demands of its clients: a user and
// password, or an nkey (a client may use either when both are set), and
// TLS. Clients authenticate with the matching ConnOptions.
type ServerAuth struct {
	// User and Password, when User is set, admit a client with them.
	User, Password string
	// Nkeys are public user nkeys ("U..."): a client holding the seed of
	// one of them is admitted.
	Nkeys []string
	// TLS, when set, is the server's TLS configuration for client
	// connections (its certificate, and ClientCAs to verify clients), and
	// clients must use TLS.
	TLS *tls.Config
}

func (a ServerAuth) apply(o *server.Options) {
	if a.User != "" {
		o.Users = []*server.User{{Username: a.User, Password: a.Password}}
	}
	for _, k := range a.Nkeys {
		o.Nkeys = append(o.Nkeys, &server.NkeyUser{Nkey: k})
	}
	if a.TLS != nil {
		o.TLSConfig = a.TLS
		o.TLS = true
		o.TLSVerify = a.TLS.ClientAuth == tls.RequireAndVerifyClientCert
		o.TLSTimeout = 2
	}
}

// isLoopback reports whether host (an IP literal or a name) listens only
// on loopback: "localhost" or a loopback address. Anything else (a wildcard
// such as 0.0.0.0 or "", an interface's address, a name) counts as beyond.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Embedded is a nats-server with JetStream running in this process.
type Embedded struct {
	srv   *server.Server
	sopts *server.Options // a clone of what it started with, for a restart
	eopts EmbeddedOptions
}

// StartEmbedded starts a single server and waits until it accepts
// connections.
func StartEmbedded(opts EmbeddedOptions) (*Embedded, error) {
	sopts, err := serverOptions(opts)
	if err != nil {
		return nil, fmt.Errorf("natscoord: start nats-server: %w", err)
	}
	if opts.Port == 0 {
		sopts.Port = server.RANDOM_PORT
	}
	return startServer(sopts, opts)
}

func serverOptions(opts EmbeddedOptions) (*server.Options, error) {
	if opts.StoreDir == "" {
		return nil, errors.New("no store directory")
	}
	if opts.Sync != SyncAlways && opts.Sync != SyncPeriodic {
		return nil, fmt.Errorf("unknown sync policy %v", opts.Sync)
	}
	host := opts.Host
	if host == "" {
		host = "127.0.0.1"
	}
	if !isLoopback(host) && opts.Auth.User == "" && len(opts.Auth.Nkeys) == 0 {
		return nil, fmt.Errorf("listening on %s (beyond loopback) needs client credentials (a user and password, or an nkey): refusing to serve the coordinator to anyone", host)
	}
	if !isLoopback(host) && opts.Auth.User != "" && opts.Auth.Password == "" {
		return nil, fmt.Errorf("listening on %s (beyond loopback): user %q needs a password", host, opts.Auth.User)
	}
	sopts := &server.Options{
		ServerName: opts.ServerName,
		Host:       host,
		Port:       opts.Port,
		JetStream:  true,
		StoreDir:   opts.StoreDir,
		SyncAlways: opts.Sync == SyncAlways,
		NoSigs:     true,
	}
	opts.Auth.apply(sopts)
	return sopts, nil
}

func startServer(sopts *server.Options, opts EmbeddedOptions) (*Embedded, error) {
	saved := sopts.Clone()
	srv, err := server.NewServer(sopts)
	if err != nil {
		return nil, fmt.Errorf("natscoord: start nats-server: %w", err)
	}
	if opts.Logger != nil {
		srv.SetLogger(natsLogger{opts.Logger.With("component", "nats-server", "server", sopts.ServerName)}, false, false)
	}
	go srv.Start()
	timeout := opts.ReadyTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	if !srv.ReadyForConnections(timeout) {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, fmt.Errorf("natscoord: start nats-server %q: not ready after %v", sopts.ServerName, timeout)
	}
	return &Embedded{srv: srv, sopts: saved, eopts: opts}, nil
}

// ClientURL returns the URL clients connect to.
func (e *Embedded) ClientURL() string { return e.srv.ClientURL() }

// Server returns the underlying server (for tests and diagnostics).
func (e *Embedded) Server() *server.Server { return e.srv }

// Connect opens a client connection to the server.
func (e *Embedded) Connect(opts ...nats.Option) (*nats.Conn, error) {
	nc, err := nats.Connect(e.ClientURL(), opts...)
	if err != nil {
		return nil, fmt.Errorf("natscoord: connect to %s: %w", e.ClientURL(), err)
	}
	return nc, nil
}

// Shutdown stops the server and waits until it has stopped.
func (e *Embedded) Shutdown() {
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
}

// ClusterOptions configures StartCluster.
type ClusterOptions struct {
	// Name is the cluster name; default "broadside".
	Name string
	// Sync is every node's fsync policy; default SyncAlways.
	Sync SyncPolicy
	// Logger receives the servers' logs; nil keeps them silent.
	Logger *slog.Logger
	// ReadyTimeout bounds the wait for the cluster to elect a JetStream
	// meta leader; default 30 s.
	ReadyTimeout time.Duration
	// Auth is what every node demands of clients (routes between the
	// nodes are not authenticated: loopback only).
	Auth ServerAuth
}

// Cluster is a JetStream cluster of embedded servers on loopback.
type Cluster struct {
	Nodes []*Embedded
}

// StartCluster starts n servers on 127.0.0.1 with JetStream, each in its own
// subdirectory of dir and routed to all others, and waits until the cluster
// has a JetStream meta leader and every node follows it (so streams and KV
// buckets can be created at once).
func StartCluster(n int, dir string, opts ClusterOptions) (*Cluster, error) {
	if n < 1 {
		return nil, fmt.Errorf("natscoord: start cluster: %d nodes", n)
	}
	name := opts.Name
	if name == "" {
		name = "broadside"
	}
	timeout := opts.ReadyTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	// Fixed ports (not random ones) because every node must know its
	// peers' route addresses before it starts.
	ports, err := freePorts(2 * n)
	if err != nil {
		return nil, fmt.Errorf("natscoord: start cluster: %w", err)
	}
	clientPorts, routePorts := ports[:n], ports[n:]
	c := &Cluster{}
	for i := range n {
		nodeName := "n" + strconv.Itoa(i+1)
		sopts, err := serverOptions(EmbeddedOptions{
			StoreDir:   filepath.Join(dir, nodeName),
			Port:       clientPorts[i],
			ServerName: nodeName,
			Sync:       opts.Sync,
			Auth:       opts.Auth,
		})
		if err != nil {
			c.Shutdown()
			return nil, fmt.Errorf("natscoord: start cluster: %w", err)
		}
		sopts.Cluster = server.ClusterOpts{Name: name, Host: sopts.Host, Port: routePorts[i]}
		for j, p := range routePorts {
			if j != i {
				sopts.Routes = append(sopts.Routes, &url.URL{Scheme: "nats-route", Host: net.JoinHostPort(sopts.Host, strconv.Itoa(p))})
			}
		}
		node, err := startServer(sopts, EmbeddedOptions{Logger: opts.Logger, ReadyTimeout: timeout})
		if err != nil {
			c.Shutdown()
			return nil, fmt.Errorf("natscoord: start cluster: %w", err)
		}
		c.Nodes = append(c.Nodes, node)
	}
	if err := c.waitForMetaLeader(timeout); err != nil {
		c.Shutdown()
		return nil, fmt.Errorf("natscoord: start cluster: %w", err)
	}
	return c, nil
}

// waitForMetaLeader waits until exactly one node leads the JetStream meta
// group and every node is current with it.
func (c *Cluster) waitForMetaLeader(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		leaders, current := 0, 0
		for _, node := range c.Nodes {
			if node.srv.JetStreamIsLeader() {
				leaders++
			}
			if node.srv.JetStreamIsCurrent() {
				current++
			}
		}
		if leaders == 1 && current == len(c.Nodes) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no JetStream meta leader after %v (%d leaders, %d of %d nodes current)",
				timeout, leaders, current, len(c.Nodes))
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// StopNode shuts node i down (its store directory stays), as when its
// machine goes away; RestartNode brings it back.
func (c *Cluster) StopNode(i int) {
	c.Nodes[i].Shutdown()
}

// RestartNode starts node i again on the same ports and store directory
// (after StopNode; a running node is stopped first) and waits until it
// accepts connections. It does not wait for its streams to catch up.
func (c *Cluster) RestartNode(i int) error {
	old := c.Nodes[i]
	if old.srv.Running() {
		old.Shutdown()
	}
	node, err := startServer(old.sopts.Clone(), old.eopts)
	if err != nil {
		return fmt.Errorf("natscoord: restart node %d: %w", i+1, err)
	}
	c.Nodes[i] = node
	return nil
}

// URL returns the client URLs of all nodes, comma-separated, as
// nats.Connect accepts them.
func (c *Cluster) URL() string {
	var s string
	for i, node := range c.Nodes {
		if i > 0 {
			s += ","
		}
		s += node.ClientURL()
	}
	return s
}

// Connect opens a client connection to the cluster.
func (c *Cluster) Connect(opts ...nats.Option) (*nats.Conn, error) {
	nc, err := nats.Connect(c.URL(), opts...)
	if err != nil {
		return nil, fmt.Errorf("natscoord: connect to %s: %w", c.URL(), err)
	}
	return nc, nil
}

// Shutdown stops every node and waits until they have stopped.
func (c *Cluster) Shutdown() {
	for _, node := range c.Nodes {
		node.srv.Shutdown()
	}
	for _, node := range c.Nodes {
		node.srv.WaitForShutdown()
	}
}

// freePorts returns n distinct TCP ports free on 127.0.0.1 at the time of
// the call.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		defer l.Close() // hold all until done so they are distinct
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// natsLogger adapts slog to server.Logger. Fatalf is logged as an error
// and does not exit: an embedded server that fails to start is reported by
// StartEmbedded instead.
type natsLogger struct{ l *slog.Logger }

func (n natsLogger) Noticef(format string, v ...any) { n.l.Info(fmt.Sprintf(format, v...)) }
func (n natsLogger) Warnf(format string, v ...any)   { n.l.Warn(fmt.Sprintf(format, v...)) }
func (n natsLogger) Fatalf(format string, v ...any) {
	n.l.Error(fmt.Sprintf(format, v...), "fatal", true)
}
func (n natsLogger) Errorf(format string, v ...any) { n.l.Error(fmt.Sprintf(format, v...)) }
func (n natsLogger) Debugf(format string, v ...any) { n.l.Debug(fmt.Sprintf(format, v...)) }
func (n natsLogger) Tracef(format string, v ...any) { n.l.Debug(fmt.Sprintf(format, v...)) }
