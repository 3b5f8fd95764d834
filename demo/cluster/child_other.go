//go:build !linux

package cluster

import "os/exec"

// orphanProof is a no-op where the kernel cannot tie a child's life to
// its parent's: an interrupted demo's processes are stopped by Close only.
func orphanProof(cmd *exec.Cmd) *exec.Cmd { return cmd }
