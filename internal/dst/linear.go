package dst

import (
	"fmt"
	"math"
	"time"

	"github.com/anishathalye/porcupine"
)

// The shared-log model for porcupine. Its state is the log's length: an
// append that ended at position p takes effect when the log has p-1
// entries; a read of position p is legal once the log has p entries; a
// checkTail answers the current length. Which record is at which position
// is checked separately against the final log (positions never change), so
// this small state suffices and keeps the check fast.
type logInput struct {
	kind opKind
	pos  uint64 // append: its final position; read: position read
}

var sharedLogModel = porcupine.Model{
	Init: func() any { return uint64(0) },
	Step: func(state, input, output any) (bool, any) {
		n := state.(uint64)
		in := input.(logInput)
		switch in.kind {
		case opAppend:
			if in.pos == n+1 {
				return true, n + 1
			}
			return false, n
		case opRead:
			return in.pos <= n, n
		case opTail:
			return output.(uint64) == n, n
		}
		return false, n
	},
	Equal: func(a, b any) bool { return a.(uint64) == b.(uint64) },
	Hash:  func(s any) uint64 { return s.(uint64) },
	DescribeOperation: func(input, output any) string {
		in := input.(logInput)
		switch in.kind {
		case opAppend:
			return fmt.Sprintf("append -> %d", in.pos)
		case opRead:
			return fmt.Sprintf("read(%d)", in.pos)
		}
		return fmt.Sprintf("checkTail -> %v", output)
	},
}

// checkLinearizable runs porcupine over the client histories. It returns
// false when the check timed out without a verdict.
func (s *sim) checkLinearizable() bool {
	var ops []porcupine.Operation
	for _, o := range s.history {
		ret := o.ret
		if ret == 0 {
			ret = math.MaxInt64
		}
		switch o.kind {
		case opAppend:
			if o.pos == 0 {
				continue // never took effect
			}
			ops = append(ops, porcupine.Operation{ClientId: o.client, Input: logInput{kind: opAppend, pos: o.pos}, Call: o.call, Return: ret})
		case opRead:
			if o.ret == 0 || o.pos == 0 {
				continue
			}
			ops = append(ops, porcupine.Operation{ClientId: o.client, Input: logInput{kind: opRead, pos: o.pos}, Call: o.call, Return: ret})
		case opTail:
			if o.ret == 0 {
				continue
			}
			ops = append(ops, porcupine.Operation{ClientId: o.client, Input: logInput{kind: opTail}, Output: o.tail, Call: o.call, Return: ret})
		}
	}
	switch porcupine.CheckOperationsTimeout(sharedLogModel, ops, 20*time.Second) {
	case porcupine.Ok:
		return true
	case porcupine.Illegal:
		s.violate("client history is not linearizable against the shared-log model (%d operations)", len(ops))
		return true
	}
	return false
}
