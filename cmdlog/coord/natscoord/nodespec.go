package natscoord

import (
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
	return o, err
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
