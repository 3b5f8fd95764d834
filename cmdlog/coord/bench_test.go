package coord_test

import (
	"testing"

	"github.com/anoptic/broadside/cmdlog/coord"
	"github.com/anoptic/broadside/cmdlog/coord/coordtest"
)

// BenchmarkCompareAndSet measures one compare-and-set round trip of a
// typical record in memory (natscoord's benchmark measures the same on an
// embedded server).
func BenchmarkCompareAndSet(b *testing.B) {
	coordtest.BenchCompareAndSet(b, coord.NewMemory())
}
