package node

import (
	"time"

	"github.com/anoptic/broadside/cmdlog/seq"
	"github.com/anoptic/broadside/cmdlog/shard"
	"github.com/prometheus/client_golang/prometheus"
)

// SeqMetrics exports a sequencing replica's state to Prometheus.
type SeqMetrics struct {
	view, stableGP, lastOrderedGP, stableLag, unordered prometheus.Gauge
	leader                                              prometheus.Gauge
	batches, records, viewChanges                       prometheus.Counter
	batchSize                                           prometheus.Histogram
	lastBatches, lastRecords, lastViewChanges           uint64
}

// NewSeqMetrics registers a replica's metrics on reg.
func NewSeqMetrics(reg prometheus.Registerer) *SeqMetrics {
	g := func(name, help string) prometheus.Gauge {
		x := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "broadside", Subsystem: "seq", Name: name, Help: help})
		reg.MustRegister(x)
		return x
	}
	c := func(name, help string) prometheus.Counter {
		x := prometheus.NewCounter(prometheus.CounterOpts{Namespace: "broadside", Subsystem: "seq", Name: name, Help: help})
		reg.MustRegister(x)
		return x
	}
	m := &SeqMetrics{
		view:          g("view", "Number of the view this replica serves (0: none)."),
		leader:        g("leader", "1 if this replica leads its view."),
		stableGP:      g("stable_gp", "Highest stable log position known to this replica."),
		lastOrderedGP: g("last_ordered_gp", "Highest position this replica knows ordered."),
		stableLag:     g("stable_gp_lag", "Leader only: durable tail minus stable-gp (records appended but not yet stable)."),
		unordered:     g("unordered_records", "Records in the unordered log."),
		batches:       c("ordered_batches_total", "Ordering batches cut by this replica as leader."),
		records:       c("ordered_records_total", "Records ordered by this replica as leader."),
		viewChanges:   c("view_changes_total", "View changes completed by this replica as flusher."),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "broadside", Subsystem: "seq",
			Name: "order_batch_size", Help: "Mean records per ordering batch, sampled per node round.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 12)}),
	}
	reg.MustRegister(m.batchSize)
	return m
}

// Observe updates the metrics from the replica (call on its goroutine).
func (m *SeqMetrics) Observe(r *seq.Replica) {
	m.view.Set(float64(r.View()))
	if r.Role() == seq.RoleLeader {
		m.leader.Set(1)
		m.stableLag.Set(float64(r.DurableTail() - min(r.DurableTail(), r.StableGP())))
	} else {
		m.leader.Set(0)
		m.stableLag.Set(0)
	}
	m.stableGP.Set(float64(r.StableGP()))
	m.lastOrderedGP.Set(float64(r.LastOrderedGP()))
	m.unordered.Set(float64(r.UnorderedLen()))
	b, rec, vc := r.Counters()
	if b > m.lastBatches {
		m.batches.Add(float64(b - m.lastBatches))
		m.records.Add(float64(rec - m.lastRecords))
		m.batchSize.Observe(float64(rec-m.lastRecords) / float64(b-m.lastBatches))
	}
	if vc > m.lastViewChanges {
		m.viewChanges.Add(float64(vc - m.lastViewChanges))
	}
	m.lastBatches, m.lastRecords, m.lastViewChanges = b, rec, vc
}

// ShardMetrics exports a shard's state to Prometheus.
type ShardMetrics struct {
	epoch, stableGP, trimmed prometheus.Gauge
}

// NewShardMetrics registers a shard's metrics on reg.
func NewShardMetrics(reg prometheus.Registerer) *ShardMetrics {
	g := func(name, help string) prometheus.Gauge {
		x := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "broadside", Subsystem: "shard", Name: name, Help: help})
		reg.MustRegister(x)
		return x
	}
	return &ShardMetrics{
		epoch:    g("epoch", "Highest writer epoch the shard accepted."),
		stableGP: g("stable_gp", "Stable-gp the shard serves reads up to."),
		trimmed:  g("trimmed", "Highest trimmed position."),
	}
}

// Observe updates the metrics from the shard.
func (m *ShardMetrics) Observe(s *shard.Shard) {
	meta := s.Meta()
	m.epoch.Set(float64(meta.Epoch))
	m.stableGP.Set(float64(meta.StableGP))
	m.trimmed.Set(float64(meta.Trimmed))
}

// AppendLatency returns a hook for cmdlog.ClientConfig.OnAppendLatency that
// records append latency (seconds) in a histogram registered on reg.
func AppendLatency(reg prometheus.Registerer) func(time.Duration) {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "broadside", Subsystem: "log",
		Name: "append_latency_seconds", Help: "Append latency: call to durable acknowledgement by every sequencing replica.",
		Buckets: prometheus.ExponentialBuckets(20e-6, 2, 16)})
	reg.MustRegister(h)
	return func(d time.Duration) { h.Observe(d.Seconds()) }
}
