package corfu

import (
	"sync/atomic"

	"github.com/anoptic/broadside/cmdlog/baseline/pipe"
	"github.com/anoptic/broadside/netcode/transport"
)

// Sequencer hands out log positions (tokens). As in Corfu its state is
// soft: a counter in memory (after a crash Corfu rebuilds it from the
// replicas' tails, which this baseline does not need).
type Sequencer struct {
	srv  *server
	next atomic.Uint64 // last position handed out
}

// StartSequencer starts a sequencer node.
func StartSequencer(cfg NodeConfig) (*Sequencer, error) {
	s := &Sequencer{}
	srv, err := startServer(cfg, s.serve)
	if err != nil {
		return nil, err
	}
	s.srv = srv
	return s, nil
}

// Addr returns the address clients dial.
func (s *Sequencer) Addr() string { return s.srv.addr() }

// Issued returns the last position handed out.
func (s *Sequencer) Issued() uint64 { return s.next.Load() }

// Close stops the node.
func (s *Sequencer) Close() error { return s.srv.close() }

// serve answers token requests of one stream; replies to pipelined
// requests are flushed together.
func (s *Sequencer) serve(st *transport.Stream) {
	r := pipe.NewResponder(st)
	var out []byte
	for {
		id, body, err := r.Next()
		if err != nil {
			return
		}
		out = out[:0]
		if n, err := decodeTokenRequest(body); err != nil {
			out = pipe.AppendReply(out, id, []byte{statusBad})
		} else {
			last := s.next.Add(uint64(n))
			out = appendTokenReply(pipe.AppendReply(out, id), last-uint64(n)+1)
		}
		if err := st.BufferFrame(out); err != nil {
			return
		}
		if !r.More() {
			if err := st.Flush(); err != nil {
				return
			}
		}
	}
}
