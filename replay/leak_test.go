package replay

import (
	"testing"

	"go.uber.org/goleak"
)

// verifyNoLeaks fails the package's tests if any goroutine outlives them:
// runners, their output appenders and snapshot writers, tickers and
// supervisors must all be stopped by their owners.
func verifyNoLeaks(m *testing.M) { goleak.VerifyTestMain(m) }
