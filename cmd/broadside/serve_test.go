package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/anoptic/broadside/demo/bots"
)

// lockedOutput reads a process's output file.
type lockedOutput struct {
	f *os.File
}

func (l lockedOutput) String() string {
	b, _ := os.ReadFile(l.f.Name())
	return string(b)
}

// TestServeAndBotsProcesses is the README's two-terminal setup as real
// processes: 'broadside serve --dev' and 'broadside bots'. It checks that
// every command is acknowledged and seen applied in state updates, that
// SIGINT shuts the server down gracefully with a final snapshot, and that
// a restarted server resumes the same world from its data directory (with
// the default fsync durability; a memory-durability restart of it is refused, checked too).
func TestServeAndBotsProcesses(t *testing.T) {
	dir := t.TempDir()
	port := freeUDPPort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	admin := l.Addr().String()
	l.Close()
	serveArgs := []string{"serve", "--dev", "--listen", addr, "--admin-addr", admin,
		"--tls-dir", filepath.Join(dir, "tls"), "--secret-file", filepath.Join(dir, "server.secret"), "--data", filepath.Join(dir, "data")}
	runServer := func(name string) (*exec.Cmd, lockedOutput) {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(os.Args[0], serveArgs...)
		cmd.Env = append(os.Environ(), "BROADSIDE_TEST_MAIN=1")
		cmd.Stdout, cmd.Stderr = f, f
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		out := lockedOutput{f}
		deadline := time.Now().Add(30 * time.Second)
		for !bytes.Contains([]byte(out.String()), []byte("listening on")) {
			if time.Now().After(deadline) {
				t.Fatalf("server did not start:\n%s", out)
			}
			time.Sleep(20 * time.Millisecond)
		}
		return cmd, out
	}
	runBots := func(n int, d time.Duration) bots.Report {
		jsonFile := filepath.Join(dir, "bots.json")
		cmd := exec.Command(os.Args[0], "bots", "--server", addr, "--ca", filepath.Join(dir, "tls", "ca.pem"),
			"--secret-file", filepath.Join(dir, "server.secret"), "--n", strconv.Itoa(n), "--rate", "10",
			"--duration", d.String(), "--json", jsonFile)
		cmd.Env = append(os.Environ(), "BROADSIDE_TEST_MAIN=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("bots: %v\n%s", err, out)
		}
		t.Logf("bots:\n%s", out)
		var rep bots.Report
		b, err := os.ReadFile(jsonFile)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &rep); err != nil {
			t.Fatal(err)
		}
		return rep
	}
	stop := func(cmd *exec.Cmd, out lockedOutput) uint64 {
		cmd.Process.Signal(syscall.SIGINT)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("server exited with %v:\n%s", err, out)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("server did not stop after SIGINT:\n%s", out)
		}
		m := regexp.MustCompile(`final snapshot of every sector stored at tick (\d+)`).FindStringSubmatch(out.String())
		if m == nil {
			t.Fatalf("no final snapshot reported:\n%s", out)
		}
		tick, _ := strconv.ParseUint(m[1], 10, 64)
		return tick
	}

	srv, out := runServer("serve1.log")
	rep := runBots(6, 3*time.Second)
	if rep.Sent == 0 || rep.Durable != rep.Sent || len(rep.Errors) != 0 {
		t.Fatalf("bots: %d sent, %d durable, errors %v", rep.Sent, rep.Durable, rep.Errors)
	}
	if rep.Applied < rep.Sent/2 || rep.UpdatesPerSec < 10 || rep.DownBytesPerSec <= 0 {
		t.Fatalf("state did not flow: %d applied of %d, %.1f updates/s, %.0f B/s down", rep.Applied, rep.Sent, rep.UpdatesPerSec, rep.DownBytesPerSec)
	}
	// Lineage queries against the running server.
	cmd := exec.Command(os.Args[0], "lineage", "info", "--server", "http://"+admin)
	cmd.Env = append(os.Environ(), "BROADSIDE_TEST_MAIN=1")
	b, err := cmd.CombinedOutput()
	if err != nil || !regexp.MustCompile(`(\d+) input records`).Match(b) || bytes.Contains(b, []byte(" 0 input records")) {
		t.Fatalf("lineage info --server: %v\n%s", err, b)
	}
	t.Logf("lineage info --server: %s", b)
	// A recording of the running match, exported through the admin
	// address, verifies.
	rec := filepath.Join(dir, "live.bsr")
	for _, args := range [][]string{
		{"replay", "export", "--server", admin, "-o", rec, "--no-progress"},
		{"replay", "verify", rec, "--no-progress"},
	} {
		cmd = exec.Command(os.Args[0], args...)
		cmd.Env = append(os.Environ(), "BROADSIDE_TEST_MAIN=1")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, b)
		}
	}
	first := stop(srv, out)

	// A restarted server continues the same world where it stopped.
	srv, out = runServer("serve2.log")
	rep = runBots(3, 2*time.Second)
	if rep.Durable != rep.Sent || rep.Applied == 0 {
		t.Fatalf("after restart: %d sent, %d durable, %d applied, errors %v", rep.Sent, rep.Durable, rep.Applied, rep.Errors)
	}
	second := stop(srv, out)
	if second <= first {
		t.Fatalf("restarted world stopped at tick %d, not after %d", second, first)
	}
	// In memory durability the same directory is refused with a clear
	// error: its mode cannot change.
	args := append(append([]string(nil), serveArgs...), "--durability", "memory")
	cmd = exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "BROADSIDE_TEST_MAIN=1")
	if b, err := cmd.CombinedOutput(); err == nil || !bytes.Contains(b, []byte("restart it with --durability fsync")) {
		t.Fatalf("serve --durability memory on an fsync directory: %v\n%s", err, b)
	}
}
