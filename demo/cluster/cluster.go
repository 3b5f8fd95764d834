// Package cluster runs one Broadside world as separate processes on
// loopback, as 'broadside demo --cluster' and the cluster process test do:
// 3 NATS servers ('broadside nats'), 3 sequencing replicas and 2 shards
// ('broadside logd'), sector workers ('broadside sector') and front ends
// ('broadside serve --world'), every NATS connection with a user, a
// password and TLS, every bucket R3. It starts, SIGKILLs, SIGSTOPs and
// restarts them by name; Run plays a match through them with faults of
// every role and checks the outcome.
package cluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/anoptic/broadside/cmdlog"
	"github.com/anoptic/broadside/cmdlog/coord"
	"github.com/anoptic/broadside/cmdlog/coord/natscoord"
	"github.com/anoptic/broadside/cmdlog/mesh"
	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/netcode/transport"
	"github.com/anoptic/broadside/replay/world/natsworld"
)

// Config describes the processes of a cluster.
type Config struct {
	// Dir holds every process's data, its log (NAME.log) and the shared
	// TLS, password and secret files (required).
	Dir string
	// Command returns the command that runs 'broadside args...' (required:
	// the running executable in the CLI, the test binary in tests).
	Command func(args ...string) *exec.Cmd
	// Workers and FrontEnds count the sector workers (w1, w2, ...) and
	// front ends (fe-A, fe-B, ...); defaults 3 and 2. The last worker runs
	// with --standby.
	Workers, FrontEnds int
	// WorldSize and Islands are the game's flags (default 1000 and 4, 4
	// sectors).
	WorldSize, Islands int
	// LogTick and SuspectTicks are logd's --tick and --suspect-ticks
	// (default 10ms and 50).
	LogTick, SuspectTicks string
	// WorkersTick leaves the Ticker's lease to the workers: the front ends
	// run without --ticker (so that a worker's failure is the Ticker
	// holder's, with Options.KillTicker).
	WorkersTick bool
	// TickerGrace, if set, is the workers' --ticker-grace ("-1ms": no
	// bridging, to compare).
	TickerGrace string
}

// The fixed names of the processes.
const (
	natsNodes = 3
	// World is the world id the cluster runs.
	World = 1
	user  = "broadside"
)

// LogNodes are the log cluster's node ids: 3 sequencing replicas, 2 shards.
var LogNodes = []msg.NodeID{1, 2, 3, 101, 102}

// Proc is one process of the cluster.
type Proc struct {
	Name string
	Args []string
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{}
}

