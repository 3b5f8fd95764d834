package natsworld

import (
	"strings"
	"testing"
)

// TestProcessIDIsAValidWorkerID: the default worker id is accepted as a
// lease's worker (whatever the host is called).
func TestProcessIDIsAValidWorkerID(t *testing.T) {
	for _, prefix := range []string{"", "fe-"} {
		id := ProcessID(prefix)
		if !validWorker.MatchString(id) || !strings.HasPrefix(id, prefix) {
			t.Fatalf("ProcessID(%q) = %q: not a valid worker id", prefix, id)
		}
	}
}
