package corfu

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"sync"

	"github.com/anoptic/broadside/netcode/transport"
)

// ALPN is the application protocol of Corfu-baseline links.
const ALPN = "broadside-corfu/1"

// NodeConfig configures a sequencer or storage node.
type NodeConfig struct {
	// ListenAddr is the UDP address to serve on; default 127.0.0.1:0.
	ListenAddr string
	// ServerTLS needs a certificate (see transport.DevCA).
	ServerTLS *tls.Config
	Logger    *slog.Logger
}

// server accepts connections and streams and runs serve for each stream
// on its own goroutine until Close.
type server struct {
	ep     *transport.Endpoint
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	serve  func(st *transport.Stream)
}

func startServer(cfg NodeConfig, serve func(*transport.Stream)) (*server, error) {
	if cfg.ListenAddr == "" {
		cfg.ListenAddr = "127.0.0.1:0"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	ep, err := transport.NewEndpoint(transport.Config{
		ListenAddr: cfg.ListenAddr, ServerTLS: cfg.ServerTLS, ALPN: []string{ALPN}, Logger: cfg.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("corfu: %w", err)
	}
	if err := ep.Listen(); err != nil {
		_ = ep.Close()
		return nil, fmt.Errorf("corfu: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &server{ep: ep, log: cfg.Logger, ctx: ctx, cancel: cancel, serve: serve}
	s.wg.Go(s.acceptConns)
	return s, nil
}

func (s *server) addr() string { return s.ep.Addr().String() }

func (s *server) acceptConns() {
	for {
		conn, err := s.ep.Accept(s.ctx)
		if err != nil {
			return
		}
		s.wg.Go(func() {
			for {
				st, err := conn.AcceptStream(s.ctx)
				if err != nil {
					return
				}
				s.wg.Go(func() { s.serve(st) })
			}
		})
	}
}

// close stops accepting, closes every connection and waits for the
// goroutines.
func (s *server) close() error {
	s.cancel()
	err := s.ep.Close()
	s.wg.Wait()
	return err
}
