// Package natscoord holds the NATS adapters of the view coordinator: KV, a
// coord.Coordinator on a JetStream KV bucket for several processes or
// machines, and an embedded nats-server with JetStream (Embedded, Cluster)
// for one-binary deployments, tests and benchmarks. It is the only package
// under cmdlog that links nats-server; coord itself does not.
package natscoord

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/anoptic/broadside/cmdlog/coord"
	"github.com/anoptic/broadside/cmdlog/msg"
)

// DefaultBucket is the KV bucket New uses when Config.Bucket is empty.
const DefaultBucket = "broadside-views"

// Config configures a NATS coordinator.
type Config struct {
	// Bucket is the JetStream KV bucket; default DefaultBucket. One bucket
	// can serve many clusters, one key each.
	Bucket string
	// Cluster names the log cluster; it is the record's key, so it must be
	// a valid KV key (letters, digits, '-', '_', '=', '/', and '.' between
	// tokens). Required.
	Cluster string
	// Replicas is the bucket's replication factor when New creates it:
	// 1 (default) for one server, 3 for a cluster.
	Replicas int
	// History is how many revisions per key the bucket keeps when New
	// creates it, 1..5; default 5 (old views help diagnose view changes).
	History uint8
	// Logger receives Watch's reports of undecodable records; nil means
	// slog.Default().
	Logger *slog.Logger
}

// KV is a coord.Coordinator on a NATS JetStream KV bucket (file storage). The
// record's revision is the KV revision, i.e. the bucket stream's sequence
// number: it starts at 1 for the first record of an empty bucket and
// increases with every write, but when the bucket holds several clusters a
// cluster's revisions are not consecutive.
//
// CompareAndSet is an atomic compare-and-set on the server (KV Create, or
// Update with the expected revision). If it fails with an error other than
// coord.ErrConflict (a timeout, a lost connection), the write may or may not have
// happened: Get the record to find out.
type KV struct {
	kv  jetstream.KeyValue
	key string
	log *slog.Logger
}

var (
	_ coord.Coordinator = (*KV)(nil)
	_ coord.Watcher     = (*KV)(nil)
)

// validKey mirrors the KV key rule of nats.go.
var validKey = regexp.MustCompile(`^[-/_=.a-zA-Z0-9]+$`)

