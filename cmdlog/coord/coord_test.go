package coord_test

import (
	"context"
	"testing"

	"go.uber.org/goleak"

	"github.com/anoptic/broadside/cmdlog/coord"
	"github.com/anoptic/broadside/cmdlog/coord/coordtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestMemoryCoordinator(t *testing.T) {
	coordtest.TestCoordinator(t, func(*testing.T) coord.Coordinator { return coord.NewMemory() })
}

func TestMemoryRevisionsCount(t *testing.T) {
	m, ctx := coord.NewMemory(), context.Background()
	for want := uint64(1); want <= 3; want++ {
		rev, err := m.CompareAndSet(ctx, want-1, coordtest.SampleRecord(want))
		if err != nil || rev != want {
			t.Fatalf("CAS %d = %d, %v", want, rev, err)
		}
	}
}
