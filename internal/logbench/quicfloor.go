package logbench

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/anoptic/broadside/cmdlog/baseline/pipe"
	"github.com/anoptic/broadside/netcode/transport"
)

const floorALPN = "broadside-echo/1"

// quicFloor is the physical floor of a 1-RTT append to 3 replicas here: the
// record goes to 3 echo servers (each its own endpoint) in parallel, over
// one long-lived stream each, through the same pipelined-call path as the
// Corfu baseline, and the append completes when all 3 echoes are back.
// Nothing is stored. (The echo carries the record back, where a replica
// would answer with a few bytes, so for large records the floor is a
// little pessimistic.)
type quicFloor struct {
	servers []*transport.EchoServer
	ep      *transport.Endpoint
	clients []*pipe.Client
}

type fanout struct {
	remaining atomic.Int32
	done      chan error
}

func startQUICFloor(ctx context.Context, env Env) (_ System, err error) {
	ca, err := transport.NewDevCA()
	if err != nil {
		return nil, err
	}
	server, client, err := ca.MutualTLS("localhost", "127.0.0.1")
	if err != nil {
		return nil, err
	}
	f := &quicFloor{}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	for range 3 {
		s, err := transport.NewEchoServer(transport.Config{ListenAddr: "127.0.0.1:0", ServerTLS: server,
			ALPN: []string{floorALPN}, Logger: env.Logger})
		if err != nil {
			return nil, err
		}
		f.servers = append(f.servers, s)
	}
	if f.ep, err = transport.NewEndpoint(transport.Config{ListenAddr: "127.0.0.1:0", ClientTLS: client,
		ALPN: []string{floorALPN}, Logger: env.Logger}); err != nil {
		return nil, err
	}
	for _, s := range f.servers {
		c, err := pipe.Dial(ctx, f.ep, s.Addr().String())
		if err != nil {
			return nil, err
		}
		f.clients = append(f.clients, c)
	}
	if err := waitReady(ctx, f.Append); err != nil {
		return nil, fmt.Errorf("quic-floor: not ready: %w", err)
	}
	return f, nil
}

func (f *quicFloor) Append(ctx context.Context, data []byte) error {
	fo := &fanout{done: make(chan error, 1)}
	fo.remaining.Store(int32(len(f.clients)))
	reply := func(_ []byte, err error) {
		if err != nil {
			select {
			case fo.done <- err:
			default:
			}
			return
		}
		if fo.remaining.Add(-1) == 0 {
			select {
			case fo.done <- nil:
			default:
			}
		}
	}
	for _, c := range f.clients {
		if err := c.Send(data, reply); err != nil {
			return err
		}
	}
	select {
	case err := <-fo.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *quicFloor) Settle(context.Context) error { return nil }

func (f *quicFloor) Close() error {
	var errs []error
	for _, c := range f.clients {
		errs = append(errs, c.Close())
	}
	if f.ep != nil {
		errs = append(errs, f.ep.Close())
	}
	for _, s := range f.servers {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}
