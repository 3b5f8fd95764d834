package gamebench

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/anoptic/broadside/cmdlog/embedded"
	"github.com/anoptic/broadside/cmdlog/seq"
	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/netcode/client"
	"github.com/anoptic/broadside/netcode/server"
	"github.com/anoptic/broadside/netcode/transport"
	"github.com/anoptic/broadside/netcode/wire"
	"github.com/anoptic/broadside/replay/world"
	"github.com/prometheus/client_golang/prometheus"
)

// gameServer is what 'broadside serve' runs, in this process: an
// embedded command log, a game server (QUIC on loopback) and a world on
// the log, everything under one data directory. The game-server benches
// start, kill and reopen it.
type gameServer struct {
	log       *embedded.Cluster
	srv       *server.Server // nil without players
	world     *world.World
	served    chan error
	stopServe context.CancelFunc
	// reg holds the server's and the world's metrics.
	reg *prometheus.Registry
}

// counter returns the value of the registry's counter name (0 if absent).
func (g *gameServer) counter(name string) float64 {
	mfs, err := g.reg.Gather()
	if err != nil {
		return 0
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		total := 0.0
		for _, m := range mf.GetMetric() {
			total += m.GetCounter().GetValue()
		}
		return total
	}
	return 0
}

// histogram returns the registry's histogram name: its sample count and
// sum, and the cumulative count at each upper bound (nil if absent).
func (g *gameServer) histogram(name string) (count uint64, sum float64, cumulative map[float64]uint64) {
	mfs, err := g.reg.Gather()
	if err != nil {
		return 0, 0, nil
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		cumulative = map[float64]uint64{}
		for _, m := range mf.GetMetric() {
			h := m.GetHistogram()
			count += h.GetSampleCount()
			sum += h.GetSampleSum()
			for _, b := range h.GetBucket() {
				cumulative[b.GetUpperBound()] += b.GetCumulativeCount()
			}
		}
		return count, sum, cumulative
	}
	return 0, 0, nil
}

