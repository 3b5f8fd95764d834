package cluster

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// TestOrphanProofChildDiesWithParent starts this test binary as a parent
// that starts `sleep 60` through orphanProof and prints its pid, SIGKILLs
// the parent and expects the child gone.
func TestOrphanProofChildDiesWithParent(t *testing.T) {
	if os.Getenv("BROADSIDE_ORPHAN_PARENT") == "1" {
		child := orphanProof(exec.Command("sleep", "60"))
		if err := child.Start(); err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println(child.Process.Pid)
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	if _, err := exec.LookPath("sleep"); err != nil {
		t.Skip("no sleep command")
	}
	parent := exec.Command(os.Args[0], "-test.run=^TestOrphanProofChildDiesWithParent$")
	parent.Env = append(os.Environ(), "BROADSIDE_ORPHAN_PARENT=1")
	out, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		parent.Process.Kill()
		t.Fatalf("parent printed nothing: %v", err)
	}
	pid, err := strconv.Atoi(line[:len(line)-1])
	if err != nil {
		parent.Process.Kill()
		t.Fatalf("parent printed %q", line)
	}
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("child %d not running before the kill: %v", pid, err)
	}
	parent.Process.Kill()
	parent.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for {
		// The child is reparented to init (or a subreaper) and reaped
		// there; until then it may linger as a zombie, so read its state.
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil || zombie(b) {
			return
		}
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("child %d still running 5 s after its parent's SIGKILL", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// zombie reports whether a /proc/PID/stat line says the process has
// exited and awaits its reaper (state Z or X, after the ')' of its name).
func zombie(stat []byte) bool {
	for i := len(stat) - 1; i >= 0; i-- {
		if stat[i] == ')' {
			return i+2 < len(stat) && (stat[i+2] == 'Z' || stat[i+2] == 'X')
		}
	}
	return false
}
