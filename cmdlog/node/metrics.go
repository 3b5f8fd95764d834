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
	// counts follow the replica's own counters (seqCounters), by delta.
	counts []followed
}

// followed is a Prometheus counter that follows one of the replica's
// monotonic counters.
type followed struct {
	c    prometheus.Counter
	read func(*seq.Replica) uint64
	last uint64
}

// seqCounters are the replica's refusal and dedup counters, exported as
// broadside_seq_<name>.
var seqCounters = []struct {
	name, help string
	read       func(*seq.Replica) uint64
}{
	{"busy_rejects_total", "Appends refused busy: the unordered log's byte budget (MaxHeldBytes), a full dedup table or ids beyond the dedup window.", (*seq.Replica).BusyRejects},
	{"admission_rejects_total", "Appends of clients new to a full dedup table (MaxClients) refused busy.", (*seq.Replica).AdmitRejects},
	{"floor_raises_total", "Clients' dedup marks raised to a floor their producer declared.", (*seq.Replica).FloorRaises},
	{"lease_rolls_total", "View changes this leader started with the same members so that dedup leases expire (a full table refused a new client).", (*seq.Replica).Rolls},
	{"refused_messages_total", "Messages refused because their sender's role or membership does not allow them.", (*seq.Replica).Refused},
	{"peer_gone_total", "Crash reports of a member's liveness connection that started a view change.", (*seq.Replica).PeerGoneActed},
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
	for _, sc := range seqCounters {
		m.counts = append(m.counts, followed{c: c(sc.name, sc.help), read: sc.read})
	}
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
	for i := range m.counts {
		f := &m.counts[i]
		if v := f.read(r); v > f.last {
			f.c.Add(float64(v - f.last))
			f.last = v
		}
	}
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
