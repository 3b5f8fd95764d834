//go:build !unix

package report

import "time"

// ProcessCPU is not measured on this platform.
func ProcessCPU() time.Duration { return 0 }

// MachineBusy is not measured on this platform.
func MachineBusy() (busy, total uint64, ok bool) { return 0, 0, false }