// New returns a coordinator on cfg.Bucket in js, creating the bucket if
// it does not exist (an existing bucket is used as configured).
func New(ctx context.Context, js jetstream.JetStream, cfg Config) (*KV, error) {
	if cfg.Bucket == "" {
		cfg.Bucket = DefaultBucket
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 1
	}
	if cfg.History == 0 {
		cfg.History = 5
	}
	k := cfg.Cluster
	if !validKey.MatchString(k) || k[0] == '.' || k[len(k)-1] == '.' {
		return nil, fmt.Errorf("natscoord: cluster name %q is not a valid KV key", k)
	}
	if cfg.History > 5 {
		return nil, fmt.Errorf("natscoord: history %d, want 1..5", cfg.History)
	}
	if cfg.Replicas < 1 || cfg.Replicas > 5 {
		return nil, fmt.Errorf("natscoord: %d replicas, want 1..5", cfg.Replicas)
	}
	kv, err := openBucket(ctx, js, cfg)
	if err != nil {
		return nil, fmt.Errorf("natscoord: bucket %s: %w", cfg.Bucket, err)
	}
	if err := WaitForStreamLeader(ctx, js, "KV_"+cfg.Bucket); err != nil {
		return nil, fmt.Errorf("natscoord: bucket %s: %w", cfg.Bucket, err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &KV{kv: kv, key: cfg.Cluster, log: log.With("component", "coord", "bucket", cfg.Bucket, "key", cfg.Cluster)}, nil
}

// Get returns the current record and its revision, or an error wrapping
// coord.ErrNotFound when there is none (never written, or deleted).
func (n *KV) Get(ctx context.Context) (msg.ViewRecord, uint64, error) {
	e, err := n.kv.Get(ctx, n.key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return msg.ViewRecord{}, 0, fmt.Errorf("natscoord: get %s: %w", n.key, coord.ErrNotFound)
	}
	if err != nil {
		return msg.ViewRecord{}, 0, fmt.Errorf("natscoord: get %s: %w", n.key, err)
	}
	rec, err := coord.DecodeViewRecord(e.Value())
	if err != nil {
		return msg.ViewRecord{}, 0, fmt.Errorf("natscoord: get %s: revision %d: %w", n.key, e.Revision(), err)
	}
	return rec, e.Revision(), nil
}

// CompareAndSet stores rec if the current revision is expectRev (0: only if
// no record exists) and returns the new revision; if another write came
// first it returns an error wrapping coord.ErrConflict.
func (n *KV) CompareAndSet(ctx context.Context, expectRev uint64, rec msg.ViewRecord) (uint64, error) {
	val := coord.EncodeViewRecord(rec)
	if len(val) > coord.MaxRecordBytes {
		return 0, fmt.Errorf("natscoord: view %d encodes to %d bytes, over %d: not written", rec.Number, len(val), coord.MaxRecordBytes)
	}
	var (
		rev uint64
		err error
	)
	if expectRev == 0 {
		rev, err = n.kv.Create(ctx, n.key, val)
		// nats.go v1.55 matches both server codes for "wrong last sequence"
		// (10071 and, on replicated streams, 10164) to ErrKeyExists here.
		if errors.Is(err, jetstream.ErrKeyExists) {
			err = fmt.Errorf("%w (%w)", coord.ErrConflict, err)
		}
	} else {
		rev, err = n.kv.Update(ctx, n.key, val, expectRev)
		// ErrKeyExists would match only on R1 buckets (code 10071), not on
		// replicated ones (10164); ErrKeyRevisionMismatch matches both.
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			err = fmt.Errorf("%w (%w)", coord.ErrConflict, err)
		}
	}
	if err != nil {
		return 0, fmt.Errorf("natscoord: compare-and-set %s at revision %d: %w", n.key, expectRev, err)
	}
	return rev, nil
}

// Watch implements coord.Watcher on a KV watch of the record's key. Records that
// do not decode are logged and skipped; deletions are skipped. The
// goroutine it starts ends after ctx is done, once the client library has
// closed the underlying subscription.
func (n *KV) Watch(ctx context.Context) (<-chan coord.Update, error) {
	w, err := n.kv.Watch(ctx, n.key, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("natscoord: watch %s: %w", n.key, err)
	}
	out := make(chan coord.Update)
	go func() {
		defer close(out)
		updates, done := w.Updates(), ctx.Done()
		var pending *coord.Update
		var last uint64 // highest revision accepted
		for {
			var send chan<- coord.Update
			var next coord.Update
			if pending != nil && done != nil {
				send, next = out, *pending
			}
			select {
			case e, ok := <-updates:
				// Keep draining until the library closes the channel: its
				// callback blocks on it while holding a lock.
				if !ok {
					return
				}
				if e == nil || e.Operation() != jetstream.KeyValuePut { // end of initial values; a deletion
					continue
				}
				rec, err := coord.DecodeViewRecord(e.Value())
				if err != nil {
					n.log.Warn("skipping undecodable view record", "revision", e.Revision(), "err", err)
					continue
				}
				if e.Revision() > last {
					last = e.Revision()
					pending = &coord.Update{View: rec, Rev: last}
				}
			case send <- next:
				pending = nil
			case <-done:
				done = nil
				_ = w.Stop() // the library then closes updates
			}
		}
	}()
	return out, nil
}

// WaitForStreamLeader waits until stream has a leader, as a replicated
// stream or KV bucket just created may not yet (requests to it then fail
// with "no responders"), or until ctx ends.
func WaitForStreamLeader(ctx context.Context, js jetstream.JetStream, stream string) error {
	for {
		st, err := js.Stream(ctx, stream)
		if err == nil {
			info, ierr := st.Info(ctx)
			if ierr == nil && (info.Cluster == nil || info.Cluster.Leader != "") {
				return nil
			}
			err = ierr
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stream %s has no leader: %w (last: %v)", stream, ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// openBucket looks the bucket up, creating it if it does not exist. A
// replicated bucket created by several processes at once can take longer
// than one API request's timeout on a busy machine, so a request that
// timed out is retried for up to 30 s (or until ctx ends).
//
// The bucket's stream is created here rather than by CreateKeyValue so
// that a replicated bucket has direct gets off: with them any replica
// answers a Get, and one that is behind answers with an older view record
// or none (a process that lost a Create to another then found no record at
// all, seen on a 3-node cluster); without them the stream leader answers,
// so a Get sees every completed compare-and-set.
func openBucket(ctx context.Context, js jetstream.JetStream, cfg Config) (jetstream.KeyValue, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		kv, err := js.KeyValue(ctx, cfg.Bucket)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			_, err = js.CreateStream(ctx, jetstream.StreamConfig{
				Name:              "KV_" + cfg.Bucket,
				Description:       "Broadside cmdlog view records, one key per cluster",
				Subjects:          []string{"$KV." + cfg.Bucket + ".>"},
				MaxMsgsPerSubject: int64(cfg.History),
				MaxBytes:          -1,
				MaxMsgSize:        -1,
				MaxMsgs:           -1,
				MaxConsumers:      -1,
				Storage:           jetstream.FileStorage,
				Replicas:          cfg.Replicas,
				AllowRollup:       true,
				DenyDelete:        true,
				Duplicates:        2 * time.Minute,
				AllowDirect:       cfg.Replicas == 1, // one server: direct gets are consistent
				Discard:           jetstream.DiscardNew,
			})
			if err == nil || errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) { // created concurrently
				kv, err = js.KeyValue(ctx, cfg.Bucket)
			}
		}
		retry := errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders)
		if err == nil || !retry || ctx.Err() != nil || time.Now().After(deadline) {
			return kv, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}
