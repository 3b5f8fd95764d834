package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/anoptic/broadside/cmdlog"
	"github.com/anoptic/broadside/cmdlog/coord"
	"github.com/anoptic/broadside/cmdlog/coord/natscoord"
	"github.com/anoptic/broadside/cmdlog/mesh"
	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/netcode/transport"
)

// The rig of the black-box tests that run the CLI as real processes on
// loopback (faults, jetstream-shard, hostile): the test binary standing in
// for broadside, child processes, a logd cluster, a NATS cluster that
// demands credentials, appending clients and reading the log back.

// TestMain lets the test binary stand in for the broadside binary: child
// processes started with BROADSIDE_TEST_MAIN=1 run the CLI.
func TestMain(m *testing.M) {
	if os.Getenv("BROADSIDE_TEST_MAIN") == "1" {
		os.Args = append([]string{"broadside"}, os.Args[1:]...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func freeUDPPort(t *testing.T) int {
	t.Helper()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port
}

// freeTCPAddr returns a loopback TCP address free now.
func freeTCPAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// proc is a broadside child process (the test binary with
// BROADSIDE_TEST_MAIN=1) writing to log; it can be started again after a
// kill.
type proc struct {
	args []string
	cmd  *exec.Cmd
	log  *os.File
}

func (p *proc) start(t *testing.T) {
	t.Helper()
	cmd := exec.Command(os.Args[0], p.args...)
	cmd.Env = append(os.Environ(), "BROADSIDE_TEST_MAIN=1")
	cmd.Stdout, cmd.Stderr = p.log, p.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.cmd = cmd
}

func (p *proc) kill() {
	if p.cmd != nil && p.cmd.Process != nil {
		p.cmd.Process.Signal(syscall.SIGKILL)
		p.cmd.Wait()
		p.cmd = nil
	}
}

// waitLogged waits until the file at path holds want (a process said it
// is ready), failing the test after tries × 10 ms.
func waitLogged(t *testing.T, path, want string, tries int) {
	t.Helper()
	for i := 0; ; i++ {
		b, _ := os.ReadFile(path)
		if bytes.Contains(b, []byte(want)) {
			return
		}
		if i > tries {
			t.Fatalf("%s never said %q:\n%s", path, want, b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The replicas' timing in the process tests: a 10 ms tick and 50 ticks of
// silence before a peer is suspected by default (no false suspicions on a
// busy shared machine); BROADSIDE_FAULTS_TIMING=5ms,6 tries the timing a
// 50 ms view change needs.
var faultsTick, faultsSuspect = func() (string, string) {
	if v := os.Getenv("BROADSIDE_FAULTS_TIMING"); v != "" {
		if tick, suspect, ok := strings.Cut(v, ","); ok {
			return tick, suspect
		}
	}
	return "10ms", "50"
}()

// logNodeIDs are the nodes of a test log cluster: 3 sequencing replicas
// and 2 shards.
var logNodeIDs = []msg.NodeID{1, 2, 3, 101, 102}

// logCluster is a log cluster of logd processes on loopback.
type logCluster struct {
	peers    map[msg.NodeID]string
	peerFlag string // the --peers value
	procs    map[msg.NodeID]*proc
}

// startLogCluster starts a logd process per node of logNodeIDs, its data
// in dir/ID and its output in dir/node-ID.log, with the flags --role,
// --id, --peers and --data, then those extra gives the node. The
// processes are killed when the test ends; if it failed, each node's log
// tail is printed; dir is copied to $BROADSIDE_KEEP_LOGS if set, passed or not.
func startLogCluster(t *testing.T, dir string, extra func(id msg.NodeID) []string) *logCluster {
	t.Helper()
	lc := &logCluster{peers: map[msg.NodeID]string{}, procs: map[msg.NodeID]*proc{}}
	var parts []string
	for _, id := range logNodeIDs {
		lc.peers[id] = fmt.Sprintf("127.0.0.1:%d", freeUDPPort(t))
		parts = append(parts, fmt.Sprintf("%d=%s", id, lc.peers[id]))
	}
	lc.peerFlag = strings.Join(parts, ",")
	t.Cleanup(func() {
		for _, p := range lc.procs {
			p.kill()
			p.log.Close()
		}
		if keep := os.Getenv("BROADSIDE_KEEP_LOGS"); keep != "" {
			exec.Command("cp", "-r", dir, keep).Run() // passed or not
		}
		if !t.Failed() {
			return
		}
		for _, id := range logNodeIDs {
			b, _ := os.ReadFile(filepath.Join(dir, fmt.Sprintf("node-%d.log", id)))
			lines := strings.Split(string(b), "\n")
			t.Logf("node %d log tail:\n%s", id, strings.Join(lines[max(0, len(lines)-15):], "\n"))
		}
	})
	for _, id := range logNodeIDs {
		role := "seq"
		if id >= cmdlog.FirstShardID {
			role = "shard"
		}
		lf, err := os.Create(filepath.Join(dir, fmt.Sprintf("node-%d.log", id)))
		if err != nil {
			t.Fatal(err)
		}
		p := &proc{log: lf, args: append([]string{"logd", "--role", role, "--id", fmt.Sprint(id), "--peers", lc.peerFlag,
			"--data", filepath.Join(dir, fmt.Sprint(id))}, extra(id)...)}
		p.start(t)
		lc.procs[id] = p
	}
	return lc
}

// client returns a client of the cluster with coordinator co and TLS
// client, for the caller to close.
func (lc *logCluster) client(t *testing.T, co coord.Coordinator, client *tls.Config) *cmdlog.RemoteClient {
	t.Helper()
	rc, err := cmdlog.DialRemote(cmdlog.RemoteConfig{Peers: lc.peers, Coordinator: co, ClientTLS: client, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

// dial is client, closed when the test ends.
func (lc *logCluster) dial(t *testing.T, co coord.Coordinator, client *tls.Config) *cmdlog.RemoteClient {
	t.Helper()
	rc := lc.client(t, co, client)
	t.Cleanup(func() { rc.Close() })
	return rc
}

// startNATS starts an embedded NATS server (its store in dir/nats),
// shut down when the test ends.
func startNATS(t *testing.T, dir string) *natscoord.Embedded {
	t.Helper()
	ns, err := natscoord.StartEmbedded(natscoord.EmbeddedOptions{StoreDir: filepath.Join(dir, "nats")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	return ns
}

// secureNATS is a 3-node NATS cluster in the test process that demands a
// user, a password and TLS (its certificate from the dev CA in dir/tls).
type secureNATS struct {
	*natscoord.Cluster
	conn  natscoord.ConnOptions // the options a client connects with
	flags []string              // the --nats-* flags a node connects with
}

func startSecureNATS(t *testing.T, dir string, ca *transport.DevCA) *secureNATS {
	t.Helper()
	caFile := filepath.Join(dir, "tls", transport.DevCACertFile)
	natsTLS, err := ca.ServerTLS("127.0.0.1", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	pwFile := filepath.Join(dir, "nats-password")
	if err := os.WriteFile(pwFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	nc, err := natscoord.StartCluster(3, filepath.Join(dir, "nats"), natscoord.ClusterOptions{
		Auth: natscoord.ServerAuth{User: "broadside", Password: "s3cret", TLS: natsTLS}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Shutdown)
	return &secureNATS{Cluster: nc, conn: natscoord.ConnOptions{User: "broadside", Password: "s3cret", CAFile: caFile},
		flags: []string{"--nats-user", "broadside", "--nats-password-file", pwFile, "--nats-ca", caFile}}
}

func natsCoord(t *testing.T, ctx context.Context, url string) coord.Coordinator {
	t.Helper()
	c, closeFn, err := (&clusterFlags{coordURL: url, clusterName: "broadside"}).openCoordinator(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeFn)
	return c
}

// mustMutualTLS returns TLS configs with a client certificate (role
// client): logd refuses certificates that prove no identity.
func mustMutualTLS(t *testing.T, ca *transport.DevCA) (server, client *tls.Config) {
	t.Helper()
	s, c, err := mesh.DevNodeTLS(ca, mesh.ClientIDBase, "localhost")
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

type appendRecord struct {
	data       string
	start, end time.Time
	acked      bool
}

// appendLoad is perClient goroutines per client appending distinct
// records until stopped, each record kept with its start, end and
// whether it was acknowledged.
type appendLoad struct {
	mu      sync.Mutex
	records []*appendRecord
	acked   atomic.Int64
	stop    chan struct{}
	wg      sync.WaitGroup
}

func startAppends(ctx context.Context, clients []*cmdlog.RemoteClient, perClient int) *appendLoad {
	l := &appendLoad{stop: make(chan struct{})}
	for c, rc := range clients {
		for g := range perClient {
			l.wg.Add(1)
			go func() {
				defer l.wg.Done()
				for i := 0; ; i++ {
					select {
					case <-l.stop:
						return
					default:
					}
					r := &appendRecord{data: fmt.Sprintf("c%d-g%d-%d", c, g, i), start: time.Now()}
					actx, acancel := context.WithTimeout(ctx, 20*time.Second)
					err := rc.Append(actx, []byte(r.data))
					acancel()
					r.end, r.acked = time.Now(), err == nil
					l.mu.Lock()
					l.records = append(l.records, r)
					l.mu.Unlock()
					if r.acked {
						l.acked.Add(1)
					}
				}
			}()
		}
	}
	return l
}

// waitAcked waits for n more acknowledged appends (after what), failing
// the test when ctx ends first.
func (l *appendLoad) waitAcked(t *testing.T, ctx context.Context, n int64, what string) {
	t.Helper()
	target := l.acked.Load() + n
	for l.acked.Load() < target {
		if ctx.Err() != nil {
			t.Fatalf("waiting for %d more acknowledged appends after %s: only %d in total", n, what, l.acked.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// finish stops the appends and returns every record.
func (l *appendLoad) finish() []*appendRecord {
	close(l.stop)
	l.wg.Wait()
	return l.records
}

// readWholeLog reads the log from position 1 to its tail: each record's
// position, how many records were there twice, and the tail.
func readWholeLog(t *testing.T, ctx context.Context, rc *cmdlog.RemoteClient) (pos map[string]uint64, duplicated int, tail uint64) {
	t.Helper()
	tail, err := rc.CheckTail(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sub := rc.Subscribe(1)
	pos = map[string]uint64{}
	for sub.Position() <= tail {
		e, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("read %d of %d: %v", sub.Position(), tail, err)
		}
		if _, dup := pos[string(e.Record.Data)]; dup {
			duplicated++
		}
		pos[string(e.Record.Data)] = e.Pos
	}
	return pos, duplicated, tail
}

// lostAcked counts the acknowledged records and those of them not in pos
// (naming the first few).
func lostAcked(t *testing.T, records []*appendRecord, pos map[string]uint64) (acked, lost int) {
	t.Helper()
	for _, r := range records {
		if r.acked {
			acked++
			if _, ok := pos[r.data]; !ok {
				lost++
				if lost < 5 {
					t.Errorf("acknowledged append %q lost", r.data)
				}
			}
		}
	}
	return acked, lost
}