// counterWhere returns the sum of the registry's counter name over the
// series whose labels have the values want gives.
func (g *gameServer) counterWhere(name string, want map[string]string) float64 {
	mfs, err := g.reg.Gather()
	if err != nil {
		return 0
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := 0
			for _, l := range m.GetLabel() {
				if v, ok := want[l.GetName()]; ok && v == l.GetValue() {
					match++
				}
			}
			if match == len(want) {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

// gameServerConfig configures a gameServer.
type gameServerConfig struct {
	Dir        string
	Durability seq.Durability
	Game       world.Game
	// Players, if set, runs a game server with these credentials on
	// Addr (empty: any port); without it the world runs alone.
	Players *credentials
	Addr    string
	// AckHold is the server's (server.Config.AckHold).
	AckHold     time.Duration
	AcksInState bool
	// OnFrame sees every tick the world publishes.
	OnFrame func(w *world.World, tick uint64)
	Logger  *slog.Logger
	// OnLogOpen, if set, is called once the log is open, before the
	// server and the world start.
	OnLogOpen func(*embedded.Cluster) error
}

// credentials are a bench's development CA and token secret.
type credentials struct {
	ca     *transport.DevCA
	secret []byte
}

func newCredentials() (*credentials, error) {
	ca, err := transport.NewDevCA()
	if err != nil {
		return nil, err
	}
	secret := make([]byte, 32)
	rand.Read(secret)
	return &credentials{ca: ca, secret: secret}, nil
}

// startGameServer starts (or reopens, on the same Dir) a game server in
// serve's order: the log, then the game server, then the world.
func startGameServer(ctx context.Context, cfg gameServerConfig) (*gameServer, error) {
	g := &gameServer{}
	var err error
	g.log, err = embedded.Start(ctx, embedded.Options{Dir: filepath.Join(cfg.Dir, "log"), Durability: cfg.Durability, Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("log: %w", err)
	}
	if cfg.OnLogOpen != nil {
		if err := cfg.OnLogOpen(g.log); err != nil {
			g.log.Close()
			return nil, err
		}
	}
	reg := prometheus.NewRegistry()
	g.reg = reg
	var frames *world.Frames
	if cfg.Players != nil {
		frames = world.NewFrames(cfg.Game.Shards, cfg.Game.NewFrame)
		stls, err := cfg.Players.ca.ServerTLS("localhost")
		if err != nil {
			g.log.Close()
			return nil, err
		}
		addr := cfg.Addr
		if addr == "" {
			addr = "127.0.0.1:0"
		}
		g.srv, err = server.New(server.Config{
			ListenAddr: addr, TLS: stls, Secret: cfg.Players.secret, Log: g.log.Log(), Durability: server.DurabilityOf(cfg.Durability),
			Limits: server.IntakeLimits{Rate: 60, Burst: 30}, Logger: cfg.Logger, Registry: reg,
			State: broadside.NewStateSource(frames), SpectatorDelay: 2 * broadside.TickRate, TickRate: broadside.TickRate,
			Tick: frames.Latest, World: cfg.Game.Config, AckHold: cfg.AckHold, AcksInState: cfg.AcksInState,
		})
		if err != nil {
			g.log.Close()
			return nil, err
		}
		frames.OnApplied(g.srv.NoteApplied)
	} else {
		frames = world.NewFrames(cfg.Game.Shards, nil)
	}
	var running atomic.Pointer[world.World]
	srv := g.srv
	g.world, err = world.Start(ctx, world.Config{
		Game: cfg.Game, Dir: filepath.Join(cfg.Dir, "world"), Log: g.log.World(), Frames: frames, Logger: cfg.Logger, Registry: reg,
		OnFrame: func(tick uint64) {
			if srv != nil {
				srv.Publish(tick)
			}
			if w := running.Load(); w != nil && cfg.OnFrame != nil {
				cfg.OnFrame(w, tick)
			}
		},
	})
	if err != nil {
		g.log.Close()
		return nil, fmt.Errorf("world: %w", err)
	}
	running.Store(g.world)
	if g.srv != nil {
		sctx, stop := context.WithCancel(context.WithoutCancel(ctx))
		g.stopServe, g.served = stop, make(chan error, 1)
		go func() { g.served <- srv.Serve(sctx) }()
	}
	return g, nil
}

// Addr is the game server's address.
func (g *gameServer) Addr() string { return g.srv.Addr() }

// kill stops everything as a crash would (world.Abandon,
// embedded.Cluster.Kill, the endpoint closed without a drain).
func (g *gameServer) kill() {
	g.world.Abandon()
	g.log.Kill()
	if g.stopServe != nil {
		g.stopServe()
		<-g.served
	}
}

// stop stops everything gracefully (drain, final snapshots).
func (g *gameServer) stop(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	var errs []error
	if g.srv != nil {
		errs = append(errs, g.srv.Drain(ctx))
	}
	_, err := g.world.Stop(ctx)
	errs = append(errs, err)
	if g.stopServe != nil {
		g.stopServe()
		errs = append(errs, <-g.served)
	}
	g.log.Close()
	return errors.Join(errs...)
}

// probeAck connects a player to addr (retrying while the server is not
// up, as a reconnecting client would), sends one command and waits for
// its durable acknowledgement.
func probeAck(ctx context.Context, addr string, cr *credentials, name string) error {
	// The probe's id is the last one, above the bots' (numbered from
	// server.EphemeralIDBase+1).
	tok, err := server.IssueToken(cr.secret, server.Claims{Player: name, PlayerID: ^uint32(0), Audience: server.AudiencePlayer, Expires: time.Now().Add(time.Hour)})
	if err != nil {
		return err
	}
	for {
		dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		c, err := client.Dial(dctx, client.Config{Addr: addr, TLS: cr.ca.ClientTLS(), Token: tok})
		cancel()
		if err == nil {
			defer c.Close()
			if _, err := c.Send(broadside.ToGameCommand(broadside.Join())); err != nil {
				return err
			}
			select {
			case r := <-c.Results():
				if r.Status != wire.AckDurable {
					return fmt.Errorf("probe: command answered %v, not durable", r.Status)
				}
				return nil
			case <-c.Done():
				return fmt.Errorf("probe: session closed: %v", c.Err())
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(2 * time.Millisecond)
	}
}
