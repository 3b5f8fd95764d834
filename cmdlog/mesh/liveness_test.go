package mesh

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/cmdlog/node"
	"github.com/anoptic/broadside/netcode/transport"
)

// livenessNode starts a crash-detecting mesh for node id with a dev
// identity from the CA in dir.
func livenessNode(t testing.TB, dir string, id msg.NodeID, certID msg.NodeID, peers map[msg.NodeID]string) (*Mesh, node.Inbox) {
	t.Helper()
	ca, err := transport.LoadOrCreateDevCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	srv, cli, err := DevNodeTLS(ca, certID, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	in := node.NewInbox()
	m, err := New(Config{Self: id, Peers: peers, ServerTLS: srv, ClientTLS: cli, Inbox: in, RequireIdentity: true, CrashDetect: true})
	if err != nil {
		t.Fatal(err)
	}
	return m, in
}

func waitWatches(t *testing.T, m *Mesh, n int32) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for m.watchesUp.Load() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d liveness connections up, want %d", m.watchesUp.Load(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitGone returns how long after start the inbox received PeerGone from
// peer, failing after limit.
func waitGone(t *testing.T, in node.Inbox, peer msg.NodeID, start time.Time, limit time.Duration) time.Duration {
	t.Helper()
	timeout := time.After(limit)
	for {
		select {
		case env := <-in.C():
			in.Took(env)
			if _, ok := env.Msg.(msg.PeerGone); ok {
				if env.From != peer {
					t.Fatalf("PeerGone from %d, want %d", env.From, peer)
				}
				return time.Since(start)
			}
		case <-timeout:
			t.Fatalf("no PeerGone from %d within %v", peer, limit)
		}
	}
}

// TestLivenessChild is the watched process of TestPeerGoneOnSIGKILL.
func TestLivenessChild(t *testing.T) {
	dir := os.Getenv("BROADSIDE_LIVENESS_CHILD")
	if dir == "" {
		t.Skip("the child process of TestPeerGoneOnSIGKILL")
	}
	m, _ := livenessNode(t, dir, 2, 2, nil)
	defer m.Close()
	os.Stdout.WriteString("addr " + m.Addr() + "\n")
	time.Sleep(time.Minute)
}

// TestPeerGoneOnSIGKILL: a replica's process is SIGKILLed; its peer's mesh
// reports msg.PeerGone within a second (a round trip on loopback), where
// the silence timeout would take SuspectTicks.
func TestPeerGoneOnSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process")
	}
	dir := t.TempDir()
	if _, err := transport.LoadOrCreateDevCA(dir); err != nil {
		t.Fatal(err)
	}
	child := exec.Command(os.Args[0], "-test.run=^TestLivenessChild$")
	child.Env = append(os.Environ(), "BROADSIDE_LIVENESS_CHILD="+dir)
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer child.Process.Kill()
	var addr string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if a, ok := strings.CutPrefix(sc.Text(), "addr "); ok {
			addr = a
			break
		}
	}
	if addr == "" {
		t.Fatal("the child printed no address")
	}
	m, in := livenessNode(t, dir, 1, 1, map[msg.NodeID]string{2: addr})
	defer m.Close()
	waitWatches(t, m, 1)
	start := time.Now()
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	d := waitGone(t, in, 2, start, time.Second)
	t.Logf("PeerGone %v after the SIGKILL", d)
	if got := m.PeerGoneReports(); got != 1 {
		t.Fatalf("%d reports, want 1", got)
	}
}

// TestPeerGoneOnClose: a peer whose mesh closes is reported once; a
// listener that presents another node's certificate at the peer's address
// is never trusted, so its going away reports nothing; junk on the
// liveness port is closed without harm.
func TestPeerGoneOnClose(t *testing.T) {
	dir := t.TempDir()
	b, _ := livenessNode(t, dir, 2, 2, nil)
	impostor, _ := livenessNode(t, dir, 3, 3, nil) // node 3's certificate
	a, in := livenessNode(t, dir, 1, 1, map[msg.NodeID]string{2: b.Addr(), 4: impostor.Addr()})
	defer a.Close()
	waitWatches(t, a, 1) // node 2 only: node "4" cannot prove it is 4

	// Junk on a's liveness port: closed after the handshake fails.
	c, err := net.Dial("tcp", a.Addr())
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 64)); err == nil {
		// A TLS alert may come first; the connection must then end.
		if _, err := c.Read(make([]byte, 64)); err == nil {
			t.Fatal("junk on the liveness port kept the connection open")
		}
	}
	c.Close()

	impostor.Close()
	b.Close()
	waitGone(t, in, 2, time.Now(), 2*time.Second)
	time.Sleep(100 * time.Millisecond)
	if got := a.PeerGoneReports(); got != 1 {
		t.Fatalf("%d reports, want 1 (the impostor's close must not count)", got)
	}
}
