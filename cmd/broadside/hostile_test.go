package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anoptic/broadside/cmdlog"
	"github.com/anoptic/broadside/cmdlog/mesh"
	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/internal/hostile"
	"github.com/anoptic/broadside/internal/report"
	"github.com/anoptic/broadside/netcode/server"
	"github.com/anoptic/broadside/netcode/transport"
	"github.com/anoptic/broadside/netcode/wire"
)

// The hostile suite's bounds (issue 16): the good player's acknowledgement
// p99 during the attacks, the game server's RSS growth over the attacks,
// and a tool's peak RSS on a hostile file (the decoders' budgets: a
// decoded chunk at most 64 MiB, a lineage range's raw body at most its
// declared length).
const (
	hostileP99     = 50 * time.Millisecond
	hostileRSS     = 64 << 20
	hostileToolRSS = 128 << 20
	// hostileSaturated is the machine CPU use over the attacks from which
	// the p99 bound is not asserted (the good player then waits for a CPU).
	hostileSaturated = 0.95
	// hostileShared is the machine CPU use in the second before the
	// attacks (the cluster idling, the good player playing) from which the
	// machine counts as shared with other work, and the bound is not
	// asserted either.
	hostileShared = 0.5
)

// TestHostileRealProcesses is the hostile suite: a log cluster of five
// logd processes (3 sequencing replicas, 2 shards, mutual TLS with node
// identities) and 'broadside serve' on it as a separate process, attacked
// by every attack class of issue 16 while a good player plays. Each
// attack must be refused with a visible error; the good player's every
// command acknowledged (p99 under hostileP99 during the attacks); the
// server's RSS growth under hostileRSS; and the log unchanged but for
// what was acknowledged: its prefix from before the attacks hashes the
// same after them, every acknowledged command is in it once, and the
// attacker's commands in it are those its rate limit let through (at
// least those it was acknowledged); and the match's recording verifies.
func TestHostileRealProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes; skipped with -short")
	}
	dir := t.TempDir()
	ns := startNATS(t, dir)
	logTLS := filepath.Join(dir, "logtls")
	if _, err := transport.LoadOrCreateDevCA(logTLS); err != nil {
		t.Fatal(err)
	}
	var procs []*proc
	defer func() {
		for _, p := range procs {
			p.kill()
		}
	}()
	logf := func(name string) *os.File {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	metricsAddrs := map[msg.NodeID]string{}
	lc := startLogCluster(t, dir, func(id msg.NodeID) []string {
		metricsAddrs[id] = freeTCPAddr(t)
		return []string{"--tls-dir", logTLS, "--coord", ns.ClientURL(), "--tick", "10ms", "--suspect-ticks", "50", "--metrics-addr", metricsAddrs[id]}
	})
	peers, peerFlag := lc.peers, lc.peerFlag
	for i := 0; ; i++ {
		if _, err := os.Stat(filepath.Join(logTLS, mesh.DevClientFile)); err == nil {
			break
		}
		if i > 1000 {
			t.Fatal("no log node issued client.pem")
		}
		time.Sleep(10 * time.Millisecond)
	}
	tool := hostile.ToolCommand(os.Args[0], "BROADSIDE_TEST_MAIN=1")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// The operator issues a log client certificate that may not trim.
	reader := filepath.Join(dir, "reader.pem")
	if out, _, err := tool(ctx, "cert", "--ca-dir", logTLS, "--role", "client", "--cert", reader, "--key", filepath.Join(dir, "reader-key.pem")); err != nil {
		t.Fatalf("broadside cert: %v: %s", err, out)
	}

	// The game server on the cluster, with its admin endpoint behind a
	// bearer token, recording the match.
	addr := fmt.Sprintf("127.0.0.1:%d", freeUDPPort(t))
	adminAddr := freeTCPAddr(t)
	adminToken := make([]byte, 16)
	rand.Read(adminToken)
	tokenFile := filepath.Join(dir, "admin.token")
	if err := os.WriteFile(tokenFile, []byte(hex.EncodeToString(adminToken)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	serveLog := logf("serve.log")
	serve := &proc{log: serveLog, args: []string{"serve", "--dev", "--tls-dir", filepath.Join(dir, "tls"), "--listen", addr,
		"--admin-addr", adminAddr, "--admin-token-file", tokenFile, "--secret-file", filepath.Join(dir, "server.secret"),
		"--data", filepath.Join(dir, "data"), "--record", filepath.Join(dir, "match.bsr"),
		"--sectors", "2", "--world-size", "2000", "--islands", "4",
		"--log", "--log-peers", peerFlag, "--log-coord", ns.ClientURL(), "--log-tls-dir", logTLS, "--log-tick", "10ms"}}
	serve.start(t)
	procs = append(procs, serve)
	waitLogged(t, serveLog.Name(), "listening on", 3000)
	pid := serve.cmd.Process.Pid
	secret, err := server.LoadOrCreateSecret(filepath.Join(dir, "server.secret"))
	if err != nil {
		t.Fatal(err)
	}
	playerTLS, err := transport.ClientTLS(filepath.Join(dir, "tls", transport.DevCACertFile))
	if err != nil {
		t.Fatal(err)
	}
	playerTLS.ServerName = "localhost"
	playerTLS.NextProtos = []string{wire.ALPN}

	const goodID, attackerID = 1, 2
	goodToken, err := server.IssueToken(secret, server.Claims{Player: "good", PlayerID: goodID, Audience: server.AudiencePlayer,
		Expires: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	good := startGoodPlayer(t, addr, filepath.Join(dir, "tls", transport.DevCACertFile), goodToken, 25*time.Millisecond)
	// Warm up: the world ticks, the good player is acknowledged.
	time.Sleep(3 * time.Second)

	clientTLS, err := mesh.LoadDevClientTLS(logTLS)
	if err != nil {
		t.Fatal(err)
	}
	readerTLS, err := loadClientCert(filepath.Join(logTLS, transport.DevCACertFile), reader, filepath.Join(dir, "reader-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	co := natsCoord(t, ctx, ns.ClientURL())
	rc := lc.dial(t, co, clientTLS)
	tail0, err := rc.CheckTail(ctx)
	if err != nil {
		t.Fatal(err)
	}
	prefix0, _ := hashLog(t, ctx, rc, tail0)
	view0, _, err := co.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	admin := hostile.AdminTarget{Addr: adminAddr, Token: hex.EncodeToString(adminToken)}
	if err := admin.Check(ctx); err != nil {
		t.Fatal(err)
	}

	players := &hostile.PlayerTarget{Addr: addr, TLS: playerTLS, Secret: secret, Attacker: attackerID, Victim: goodID, VictimToken: goodToken}
	files := &hostile.FileTarget{Tool: tool, Dir: filepath.Join(dir, "hostile"), Recording: filepath.Join(dir, "match.bsr"), MaxRSS: hostileToolRSS}
	if err := os.MkdirAll(files.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := files.Prepare(); err != nil {
		t.Fatal(err)
	}
	logs := hostile.LogTarget{Peers: peers, ClientTLS: clientTLS, ReaderTLS: readerTLS}
	var attacks []hostile.Attack
	attacks = append(attacks, players.PlayerAttacks()...)
	attacks = append(attacks, admin.AdminAttacks()...)
	attacks = append(attacks, logs.LogAttacks()...)
	attacks = append(attacks, files.FileAttacks()...)

	rss0, err := hostile.RSS(pid)
	if err != nil {
		t.Fatal(err)
	}
	sampler := hostile.SampleRSS(pid, 50*time.Millisecond)
	base0, baseTotal0, _ := report.MachineBusy()
	time.Sleep(time.Second)
	busy0, total0, _ := report.MachineBusy()
	baseline := float64(busy0-base0) / float64(max(1, total0-baseTotal0))
	cpu0, _ := hostile.ProcessCPU(pid)
	start := time.Now()
	outcomes := hostile.Run(ctx, attacks, 30*time.Second, t.Logf)
	end := time.Now()
	window := end.Sub(start)
	busy1, total1, _ := report.MachineBusy()
	cpu1, _ := hostile.ProcessCPU(pid)
	machineBusy := float64(busy1-busy0) / float64(max(1, total1-total0))
	peak, samples, err := sampler.Stop()
	if err != nil {
		t.Fatalf("sampling the server's RSS: %v", err)
	}
	time.Sleep(time.Second) // the good player keeps playing after the attacks
	played := good.stop(t)
	gr := played.Report(start, end)

	// What the log holds now.
	tail1, err := rc.CheckTail(ctx)
	if err != nil {
		t.Fatal(err)
	}
	prefix1, _ := hashLog(t, ctx, rc, tail0)
	_, byPlayer := hashLog(t, ctx, rc, tail1)
	view1, _, err := co.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The log nodes counted the refusals of their links.
	var identityRejects, forbidden float64
	for _, id := range logNodeIDs {
		m := scrapeMetrics(t, metricsAddrs[id])
		identityRejects += m["broadside_mesh_identity_rejects_total"]
		forbidden += m["broadside_mesh_forbidden_total"]
	}
	// The match's recording, written from the log while the attacks ran,
	// re-simulates to the state hashes the server recorded.
	verifyOut, _, verifyErr := tool(ctx, "replay", "verify", filepath.Join(dir, "match.bsr"))
	verified := verifyErr == nil && strings.Contains(verifyOut, "every state hash matches")
	lost := 0
	for _, seq := range gr.AckedSeqs {
		if byPlayer[goodID][seq] == 0 {
			lost++
		}
	}
	duplicated := 0
	for _, seqs := range byPlayer {
		for _, n := range seqs {
			duplicated += max(0, n-1)
		}
	}
	attackerStored := len(byPlayer[attackerID])
	others := 0
	for p, seqs := range byPlayer {
		if p != goodID && p != attackerID {
			others += len(seqs)
		}
	}
	n, rejected, classes := hostile.Count(outcomes)
	growth := peak - rss0
	line := fmt.Sprintf("hostile: %d attacks, %d rejected, good client p99 %.1f ms, rss +%.1f MiB, %d lost",
		n, rejected, float64(gr.P99)/1e6, float64(growth)/(1<<20), lost)
	fmt.Println(line)
	fmt.Printf("hostile: %d attack classes; good client %d commands sent, %d acknowledged, %d refused, %d unanswered; "+
		"during the attacks %d commands, p50 %.1f ms, p99 %.1f ms, max %.1f ms (bound p99 < %v)\n",
		classes, gr.Sent, gr.Acked, gr.Refused, gr.Unanswered, gr.InWindow, float64(gr.P50)/1e6, float64(gr.P99)/1e6, float64(gr.Max)/1e6, hostileP99)
	fmt.Printf("hostile: %.0f%% of the machine's CPUs busy in the second before the attacks\n", 100*baseline)
	fmt.Printf("hostile: attacks took %.1f s; the server used %.0f%% of a CPU, the machine's CPUs were %.0f%% busy (load average %s)\n",
		window.Seconds(), 100*(cpu1-cpu0).Seconds()/window.Seconds(), 100*machineBusy, loadAverage())
	fmt.Printf("hostile: server RSS %.1f MiB before the attacks, peak %.1f MiB over %d samples (bound +%d MiB); tools' peak RSS on hostile files %.1f MiB (bound %d MiB)\n",
		float64(rss0)/(1<<20), float64(peak)/(1<<20), samples, hostileRSS>>20, float64(files.PeakRSS())/(1<<20), hostileToolRSS>>20)
	fmt.Printf("hostile: the log nodes counted %.0f links refused for a claimed id, %.0f for a message a client may not send\n", identityRejects, forbidden)
	fmt.Printf("hostile: the recording verifies (replay verify): %v: %s\n", verified, lastLine(verifyOut))
	fmt.Printf("hostile: log prefix of %d positions unchanged: %v; %d positions after; attacker commands stored %d (acknowledged %d, rate limit allows %d); view %d -> %d\n",
		tail0, prefix0 == prefix1, tail1, attackerStored, players.AttackerAcks(), players.AttackerLimit(), view0.Number, view1.Number)
	for _, o := range outcomes {
		if !o.Rejected {
			fmt.Println("hostile: NOT REJECTED: " + o.String())
		}
		// The good player's commands sent during the attack (and the
		// second after it): the attack that slowed it, if one did.
		if sent, worst := played.Worst(o.Start, o.Start.Add(o.Took+time.Second)); worst > hostileP99/2 || testing.Verbose() {
			t.Logf("good player during %q: %d commands, worst acknowledgement %v", o.Name, sent, worst.Round(100*time.Microsecond))
		}
	}
	t.Log(line)

	if rejected != n {
		t.Errorf("%d of %d attacks not rejected", n-rejected, n)
	}
	if classes != 11 {
		t.Errorf("%d attack classes, want the 11 of issue 16", classes)
	}
	for _, seq := range gr.UnansweredSeqs {
		sent := played.SentAt(seq)
		fmt.Printf("hostile: good command %d (sent %s) never answered; in the log %d times\n", seq, sent.Format("15:04:05.000"), byPlayer[goodID][seq])
	}
	if gr.Err != "" || gr.Unanswered > 0 || gr.Refused > 0 || gr.Acked == 0 {
		t.Errorf("good player: %d sent, %d acknowledged, %d refused, %d unanswered, session error %v", gr.Sent, gr.Acked, gr.Refused, gr.Unanswered, gr.Err)
	}
	// The bound is the server's: on a machine whose CPUs were saturated
	// (by other work: the server itself uses a fraction of one) the good
	// player waits for a CPU, and its p99 says nothing of the server: it
	// is printed, not asserted.
	switch {
	case machineBusy >= hostileSaturated:
		fmt.Printf("hostile: p99 bound %v NOT ASSERTED: the machine's CPUs were %.0f%% busy during the attacks\n", hostileP99, 100*machineBusy)
	case baseline >= hostileShared:
		fmt.Printf("hostile: p99 bound %v NOT ASSERTED: the machine's CPUs were %.0f%% busy before the attacks (shared with other work)\n", hostileP99, 100*baseline)
	case gr.P99 >= hostileP99:
		t.Errorf("good player's acknowledgement p99 %v during the attacks, bound %v", gr.P99, hostileP99)
	}
	if growth > hostileRSS {
		t.Errorf("server RSS grew %d MiB during the attacks, bound %d MiB", growth>>20, hostileRSS>>20)
	}
	if lost > 0 || duplicated > 0 {
		t.Errorf("%d acknowledged commands lost, %d duplicated", lost, duplicated)
	}
	if prefix0 != prefix1 {
		t.Error("the log's prefix from before the attacks changed")
	}
	if identityRejects < 2 || forbidden < 3+2+2+2 {
		t.Errorf("the log nodes counted %.0f identity rejects and %.0f forbidden client messages", identityRejects, forbidden)
	}
	if !verified {
		t.Errorf("replay verify of the match's recording: %v\n%s", verifyErr, verifyOut)
	}
	if a := int64(attackerStored); a < players.AttackerAcks() || a > players.AttackerLimit() || others > 0 {
		t.Errorf("the log holds %d commands of the attacker (acknowledged %d, the rate limit allows %d) and %d of unknown players",
			attackerStored, players.AttackerAcks(), players.AttackerLimit(), others)
	}
	if view1.Number >= 1<<40 || view1.Number < view0.Number {
		t.Errorf("view %d -> %d", view0.Number, view1.Number)
	}
	if b, _ := os.ReadFile(serveLog.Name()); regexp.MustCompile(`panic|fatal error`).Match(b) {
		t.Errorf("serve log:\n%s", b)
	}
	if t.Failed() {
		b, _ := os.ReadFile(serveLog.Name())
		lines := strings.Split(string(b), "\n")
		t.Logf("serve log tail:\n%s", strings.Join(lines[max(0, len(lines)-30):], "\n"))
	}
}

// TestHostileGoodPlayer is the hostile suite's good player, in a process
// of its own (TestHostileRealProcesses starts it): it plays until its
// stdin ends and prints what it played.
func TestHostileGoodPlayer(t *testing.T) {
	if os.Getenv("BROADSIDE_HOSTILE_PLAYER") != "1" {
		t.Skip("the good player of TestHostileRealProcesses (its child process)")
	}
	if err := hostile.GoodPlayerMain(os.Stdin, os.Stdout); err != nil {
		t.Fatal(err)
	}
}

// goodPlayer is the good player's process.
type goodPlayer struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
}

// startGoodPlayer starts the good player's process and waits until it
// plays.
func startGoodPlayer(t *testing.T, addr, caFile, token string, interval time.Duration) *goodPlayer {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHostileGoodPlayer$", "-test.count=1")
	cmd.Env = append(os.Environ(), "BROADSIDE_HOSTILE_PLAYER=1", hostile.EnvGoodAddr+"="+addr, hostile.EnvGoodCA+"="+caFile,
		hostile.EnvGoodToken+"="+token, hostile.EnvGoodInterval+"="+interval.String())
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	g := &goodPlayer{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout)}
	for {
		line, err := g.out.ReadString('\n')
		if err != nil {
			t.Fatalf("the good player did not start: %v (%q)", err, line)
		}
		if strings.TrimSpace(line) == "playing" {
			return g
		}
	}
}

// stop ends the good player's play and returns what it played.
func (g *goodPlayer) stop(t *testing.T) hostile.Played {
	t.Helper()
	g.stdin.Close()
	for {
		line, err := g.out.ReadString('\n')
		if strings.HasPrefix(line, "{") {
			var p hostile.Played
			if err := json.Unmarshal([]byte(line), &p); err != nil {
				t.Fatalf("the good player's report: %v", err)
			}
			return p
		}
		if err != nil {
			t.Fatalf("the good player ended without a report: %v", err)
		}
	}
}

// hashLog reads positions 1..tail and returns their hash (position,
// record id, data) and the player commands they hold: for each player,
// how many times each client sequence number occurs.
func hashLog(t *testing.T, ctx context.Context, rc *cmdlog.RemoteClient, tail uint64) ([32]byte, map[uint32]map[uint64]int) {
	t.Helper()
	h := sha256.New()
	byPlayer := map[uint32]map[uint64]int{}
	sub := rc.Subscribe(1)
	var b [8]byte
	for sub.Position() <= tail {
		rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		e, err := sub.Next(rctx)
		cancel()
		if err != nil {
			t.Fatalf("read %d of %d: %v", sub.Position(), tail, err)
		}
		for _, v := range []uint64{e.Pos, e.Record.ID.Client, e.Record.ID.Seq, uint64(len(e.Record.Data))} {
			binary.BigEndian.PutUint64(b[:], v)
			h.Write(b[:])
		}
		h.Write(e.Record.Data)
		env, err := wire.DecodeEnvelope(e.Record.Data)
		if err != nil || env.Kind != wire.EnvelopePlayerCommand {
			continue
		}
		if byPlayer[env.Player] == nil {
			byPlayer[env.Player] = map[uint64]int{}
		}
		byPlayer[env.Player][env.ClientSeq]++
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum, byPlayer
}

// scrapeMetrics returns the unlabelled samples of a /metrics endpoint.
func scrapeMetrics(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("metrics of %s: %v", addr, err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") || strings.Contains(name, "{") {
			continue
		}
		if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
			out[name] = f
		}
	}
	return out
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// loadAverage is the first three fields of /proc/loadavg.
func loadAverage() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

// loadClientCert returns a log client's TLS config with the certificate
// and key files (as 'broadside cert' writes them).
func loadClientCert(caFile, certFile, keyFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	cli, err := transport.ClientTLS(caFile)
	if err != nil {
		return nil, err
	}
	return transport.WithClientCert(cli, cert), nil
}
