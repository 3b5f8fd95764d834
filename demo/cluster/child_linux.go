package cluster

import (
	"os/exec"
	"syscall"
)

// orphanProof makes cmd's process die with the demo: the kernel sends it
// SIGKILL when the demo's process ends, even by SIGKILL, so an interrupted
// `demo --cluster` leaves no NATS, logd or worker processes behind.
func orphanProof(cmd *exec.Cmd) *exec.Cmd {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}
