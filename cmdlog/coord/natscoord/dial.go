package natscoord

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ConnOptions are the credentials and TLS settings of a client connection
// to NATS. The zero value connects without credentials in plain text (an
// embedded server on loopback). Set at most one of User (with Password),
// NkeySeedFile and CredsFile.
type ConnOptions struct {
	// Name is the connection name the server shows; default "broadside".
	Name string
	// User and Password authenticate with a user name and password.
	User, Password string
	// NkeySeedFile is a file holding a user nkey seed ("SU..."): the client
	// signs the server's nonce with it (nkey authentication).
	NkeySeedFile string
	// CredsFile is a decentralised-auth credentials file (a user JWT and its
	// nkey seed), as the nats CLI and NGS/Synadia Cloud issue them.
	CredsFile string
	// CAFile, when set, is the CA certificate that signs the servers'
	// certificates, and the connection requires TLS.
	CAFile string
	// CertFile and KeyFile, when set, are a client certificate for servers
	// that verify clients (mutual TLS).
	CertFile, KeyFile string
	// TLS requires TLS verified against the system's roots when CAFile is
	// empty.
	TLS bool
}

// natsOptions returns the nats.go options of o, with reconnection for ever.
func (o ConnOptions) natsOptions() ([]nats.Option, error) {
	name := o.Name
	if name == "" {
		name = "broadside"
	}
	opts := []nats.Option{nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(200 * time.Millisecond)}
	n := 0
	if o.User != "" {
		n++
		opts = append(opts, nats.UserInfo(o.User, o.Password))
	} else if o.Password != "" {
		return nil, errors.New("a NATS password needs a user")
	}
	if o.NkeySeedFile != "" {
		n++
		opt, err := nats.NkeyOptionFromSeed(o.NkeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("nkey seed %s: %w", o.NkeySeedFile, err)
		}
		opts = append(opts, opt)
	}
	if o.CredsFile != "" {
		n++
		opts = append(opts, nats.UserCredentials(o.CredsFile))
	}
	if n > 1 {
		return nil, errors.New("give one of a NATS user, an nkey seed file and a credentials file")
	}
	if o.CAFile != "" {
		opts = append(opts, nats.RootCAs(o.CAFile))
	} else if o.TLS {
		opts = append(opts, nats.Secure())
	}
	if (o.CertFile == "") != (o.KeyFile == "") {
		return nil, errors.New("a NATS client certificate needs both a certificate and a key file")
	}
	if o.CertFile != "" {
		opts = append(opts, nats.ClientCert(o.CertFile, o.KeyFile))
	}
	return opts, nil
}

// Connect opens a client connection to url (one or more nats:// or
// tls:// URLs, comma-separated) with o's credentials and TLS. The
// connection reconnects for ever.
func Connect(url string, o ConnOptions) (*nats.Conn, error) {
	if url == "" {
		return nil, fmt.Errorf("natscoord: a NATS URL (nats://HOST:PORT) is required")
	}
	opts, err := o.natsOptions()
	if err != nil {
		return nil, fmt.Errorf("natscoord: connect to %s: %w", url, err)
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("natscoord: connect to %s: %w", url, err)
	}
	return nc, nil
}

// Dial connects to the NATS server at url and returns the JetStream KV
// coordinator of cluster's views; the returned func closes the connection.
// The connection reconnects for ever. It is DialConfig with no credentials
// and a bucket of one replica.
func Dial(ctx context.Context, url, cluster string) (*KV, func(), error) {
	return DialConfig(ctx, url, Config{Cluster: cluster}, ConnOptions{})
}

// DialConfig connects to url with o's credentials and TLS and returns the
// coordinator cfg describes (cfg.Replicas 3 for a NATS cluster); the
// returned func closes the connection.
func DialConfig(ctx context.Context, url string, cfg Config, o ConnOptions) (*KV, func(), error) {
	if url == "" {
		return nil, nil, fmt.Errorf("natscoord: a coordinator URL (nats://HOST:PORT) is required")
	}
	nc, err := Connect(url, o)
	if err != nil {
		return nil, nil, fmt.Errorf("coordinator: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("coordinator %s: %w", url, err)
	}
	c, err := New(ctx, js, cfg)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("coordinator %s: %w", url, err)
	}
	return c, nc.Close, nil
}
