package wire

import (
	"encoding/binary"

	"github.com/anoptic/broadside/netcode/wire/fb"
	flatbuffers "github.com/google/flatbuffers/go"
)

// ParseEnvelope verifies b exactly as VerifyEnvelope does and reads its
// fields in the same pass into env, without copying: Payload aliases b
// (empty but not nil when the vector is present and empty, as the
// generated accessor returns it). It returns VerifyEnvelope's error for a
// buffer that fails. It checks neither MaxEnvelopeSize nor the kind
// (DecodeEnvelope does both).
//
// A replay reads every log record once per shard it feeds: the generic
// verifier (a Table value per field, an error per field evaluated) and the
// generated accessors (a vtable lookup per field) cost several times what
// this one pass over the vtable does. FuzzParseEnvelope checks that both
// accept and reject the same buffers and decode the same values.
func ParseEnvelope(b []byte, env *Envelope) error {
	if parseEnvelope(b, env) {
		return nil
	}
	if err := VerifyEnvelope(b); err != nil {
		return err
	}
	// Not reached (the fuzz test holds the two to the same answers); were
	// it, the verified buffer decodes the generated way.
	readEnvelope(b, env)
	return nil
}

// readEnvelope reads a verified envelope with the generated accessors.
func readEnvelope(b []byte, env *Envelope) {
	var t fb.Envelope
	t.Init(b, flatbuffers.GetUOffsetT(b))
	*env = Envelope{
		Kind:      EnvelopeKind(t.Kind()),
		Tick:      t.Tick(),
		Player:    t.Player(),
		ClientSeq: t.ClientSeq(),
		Shard:     t.Shard(),
		Payload:   t.PayloadBytes(),
		Epoch:     t.Epoch(),
		Source:    t.Source(),
	}
}

// parseEnvelope is ParseEnvelope's single pass: false for any buffer that
// VerifyEnvelope rejects (the checks are Verifier.Root, Verifier.table,
// Table.Field and Table.Vector's, in the same arithmetic).
func parseEnvelope(b []byte, env *Envelope) bool {
	n := uint64(len(b))
	if n > MaxBufferSize || n < 12 || string(b[4:8]) != EnvelopeIdentifier {
		return false
	}
	pos := uint64(binary.LittleEndian.Uint32(b))
	if pos < 8 || pos%4 != 0 || pos+4 > n {
		return false
	}
	vt := int64(pos) - int64(int32(binary.LittleEndian.Uint32(b[pos:])))
	if vt < 0 || vt%2 != 0 || uint64(vt)+4 > n {
		return false
	}
	vtSize := uint64(binary.LittleEndian.Uint16(b[vt:]))
	tSize := uint64(binary.LittleEndian.Uint16(b[vt+2:]))
	if vtSize < 4 || vtSize%2 != 0 || uint64(vt)+vtSize > n || tSize < 4 || pos+tSize > n {
		return false
	}
	vtab := b[vt : uint64(vt)+vtSize]
	var e Envelope
	p, ok := inlineField(vtab, pos, tSize, 0, 1)
	if !ok {
		return false
	}
	if p != 0 {
		e.Kind = EnvelopeKind(b[p])
	}
	if p, ok = inlineField(vtab, pos, tSize, 1, 8); !ok {
		return false
	} else if p != 0 {
		e.Tick = binary.LittleEndian.Uint64(b[p:])
	}
	if p, ok = inlineField(vtab, pos, tSize, 2, 4); !ok {
		return false
	} else if p != 0 {
		e.Player = binary.LittleEndian.Uint32(b[p:])
	}
	if p, ok = inlineField(vtab, pos, tSize, 3, 8); !ok {
		return false
	} else if p != 0 {
		e.ClientSeq = binary.LittleEndian.Uint64(b[p:])
	}
	if p, ok = inlineField(vtab, pos, tSize, 4, 4); !ok {
		return false
	} else if p != 0 {
		e.Shard = binary.LittleEndian.Uint32(b[p:])
	}
	if p, ok = inlineField(vtab, pos, tSize, 5, 4); !ok {
		return false
	} else if p != 0 {
		// The payload's offset, then the vector (Table.offset, Table.Vector
		// of 1-byte elements; the budget cannot run out for one vector).
		rel := uint64(binary.LittleEndian.Uint32(b[p:]))
		if rel == 0 {
			return false
		}
		target := p + rel
		if target >= n || target%4 != 0 || target+4 > n {
			return false
		}
		count := uint64(binary.LittleEndian.Uint32(b[target:]))
		start := target + 4
		if count > n-start {
			return false
		}
		e.Payload = b[start : start+count]
	}
	if p, ok = inlineField(vtab, pos, tSize, 6, 8); !ok {
		return false
	} else if p != 0 {
		e.Epoch = binary.LittleEndian.Uint64(b[p:])
	}
	if p, ok = inlineField(vtab, pos, tSize, 7, 4); !ok {
		return false
	} else if p != 0 {
		e.Source = binary.LittleEndian.Uint32(b[p:])
	}
	*env = e
	return true
}

// inlineField returns the buffer position of inline field id, of size
// bytes aligned to size, of the table at pos whose vtable is vtab and size
// tSize: 0 if the field is absent, ok false if it lies outside the table or
// is misaligned (Table.Field's checks).
func inlineField(vtab []byte, pos, tSize uint64, id int, size uint64) (p uint64, ok bool) {
	e := 4 + 2*id
	if e+2 > len(vtab) {
		return 0, true
	}
	off := uint64(binary.LittleEndian.Uint16(vtab[e:]))
	if off == 0 {
		return 0, true
	}
	if off < 4 || off+size > tSize || (pos+off)&(size-1) != 0 {
		return 0, false
	}
	return pos + off, true
}
