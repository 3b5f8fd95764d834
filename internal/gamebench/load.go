package gamebench

import (
	"fmt"
	"runtime"
	"time"

	"github.com/anoptic/broadside/internal/report"
)

// loadMeter measures how busy the machine and this process were over a
// run: on a shared machine the difference is the other load that
// competed with the benchmark (report.ProcessCPU and MachineBusy; where
// the machine's load is unknown it reports this process's only).
type loadMeter struct {
	start        time.Time
	cpu0         time.Duration
	busy0, tot0  uint64
	machineKnown bool
}

func startLoadMeter() *loadMeter {
	m := &loadMeter{start: time.Now(), cpu0: report.ProcessCPU()}
	m.busy0, m.tot0, m.machineKnown = report.MachineBusy()
	return m
}

// stop describes the load since start.
func (m *loadMeter) stop() string {
	own := float64(report.ProcessCPU()-m.cpu0) / float64(time.Since(m.start))
	busy, tot, ok := report.MachineBusy()
	if !ok || !m.machineKnown || tot <= m.tot0 {
		return fmt.Sprintf("cores busy in this process: %.2f", own)
	}
	all := float64(busy-m.busy0) / float64(tot-m.tot0) * float64(runtime.NumCPU())
	return fmt.Sprintf("cores busy on average: %.2f in all, %.2f in this process, %.2f elsewhere (other load competing)", all, own, max(all-own, 0))
}
