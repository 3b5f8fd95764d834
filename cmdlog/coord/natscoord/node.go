package natscoord

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// NodeOptions configures one node of a NATS cluster run as its own
// process ('broadside nats'): the same server StartCluster runs in a test
// process, but alone, so that it can be SIGKILLed and restarted on its
// store directory like any other role.
type NodeOptions struct {
	// Name is the server's name, unique in the cluster (required with
	// routes: JetStream places replicas by name).
	Name string
	// Host and Port are the client listen address (default 127.0.0.1, 4222).
	Host string
	Port int
	// StoreDir is the JetStream storage directory (required).
	StoreDir string
	// ClusterName is the cluster's name (default "broadside"); every node
	// of a cluster has the same.
	ClusterName string
	// ClusterHost and ClusterPort are the route listen address; ClusterPort
	// 0 runs a single node with no cluster.
	ClusterHost string
	ClusterPort int
	// Routes are the other nodes' route addresses (HOST:PORT or
	// nats-route://HOST:PORT); this node's own address may be among them.
	Routes []string
	// RouteUser and RoutePassword, when RouteUser is set, authenticate the
	// routes between nodes (every node needs the same). Routes beyond
	// loopback need them.
	RouteUser, RoutePassword string
	// RouteTLS, if set, encrypts the routes between nodes with mutual TLS
	// (RouteTLSConfig builds one): each node presents its certificate and
	// verifies its peers' against the cluster's CA, whichever side dialed.
	// Without it routes are authenticated (RouteUser) but not encrypted.
	RouteTLS *tls.Config
	// Sync is the fsync policy; default SyncAlways.
	Sync SyncPolicy
	// Auth is what the node demands of clients.
	Auth ServerAuth
	// Logger receives the server's log; nil keeps it silent.
	Logger *slog.Logger
	// ReadyTimeout bounds the wait for client connections; default 10 s.
	ReadyTimeout time.Duration
}

// StartNode starts one NATS node with JetStream, routed to the given peers,
// and waits until it accepts client connections (not for a JetStream meta
// leader: that needs a quorum of the nodes, which start separately).
func StartNode(opts NodeOptions) (*Embedded, error) {
	if opts.Port == 0 {
		opts.Port = 4222
	}
	sopts, err := serverOptions(EmbeddedOptions{StoreDir: opts.StoreDir, Host: opts.Host, Port: opts.Port,
		ServerName: opts.Name, Sync: opts.Sync, Auth: opts.Auth})
	if err != nil {
		return nil, fmt.Errorf("natscoord: start node: %w", err)
	}
	if opts.ClusterPort != 0 {
		if opts.Name == "" {
			return nil, errors.New("natscoord: start node: a clustered node needs a name")
		}
		name := opts.ClusterName
		if name == "" {
			name = "broadside"
		}
		chost := opts.ClusterHost
		if chost == "" {
			chost = sopts.Host
		}
		if opts.RouteUser == "" && !isLoopback(chost) {
			return nil, fmt.Errorf("natscoord: start node: routes on %s (beyond loopback) need a route user and password", chost)
		}
		if opts.RouteUser != "" && opts.RoutePassword == "" {
			return nil, errors.New("natscoord: start node: the route user needs a password")
		}
		sopts.Cluster = server.ClusterOpts{Name: name, Host: chost, Port: opts.ClusterPort,
			Username: opts.RouteUser, Password: opts.RoutePassword}
		if opts.RouteTLS != nil {
			sopts.Cluster.TLSConfig, sopts.Cluster.TLSTimeout = opts.RouteTLS, routeTLSTimeout.Seconds()
		}
		self := net.JoinHostPort(chost, strconv.Itoa(opts.ClusterPort))
		for _, r := range opts.Routes {
			u, err := routeURL(r, opts.RouteUser, opts.RoutePassword)
			if err != nil {
				return nil, fmt.Errorf("natscoord: start node: %w", err)
			}
			if u.Host == self {
				continue
			}
			sopts.Routes = append(sopts.Routes, u)
		}
	}
	return startServer(sopts, EmbeddedOptions{Logger: opts.Logger, ReadyTimeout: opts.ReadyTimeout})
}

// routeTLSTimeout bounds a route's TLS handshake.
const routeTLSTimeout = 2 * time.Second

// RouteTLSConfig returns the TLS configuration of a node's routes: it
// presents cert (which must allow both server and client authentication)
// to its peers and accepts only peers whose certificates chain to ca, on
// the routes it accepts and on those it dials alike.
func RouteTLSConfig(cert tls.Certificate, ca *x509.CertPool) *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: ca, ClientCAs: ca,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13}
}

// routeURL parses a route address (HOST:PORT or nats-route://HOST:PORT)
// and adds the route credentials.
func routeURL(s, user, password string) (*url.URL, error) {
	s = strings.TrimSpace(s)
	if !strings.Contains(s, "://") {
		s = "nats-route://" + s
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || u.Port() == "" {
		return nil, fmt.Errorf("route %q is not HOST:PORT", s)
	}
	if u.Scheme != "nats-route" && u.Scheme != "nats" {
		return nil, fmt.Errorf("route %q: scheme %q (nats-route)", s, u.Scheme)
	}
	if user != "" {
		u.User = url.UserPassword(user, password)
	}
	return u, nil
}

// JetStreamReady reports whether the node follows a JetStream meta
// leader (the cluster has a quorum) and is current with it.
func (e *Embedded) JetStreamReady() bool {
	return e.srv.JetStreamIsCurrent()
}

// RouteCount returns the node's open routes to other nodes.
func (e *Embedded) RouteCount() int { return e.srv.NumRoutes() }
