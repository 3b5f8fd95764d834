package gamebench

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// loadMeter measures how busy the machine and this process were over a
// run: on a shared machine the difference is the other load that
// competed with the benchmark. (A copy of internal/logbench's unexported
// helpers, Linux only: elsewhere it reports nothing.)
type loadMeter struct {
	start        time.Time
	cpu0         time.Duration
	busy0, tot0  uint64
	machineKnown bool
}

func startLoadMeter() *loadMeter {
	m := &loadMeter{start: time.Now(), cpu0: processCPU()}
	m.busy0, m.tot0, m.machineKnown = machineBusy()
	return m
}

// stop describes the load since start.
func (m *loadMeter) stop() string {
	own := float64(processCPU()-m.cpu0) / float64(time.Since(m.start))
	busy, tot, ok := machineBusy()
	if !ok || !m.machineKnown || tot <= m.tot0 {
		return fmt.Sprintf("cores busy in this process: %.2f", own)
	}
	all := float64(busy-m.busy0) / float64(tot-m.tot0) * float64(runtime.NumCPU())
	return fmt.Sprintf("cores busy on average: %.2f in all, %.2f in this process, %.2f elsewhere (other load competing)", all, own, max(all-own, 0))
}

// processCPU returns the CPU time (user + system) this process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// machineBusy returns the busy and total CPU time of the machine from
// /proc/stat (ok false where it does not exist).
func machineBusy() (busy, total uint64, ok bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0, 0, false
	}
	for i, s := range f[1:] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, 0, false
		}
		if i >= 8 {
			break
		}
		total += v
		if i != 3 && i != 4 {
			busy += v
		}
	}
	return busy, total, true
}
