package natscoord

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/anoptic/broadside/netcode/transport"
)

// NodeSpec describes a NATS node as 'broadside nats' takes it on its
// command line: addresses as HOST:PORT, secrets in files, TLS from a
// development CA directory or certificate files. Options turns it into
// NodeOptions.
type NodeSpec struct {
	Name, Listen, ClusterListen, ClusterName, StoreDir string
	// Routes is a comma-separated list of every node's route address.
	Routes string
	// User and PasswordFile: the clients' credentials; RouteUser and
	// RoutePasswordFile the routes'.
	User, PasswordFile, RouteUser, RoutePasswordFile string
	// TLSDir is a development CA directory (created if missing) the node
	// issues its certificate from; TLSCert and TLSKey a production
	// certificate instead.
	TLSDir, TLSCert, TLSKey string
	// RouteTLS encrypts the routes with mutual TLS (RouteTLSConfig): the
	// node's certificate is TLSDir's CA's (issued for Name and the listen
	// hosts) or TLSCert's (which must allow client authentication too),
	// and the peers' must chain to RouteCA (a PEM file; default TLSDir's
	// CA, required with TLSCert).
	RouteTLS bool
	RouteCA  string
	// Sync is "always" (default) or "periodic".
	Sync string
}

// Options returns the NodeOptions of s (the logger left to the caller).
func (s NodeSpec) Options() (NodeOptions, error) {
	var o NodeOptions
	host, port, err := splitHostPort(s.Listen, "listen")
	if err != nil {
		return o, err
	}
	if s.StoreDir == "" {
		return o, fmt.Errorf("natscoord: a store directory is required")
	}
	o = NodeOptions{Name: s.Name, Host: host, Port: port, StoreDir: s.StoreDir, ClusterName: s.ClusterName}
	if s.ClusterListen != "" {
		if o.ClusterHost, o.ClusterPort, err = splitHostPort(s.ClusterListen, "cluster listen"); err != nil {
			return o, err
		}
		for _, r := range strings.Split(s.Routes, ",") {
			if r = strings.TrimSpace(r); r != "" {
				o.Routes = append(o.Routes, r)
			}
		}
	}
	switch s.Sync {
	case "", "always":
	case "periodic":
		o.Sync = SyncPeriodic
	default:
		return o, fmt.Errorf("natscoord: sync must be always or periodic, not %q", s.Sync)
	}
	if o.Auth.User = s.User; s.User != "" {
		if o.Auth.Password, err = readSecretLine(s.PasswordFile, "password file"); err != nil {
			return o, err
		}
	}
	if o.RouteUser = s.RouteUser; s.RouteUser != "" {
		if o.RoutePassword, err = readSecretLine(s.RoutePasswordFile, "route password file"); err != nil {
			return o, err
		}
	}
	switch {
	case s.TLSCert != "" || s.TLSKey != "":
		o.Auth.TLS, err = transport.ServerTLS(s.TLSCert, s.TLSKey)
	case s.TLSDir != "":
		var ca *transport.DevCA
		if ca, err = transport.LoadOrCreateDevCA(s.TLSDir); err == nil {
			o.Auth.TLS, err = ca.ServerTLS(host, "localhost")
		}
	}
	if err == nil && s.RouteTLS {
		o.RouteTLS, err = s.routeTLS(host, o.ClusterHost)
	}
	return o, err
}

// routeTLS returns the routes' mutual TLS configuration (RouteTLS).
func (s NodeSpec) routeTLS(hosts ...string) (*tls.Config, error) {
	if s.ClusterListen == "" {
		return nil, fmt.Errorf("natscoord: route TLS needs a cluster listen address")
	}
	var pool *x509.CertPool
	if s.RouteCA != "" {
		p, err := transport.LoadCertPool(s.RouteCA)
		if err != nil {
			return nil, fmt.Errorf("natscoord: route CA: %w", err)
		}
		pool = p
	}
	switch {
	case s.TLSCert != "" || s.TLSKey != "":
		if pool == nil {
			return nil, fmt.Errorf("natscoord: route TLS with a certificate file needs the route CA file")
		}
		cert, err := tls.LoadX509KeyPair(s.TLSCert, s.TLSKey)
		if err != nil {
			return nil, fmt.Errorf("natscoord: route certificate: %w", err)
		}
		return RouteTLSConfig(cert, pool), nil
	case s.TLSDir != "":
		ca, err := transport.LoadOrCreateDevCA(s.TLSDir)
		if err != nil {
			return nil, err
		}
		cert, err := ca.Issue(append([]string{s.Name}, hosts...)...)
		if err != nil {
			return nil, err
		}
		if pool == nil {
			pool = ca.Pool()
		}
		return RouteTLSConfig(cert, pool), nil
	}
	return nil, fmt.Errorf("natscoord: route TLS needs a development CA directory or a certificate and key")
}

func splitHostPort(s, what string) (string, int, error) {
	h, p, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, fmt.Errorf("natscoord: %s address: %w", what, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil || n <= 0 || n > 65535 {
		return "", 0, fmt.Errorf("natscoord: %s address: bad port %q", what, p)
	}
	return h, n, nil
}

// readSecretLine reads a password file (its first line).
func readSecretLine(path, what string) (string, error) {
	if path == "" {
		return "", fmt.Errorf("natscoord: a %s is required", what)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("natscoord: %s: %w", what, err)
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}
