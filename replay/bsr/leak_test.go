package bsr

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind (Verify and Seek
// run shards on goroutines of their own; Record and the Writer none).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
