package bsr

import (
	"fmt"
	"os"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

// forensics counts what the forensics tests observed, for the summary line
// `make forensics` prints (written to the file named by
// BSR_FORENSICS_SUMMARY when the package's tests end): tampered
// recordings tried and detected (tamperStats), whether fork and diff
// passed, and planted divergences located exactly.
var forensics struct {
	sync.Mutex
	forkDiff          int // fork/diff tests passed
	exact, exactCases int
}

// CountExact records that exact of cases planted divergences were located
// exactly (TestFirstDivergenceExact).
func CountExact(exact, cases int) {
	forensics.Lock()
	defer forensics.Unlock()
	forensics.exact += exact
	forensics.exactCases += cases
}

// CountForkDiff records a passed fork/diff test.
func CountForkDiff() {
	forensics.Lock()
	defer forensics.Unlock()
	forensics.forkDiff++
}

// TestMain checks that no test leaves a goroutine behind (Verify and Seek
// run shards on goroutines of their own; Record and the Writer none), and
// writes the forensics summary.
func TestMain(m *testing.M) { goleak.VerifyTestMain(summaryMain{m}) }

type summaryMain struct{ m *testing.M }

func (s summaryMain) Run() int {
	code := s.m.Run()
	if path := os.Getenv("BSR_FORENSICS_SUMMARY"); path != "" {
		forkDiff := "fork+diff ok"
		if forensics.forkDiff == 0 {
			forkDiff = "fork+diff NOT RUN"
		}
		if code != 0 {
			forkDiff = "tests FAILED"
		}
		line := fmt.Sprintf("forensics: %d/%d tampered recordings detected, %s, first divergence exact %d/%d\n",
			tamperStats.detected, tamperStats.cases, forkDiff, forensics.exact, forensics.exactCases)
		if err := os.WriteFile(path, []byte(line), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return code
}
