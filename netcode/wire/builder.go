package wire

import (
	"sync"

	flatbuffers "github.com/google/flatbuffers/go"
)

// maxPooledBuilder is the largest builder buffer kept for reuse; bigger
// ones (from rare huge messages) are left to the garbage collector.
const maxPooledBuilder = 64 << 10

var builders = sync.Pool{New: func() any { return flatbuffers.NewBuilder(256) }}

func getBuilder() *flatbuffers.Builder {
	b := builders.Get().(*flatbuffers.Builder)
	b.Reset()
	return b
}

// finish appends the finished buffer of b, with file identifier ident, to
// dst and returns b to the pool.
func finish(dst []byte, b *flatbuffers.Builder, root flatbuffers.UOffsetT, ident []byte) []byte {
	b.FinishWithFileIdentifier(root, ident)
	dst = append(dst, b.FinishedBytes()...)
	if cap(b.Bytes) <= maxPooledBuilder {
		builders.Put(b)
	}
	return dst
}

var (
	envelopeIdent    = []byte(EnvelopeIdentifier)
	gameCommandIdent = []byte(GameCommandIdentifier)
)
