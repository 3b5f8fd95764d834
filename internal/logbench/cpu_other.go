//go:build !unix

package logbench

import "time"

// processCPU is not measured on this platform.
func processCPU() time.Duration { return 0 }

// machineBusy is not measured on this platform.
func machineBusy() (busy, total uint64, ok bool) { return 0, 0, false }
