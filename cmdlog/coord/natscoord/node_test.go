package natscoord

import (
	"crypto/tls"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/anoptic/broadside/netcode/transport"
)

// TestStartNodeCluster starts 3 nodes one by one, as 3 'broadside nats'
// processes would, routed by address lists that include each node's own;
// they must form one JetStream cluster that holds an R3 bucket, and keep
// it after one node stops and restarts on its store directory.
func TestStartNodeCluster(t *testing.T) {
	dir := t.TempDir()
	ports, err := freePorts(6)
	if err != nil {
		t.Fatal(err)
	}
	var routes []string
	for i := range 3 {
		routes = append(routes, fmt.Sprintf("127.0.0.1:%d", ports[3+i]))
	}
	opts := func(i int) NodeOptions {
		return NodeOptions{Name: fmt.Sprintf("n%d", i+1), Port: ports[i], StoreDir: filepath.Join(dir, fmt.Sprint(i)),
			ClusterPort: ports[3+i], Routes: routes, Auth: ServerAuth{User: "u", Password: "p"}}
	}
	var nodes []*Embedded
	defer func() {
		for _, n := range nodes {
			n.Shutdown()
		}
	}()
	for i := range 3 {
		n, err := StartNode(opts(i))
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	waitJetStream(t, nodes, "after 30 s")
	if r := nodes[0].RouteCount(); r < 2 {
		t.Fatalf("node 1 has %d routes, want 2 (it must not route to itself)", r)
	}
	url := fmt.Sprintf("nats://127.0.0.1:%d,nats://127.0.0.1:%d,nats://127.0.0.1:%d", ports[0], ports[1], ports[2])
	nc, err := Connect(url, ConnOptions{User: "u", Password: "p"})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	kv := r3Bucket(t, nc, "node-test")
	if _, err := kv.Put(opCtx(t), "k", []byte("v1")); err != nil {
		t.Fatal(err)
	}
	nodes[2].Shutdown()
	if _, err := kv.Put(opCtx(t), "k", []byte("v2")); err != nil {
		t.Fatalf("put with one node of three down: %v", err)
	}
	if nodes[2], err = StartNode(opts(2)); err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(opCtx(t), "k")
	if err != nil || string(e.Value()) != "v2" {
		t.Fatalf("get after the restart: %v %v", e, err)
	}
	if _, err := StartNode(NodeOptions{Name: "x", Host: "0.0.0.0", Port: ports[0] + 1, StoreDir: dir, ClusterPort: 1,
		Auth: ServerAuth{User: "u", Password: "p"}}); err == nil {
		t.Fatal("routes beyond loopback without route credentials: started")
	}
}

// TestStartNodeRouteTLS: 3 nodes whose routes are mutual TLS (NodeSpec
// RouteTLS, certificates from one development CA) form a JetStream
// cluster that holds an R3 bucket; a node whose route certificate comes
// from another CA, and a node without route TLS, get no route to them.
func TestStartNodeRouteTLS(t *testing.T) {
	dir := t.TempDir()
	ports, err := freePorts(10)
	if err != nil {
		t.Fatal(err)
	}
	var routes []string
	for i := range 3 {
		routes = append(routes, fmt.Sprintf("127.0.0.1:%d", ports[5+i]))
	}
	var nodes []*Embedded
	defer func() {
		for _, n := range nodes {
			n.Shutdown()
		}
	}()
	for i := range 3 {
		o, err := NodeSpec{Name: fmt.Sprintf("n%d", i+1), Listen: fmt.Sprintf("127.0.0.1:%d", ports[i]), ClusterListen: routes[i],
			Routes: strings.Join(routes, ","), StoreDir: filepath.Join(dir, fmt.Sprint(i)), RouteTLS: true,
			TLSDir: filepath.Join(dir, "tls")}.Options()
		if err != nil {
			t.Fatal(err)
		}
		if o.RouteTLS == nil || o.RouteTLS.ClientAuth != tls.RequireAndVerifyClientCert {
			t.Fatalf("route TLS %+v", o.RouteTLS)
		}
		n, err := StartNode(o)
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	waitJetStream(t, nodes, "over TLS routes after 30 s")
	nc, err := Connect(fmt.Sprintf("nats://127.0.0.1:%d", ports[0]), ConnOptions{CAFile: filepath.Join(dir, "tls", transport.DevCACertFile)})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	kv := r3Bucket(t, nc, "route-tls")
	if _, err := kv.Put(opCtx(t), "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	before := nodes[0].RouteCount()

	// Outsiders: a route certificate of another CA, and no route TLS.
	other, err := transport.NewDevCA()
	if err != nil {
		t.Fatal(err)
	}
	cert, err := other.Issue("x")
	if err != nil {
		t.Fatal(err)
	}
	for i, rt := range []*tls.Config{RouteTLSConfig(cert, other.Pool()), nil} {
		x, err := StartNode(NodeOptions{Name: fmt.Sprintf("x%d", i), Port: ports[3+i], StoreDir: filepath.Join(dir, fmt.Sprint("x", i)),
			ClusterPort: ports[8+i], Routes: routes, RouteTLS: rt})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		got := x.RouteCount()
		x.Shutdown()
		if got != 0 || nodes[0].RouteCount() != before {
			t.Fatalf("outsider %d (route TLS %v) has %d routes; node 1 %d, before %d", i, rt != nil, got, nodes[0].RouteCount(), before)
		}
	}
}

// waitJetStream waits up to 30 s for every node to see a JetStream meta
// leader (how ends the failure's message).
func waitJetStream(t *testing.T, nodes []*Embedded, how string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, n := range nodes {
		for !n.JetStreamReady() {
			if time.Now().After(deadline) {
				t.Fatalf("no JetStream meta leader %s", how)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// r3Bucket creates a file-backed KV bucket of 3 replicas through nc.
func r3Bucket(t *testing.T, nc *nats.Conn, name string) jetstream.KeyValue {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.CreateKeyValue(opCtx(t), jetstream.KeyValueConfig{Bucket: name, Replicas: 3, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	return kv
}