// Running reports whether the process was started and not yet reaped.
func (p *Proc) Running() bool {
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Cluster is a running cluster.
type Cluster struct {
	cfg  Config
	Dir  string
	game []string

	TLSDir, CAFile, PasswordFile, SecretFile string
	Secret                                   []byte
	// NATSURL lists the NATS servers' client URLs, comma separated.
	NATSURL string
	// ConnOptions authenticate a client of the NATS servers.
	ConnOptions natscoord.ConnOptions
	// Peers are the log nodes' addresses; PeerFlag the same as --peers.
	Peers    map[msg.NodeID]string
	PeerFlag string
	// FrontEnds maps a front end's name to its players' UDP address,
	// Admin to its admin HTTP address (/readyz, /world).
	FrontEnds, Admin map[string]string
	// Workers and FrontEndNames name the processes in start order.
	Workers, FrontEndNames []string
	// CA issues the clients' certificates.
	CA *transport.DevCA

	// Coord is a view coordinator client (the log's leader); Conn a NATS
	// connection; Leases a lease reader.
	Coord        coord.Coordinator
	Conn         *nats.Conn
	Leases       *natsworld.Leases
	TickerLeases *natsworld.Leases

	mu      sync.Mutex
	procs   map[string]*Proc
	names   []string
	closeCo func()
}

// Start starts every process and waits until the front ends listen.
func Start(ctx context.Context, cfg Config) (c *Cluster, err error) {
	if cfg.Dir == "" || cfg.Command == nil {
		return nil, errors.New("cluster: Dir and Command are required")
	}
	cfg.Workers, cfg.FrontEnds = or(cfg.Workers, 3), or(cfg.FrontEnds, 2)
	cfg.WorldSize, cfg.Islands = or(cfg.WorldSize, 1000), or(cfg.Islands, 4)
	if cfg.LogTick == "" {
		cfg.LogTick, cfg.SuspectTicks = "10ms", "50"
	}
	c = &Cluster{cfg: cfg, Dir: cfg.Dir, procs: map[string]*Proc{}, FrontEnds: map[string]string{}, Admin: map[string]string{},
		game: []string{"--world-size", fmt.Sprint(cfg.WorldSize), "--islands", fmt.Sprint(cfg.Islands)}}
	defer func() {
		if err != nil {
			c.Close()
			c = nil
		}
	}()
	c.TLSDir = filepath.Join(cfg.Dir, "tls")
	if c.CA, err = transport.LoadOrCreateDevCA(c.TLSDir); err != nil {
		return c, err
	}
	c.CAFile = filepath.Join(c.TLSDir, transport.DevCACertFile)
	// The log clients' certificate (workers, front ends), before any log
	// node would make it.
	if err := mesh.EnsureDevClientCert(c.TLSDir, c.CA); err != nil {
		return c, err
	}
	c.PasswordFile = filepath.Join(cfg.Dir, "nats-password")
	pw := make([]byte, 16)
	if _, err := rand.Read(pw); err != nil {
		return c, err
	}
	if err := os.WriteFile(c.PasswordFile, []byte(hex.EncodeToString(pw)+"\n"), 0o600); err != nil {
		return c, err
	}
	c.ConnOptions = natscoord.ConnOptions{User: user, Password: hex.EncodeToString(pw), CAFile: c.CAFile}
	// The player token secret, shared by the front ends (hex, as serve
	// reads it).
	c.Secret = make([]byte, 32)
	if _, err := rand.Read(c.Secret); err != nil {
		return c, err
	}
	c.SecretFile = filepath.Join(cfg.Dir, "server.secret")
	if err := os.WriteFile(c.SecretFile, []byte(hex.EncodeToString(c.Secret)+"\n"), 0o600); err != nil {
		return c, err
	}

	// NATS: 3 nodes, each its own process.
	tcp, err := freePorts("tcp", 2*natsNodes)
	if err != nil {
		return c, err
	}
	var routes, urls []string
	for i := range natsNodes {
		routes = append(routes, fmt.Sprintf("127.0.0.1:%d", tcp[natsNodes+i]))
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", tcp[i]))
	}
	c.NATSURL = strings.Join(urls, ",")
	for i := range natsNodes {
		name := fmt.Sprintf("nats-%d", i+1)
		if err := c.start(name, "nats", "--name", fmt.Sprintf("n%d", i+1), "--listen", fmt.Sprintf("127.0.0.1:%d", tcp[i]),
			"--cluster-listen", routes[i], "--routes", strings.Join(routes, ","), "--store-dir", filepath.Join(cfg.Dir, name),
			"--user", user, "--password-file", c.PasswordFile, "--tls-dir", c.TLSDir, "--route-tls"); err != nil {
			return c, err
		}
	}
	// The R3 buckets exist before the other processes start (several
	// creating one at once stall each other for seconds); the first
	// succeeds once the nodes have elected a JetStream meta leader.
	deadline := time.Now().Add(60 * time.Second)
	for {
		octx, cancel := context.WithTimeout(ctx, 10*time.Second)
		c.Coord, c.closeCo, err = natscoord.DialConfig(octx, c.NATSURL, natscoord.Config{Cluster: "broadside", Replicas: 3}, c.ConnOptions)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return c, fmt.Errorf("cluster: the NATS cluster did not form: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if c.Conn, err = natscoord.Connect(c.NATSURL, c.ConnOptions); err != nil {
		return c, err
	}
	js, err := jetstream.New(c.Conn)
	if err != nil {
		return c, err
	}
	if c.Leases, err = natsworld.OpenLeases(ctx, js, natsworld.LeasesConfig{World: World, Worker: "observer", Replicas: 3}); err != nil {
		return c, err
	}
	if c.TickerLeases, err = natsworld.OpenTickerLeases(ctx, js, natsworld.LeasesConfig{World: World, Worker: "observer", Replicas: 3}); err != nil {
		return c, err
	}
	if _, err := natsworld.OpenSnapshotStore(ctx, js, natsworld.SnapshotStoreConfig{World: World, Replicas: 3}); err != nil {
		return c, err
	}
	if _, err := natsworld.OpenLineageStore(ctx, js, natsworld.LineageStoreConfig{World: World, Replicas: 3}); err != nil {
		return c, err
	}

	// The log cluster.
	udp, err := freePorts("udp", len(LogNodes)+cfg.FrontEnds)
	if err != nil {
		return c, err
	}
	c.Peers = map[msg.NodeID]string{}
	var parts []string
	for i, id := range LogNodes {
		c.Peers[id] = fmt.Sprintf("127.0.0.1:%d", udp[i])
		parts = append(parts, fmt.Sprintf("%d=%s", id, c.Peers[id]))
	}
	c.PeerFlag = strings.Join(parts, ",")
	creds := c.natsCreds("")
	for _, id := range LogNodes {
		role := "seq"
		if id >= cmdlog.FirstShardID {
			role = "shard"
		}
		if err := c.start(fmt.Sprintf("node-%d", id), append([]string{"logd", "--role", role, "--id", fmt.Sprint(id), "--peers", c.PeerFlag,
			"--data", filepath.Join(cfg.Dir, fmt.Sprint(id)), "--tls-dir", c.TLSDir, "--coord", c.NATSURL, "--coord-replicas", "3",
			"--tick", cfg.LogTick, "--suspect-ticks", cfg.SuspectTicks}, creds...)...); err != nil {
			return c, err
		}
	}
	logFlags := append([]string{"--log-peers", c.PeerFlag, "--log-tls-dir", c.TLSDir, "--log-coord", c.NATSURL}, c.natsCreds("log-")...)
	for i := range cfg.Workers {
		w := fmt.Sprintf("w%d", i+1)
		args := append([]string{"sector", "--nats", c.NATSURL, "--replicas", "3", "--worker", w, "--ticker"}, c.game...)
		if cfg.TickerGrace != "" {
			args = append(args, "--ticker-grace="+cfg.TickerGrace)
		}
		if i == cfg.Workers-1 && cfg.Workers > 1 {
			args = append(args, "--standby") // its takeovers start from hot copies
		}
		if err := c.start(w, append(append(args, creds...), logFlags...)...); err != nil {
			return c, err
		}
		c.Workers = append(c.Workers, w)
	}
	admin, err := freePorts("tcp", cfg.FrontEnds)
	if err != nil {
		return c, err
	}
	for i := range cfg.FrontEnds {
		fe := fmt.Sprintf("fe-%c", 'A'+i)
		c.FrontEnds[fe] = fmt.Sprintf("127.0.0.1:%d", udp[len(LogNodes)+i])
		c.Admin[fe] = fmt.Sprintf("127.0.0.1:%d", admin[i])
		args := []string{"serve", "--dev", "--listen", c.FrontEnds[fe], "--admin-addr", c.Admin[fe],
			"--tls-dir", c.TLSDir, "--secret-file", c.SecretFile, "--data", filepath.Join(cfg.Dir, fe), "--log", "--world", c.NATSURL, "--world-replicas", "3"}
		if !cfg.WorkersTick {
			args = append(args, "--ticker")
		}
		if err := c.start(fe, append(append(append(args, c.game...), creds...), logFlags...)...); err != nil {
			return c, err
		}
		c.FrontEndNames = append(c.FrontEndNames, fe)
	}
	for _, fe := range c.FrontEndNames {
		if err := c.WaitLog(ctx, fe, "listening on", 60*time.Second); err != nil {
			return c, err
		}
	}
	return c, nil
}

func or(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// natsCreds are the flags of a NATS client's credentials and TLS.
func (c *Cluster) natsCreds(prefix string) []string {
	return []string{"--" + prefix + "nats-user", user, "--" + prefix + "nats-password-file", c.PasswordFile, "--" + prefix + "nats-ca", c.CAFile}
}

// start starts a new process named name.
func (c *Cluster) start(name string, args ...string) error {
	lf, err := os.OpenFile(filepath.Join(c.Dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	p := &Proc{Name: name, Args: args, log: lf}
	c.mu.Lock()
	c.procs[name] = p
	c.names = append(c.names, name)
	c.mu.Unlock()
	return c.run(p)
}

func (c *Cluster) run(p *Proc) error {
	cmd := c.cfg.Command(p.Args...)
	cmd.Stdout, cmd.Stderr = p.log, p.log
	fmt.Fprintf(p.log, "=== %s started\n", time.Now().UTC().Format(time.RFC3339Nano))
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("cluster: start %s: %w", p.Name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	p.cmd, p.done = cmd, done
	return nil
}

// Proc returns the process named name (nil if none).
func (c *Cluster) Proc(name string) *Proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.procs[name]
}

// Names returns every process's name in start order.
func (c *Cluster) Names() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.names...)
}

// Kill SIGKILLs the process and waits until it is gone.
func (c *Cluster) Kill(name string) {
	p := c.Proc(name)
	if p == nil || !p.Running() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGCONT) // a stopped process dies at once too
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Signal sends sig to the process.
func (c *Cluster) Signal(name string, sig os.Signal) error {
	p := c.Proc(name)
	if p == nil || !p.Running() {
		return fmt.Errorf("cluster: %s is not running", name)
	}
	return p.cmd.Process.Signal(sig)
}

// Restart starts the process again with the same arguments (after Kill).
func (c *Cluster) Restart(name string) error {
	p := c.Proc(name)
	if p == nil {
		return fmt.Errorf("cluster: no process %s", name)
	}
	if p.Running() {
		return fmt.Errorf("cluster: %s is running", name)
	}
	return c.run(p)
}

// Stop sends SIGTERM and waits up to timeout for the process to exit (then
// SIGKILLs it and reports an error).
func (c *Cluster) Stop(name string, timeout time.Duration) error {
	p := c.Proc(name)
	if p == nil || !p.Running() {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(timeout):
		c.Kill(name)
		return fmt.Errorf("cluster: %s did not stop within %v of SIGTERM", name, timeout)
	}
}

// Log returns what the process wrote so far (every run of it).
func (c *Cluster) Log(name string) []byte {
	b, _ := os.ReadFile(filepath.Join(c.Dir, name+".log"))
	return b
}

// LogTail returns the process's last n lines.
func (c *Cluster) LogTail(name string, n int) string {
	lines := strings.Split(string(c.Log(name)), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// WaitLog waits until the process's current run wrote s.
func (c *Cluster) WaitLog(ctx context.Context, name, s string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		b := c.Log(name)
		if i := bytes.LastIndex(b, []byte("=== ")); i >= 0 && bytes.Contains(b[i:], []byte(s)) {
			return nil
		}
		if p := c.Proc(name); p != nil && !p.Running() {
			return fmt.Errorf("cluster: %s exited:\n%s", name, c.LogTail(name, 15))
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("cluster: %s did not write %q within %v:\n%s", name, s, timeout, c.LogTail(name, 15))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Ready asks the front end's /readyz: nil when it answers 200.
func (c *Cluster) Ready(ctx context.Context, fe string) error {
	b, code, err := c.adminGet(ctx, fe, "/readyz")
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("cluster: %s /readyz: %d %s", fe, code, strings.TrimSpace(string(b)))
	}
	return err
}

// Status returns the front end's /world status.
func (c *Cluster) Status(ctx context.Context, fe string) (natsworld.FrontEndStatus, error) {
	var st natsworld.FrontEndStatus
	b, code, err := c.adminGet(ctx, fe, "/world")
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("cluster: %s /world: %d %s", fe, code, strings.TrimSpace(string(b)))
	}
	if err == nil {
		err = json.Unmarshal(b, &st)
	}
	return st, err
}

func (c *Cluster) adminGet(ctx context.Context, fe, path string) ([]byte, int, error) {
	rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, "http://"+c.Admin[fe]+path, nil)
	if err != nil {
		return nil, 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return b, resp.StatusCode, err
}

// TickerHolder returns who holds the Ticker's lease ("" if nobody).
func (c *Cluster) TickerHolder(ctx context.Context) string {
	w, _, _ := c.TickerLeases.Owner(ctx, natsworld.TickerLease)
	return w
}

// Leader returns the process name of the log's sequencing leader. It
// retries for up to 30 s: right after a NATS node's restart a request
// through it may go unanswered until it rejoins the JetStream cluster.
func (c *Cluster) Leader(ctx context.Context) (string, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		gctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		v, _, err := c.Coord.Get(gctx)
		cancel()
		if err == nil {
			return fmt.Sprintf("node-%d", v.Leader), nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return "", fmt.Errorf("cluster: the log's view: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// DialLog returns a client of the log cluster.
func (c *Cluster) DialLog() (*cmdlog.RemoteClient, error) {
	_, cli, err := mesh.DevNodeTLS(c.CA, mesh.ClientIDBase, "localhost")
	if err != nil {
		return nil, err
	}
	return cmdlog.DialRemote(cmdlog.RemoteConfig{Peers: c.Peers, Coordinator: c.Coord, ClientTLS: cli, Logger: quiet()})
}

// Close kills every process and closes the connections.
func (c *Cluster) Close() {
	for _, n := range c.Names() {
		c.Kill(n)
	}
	c.mu.Lock()
	for _, p := range c.procs {
		p.log.Close()
	}
	c.mu.Unlock()
	if c.Conn != nil {
		c.Conn.Close()
	}
	if c.closeCo != nil {
		c.closeCo()
	}
}

func quiet() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// freePorts returns n distinct ports free on 127.0.0.1 at the time of the
// call ("tcp" or "udp").
func freePorts(network string, n int) ([]int, error) {
	var out []int
	var closers []func() error
	defer func() {
		for _, cl := range closers {
			_ = cl()
		}
	}()
	for range n {
		if network == "udp" {
			l, err := net.ListenPacket("udp", "127.0.0.1:0")
			if err != nil {
				return nil, err
			}
			closers = append(closers, l.Close)
			out = append(out, l.LocalAddr().(*net.UDPAddr).Port)
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		closers = append(closers, l.Close)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}
