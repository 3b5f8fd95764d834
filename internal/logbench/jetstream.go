package logbench

import (
	"context"
	"fmt"
	"time"

	"github.com/anoptic/broadside/cmdlog/coord/natscoord"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

const (
	jsStream  = "BENCH"
	jsSubject = "bench.log"
	// jsMaxBytes bounds the stream (per replica; old messages are
	// discarded), so long runs of large records cannot exhaust memory.
	jsMaxBytes = 256 << 20
)

// jetStream is NATS JetStream as usually deployed for a replicated log: a
// 3-node cluster (embedded, routed on loopback), an R3 memory-storage
// stream, and js.Publish, which returns once the stream leader has the
// message and a quorum of replicas (2 of 3) acknowledged it. The client
// connects to the stream leader's server, the best case (no extra hop).
type jetStream struct {
	cluster *natscoord.Cluster
	nc      *nats.Conn
	js      jetstream.JetStream
}

func startJetStream(ctx context.Context, env Env) (System, error) {
	return startJetStreamStorage(ctx, env, false)
}

// startJetStreamSync is the durable peer a user would pick: the same
// cluster with a file-storage stream and every server syncing each write
// (sync_interval: always), so an acknowledged publish is on the disks of a
// quorum.
func startJetStreamSync(ctx context.Context, env Env) (System, error) {
	return startJetStreamStorage(ctx, env, true)
}

func startJetStreamStorage(ctx context.Context, env Env, synced bool) (_ System, err error) {
	sync, storage := natscoord.SyncPeriodic, jetstream.MemoryStorage
	if synced {
		sync, storage = natscoord.SyncAlways, jetstream.FileStorage
	}
	cl, err := natscoord.StartCluster(3, env.Dir, natscoord.ClusterOptions{Name: "logbench", Sync: sync})
	if err != nil {
		return nil, err
	}
	j := &jetStream{cluster: cl}
	defer func() {
		if err != nil {
			j.Close()
		}
	}()
	admin, err := cl.Connect()
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	ajs, err := jetstream.New(admin)
	if err != nil {
		return nil, err
	}
	st, err := ajs.CreateStream(ctx, jetstream.StreamConfig{
		Name: jsStream, Subjects: []string{jsSubject}, Storage: storage, Replicas: 3,
		MaxBytes: jsMaxBytes, Discard: jetstream.DiscardOld,
	})
	if err != nil {
		return nil, fmt.Errorf("jetstream: create stream: %w", err)
	}
	leader, err := streamLeader(ctx, st)
	if err != nil {
		return nil, err
	}
	url := ""
	for _, n := range cl.Nodes {
		if n.Server().Name() == leader {
			url = n.ClientURL()
		}
	}
	if url == "" {
		return nil, fmt.Errorf("jetstream: stream leader %q is not a node of the cluster", leader)
	}
	if j.nc, err = nats.Connect(url, nats.Name("logbench")); err != nil {
		return nil, fmt.Errorf("jetstream: connect to %s: %w", url, err)
	}
	if j.js, err = jetstream.New(j.nc); err != nil {
		return nil, err
	}
	if err := waitReady(ctx, j.Append); err != nil {
		return nil, fmt.Errorf("jetstream: not ready: %w", err)
	}
	return j, nil
}

// streamLeader waits (bounded) until the stream has elected a leader.
func streamLeader(ctx context.Context, st jetstream.Stream) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	for {
		info, err := st.Info(ctx)
		if err == nil && info.Cluster != nil && info.Cluster.Leader != "" {
			return info.Cluster.Leader, nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("jetstream: no stream leader: %w (last error: %v)", ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (j *jetStream) Append(ctx context.Context, data []byte) error {
	_, err := j.js.Publish(ctx, jsSubject, data)
	return err
}

func (j *jetStream) Settle(context.Context) error { return nil }

func (j *jetStream) Close() error {
	if j.nc != nil {
		j.nc.Close()
	}
	j.cluster.Shutdown()
	return nil
}
