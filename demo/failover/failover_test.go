package failover

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestRun runs the demo in short and asserts what it checks: appends
// were acknowledged before and after the crash, the view changed, and
// every acknowledged append was read back exactly once.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	rep, err := Run(context.Background(), &out, Options{Clients: 2, Concurrency: 4, Duration: 1500 * time.Millisecond, Size: 100, Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if rep.Acked == 0 || rep.Tail < uint64(rep.Acked) || rep.Lost != 0 || rep.Duplicated != 0 {
		t.Fatalf("acked %d, tail %d, lost %d, duplicated %d\n%s", rep.Acked, rep.Tail, rep.Lost, rep.Duplicated, out.String())
	}
	for _, want := range []string{"view change: view ", "restarting replica", "check:     0 lost, 0 duplicated"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the demo does not print %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "view change: view 0 ") {
		t.Errorf("no view became active after the leader crashed:\n%s", out.String())
	}
}

// TestRunNeedsAClient checks that a demo without clients is an error, not
// a panic (the first client reads the log back).
func TestRunNeedsAClient(t *testing.T) {
	if _, err := Run(context.Background(), &bytes.Buffer{}, Options{Duration: time.Millisecond}); err == nil {
		t.Fatal("no error without clients")
	}
}
