package natscoord

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Dial connects to the NATS server at url and returns the JetStream KV
// coordinator of cluster's views; the returned func closes the connection.
// The connection reconnects for ever.
func Dial(ctx context.Context, url, cluster string) (*KV, func(), error) {
	if url == "" {
		return nil, nil, fmt.Errorf("natscoord: a coordinator URL (nats://HOST:PORT) is required")
	}
	nc, err := nats.Connect(url, nats.Name("broadside"), nats.MaxReconnects(-1), nats.ReconnectWait(200*time.Millisecond))
	if err != nil {
		return nil, nil, fmt.Errorf("coordinator %s: %w", url, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("coordinator %s: %w", url, err)
	}
	c, err := New(ctx, js, Config{Cluster: cluster})
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("coordinator %s: %w", url, err)
	}
	return c, nc.Close, nil
}
