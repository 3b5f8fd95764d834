package node

import (
	"testing"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/cmdlog/seq"
	"github.com/prometheus/client_golang/prometheus"
)

// TestSeqMetricsFollowTheReplicasCounters: every refusal and dedup
// counter is registered, and each follows its replica counter by delta
// (a counter never goes down, and counts each event once).
func TestSeqMetricsFollowTheReplicasCounters(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewSeqMetrics(reg)
	r := seq.New(seq.Config{ID: 1, Replicas: []msg.NodeID{1, 2, 3}}, 0)
	var n uint64
	m.counts[0].read = func(*seq.Replica) uint64 { return n }
	for _, v := range []uint64{3, 3, 5} {
		n = v
		m.Observe(r)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
		if mf.GetName() == "broadside_seq_"+seqCounters[0].name {
			if got := mf.GetMetric()[0].GetCounter().GetValue(); got != 5 {
				t.Fatalf("%s = %v after the replica counted 3 then 5, want 5", mf.GetName(), got)
			}
		}
	}
	for _, sc := range seqCounters {
		if !names["broadside_seq_"+sc.name] {
			t.Errorf("broadside_seq_%s is not registered", sc.name)
		}
	}
}
