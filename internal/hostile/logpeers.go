package hostile

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"sort"

	"github.com/anoptic/broadside/cmdlog/codec"
	"github.com/anoptic/broadside/cmdlog/mesh"
	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/netcode/transport"
)

// LogTarget is a command log cluster of logd nodes, attacked by a holder
// of a client certificate (the one every log client has).
type LogTarget struct {
	// Peers are the nodes' addresses: replicas 1.., shards 101...
	Peers map[msg.NodeID]string
	// ClientTLS presents a client certificate allowed to trim (the game
	// server's: dev client.pem); ReaderTLS one without broadside:perm:trim.
	ClientTLS, ReaderTLS *tls.Config
}

func (l LogTarget) ids(shards bool) []msg.NodeID {
	var ids []msg.NodeID
	for id := range l.Peers {
		if (id >= mesh.FirstShardID) == shards {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// LogAttacks returns the attacks on the log nodes.
func (l LogTarget) LogAttacks() []Attack {
	reps, shards := l.ids(false), l.ids(true)
	const client = mesh.ClientIDBase + 0x4ac
	forgedView := msg.StartView{View: msg.ViewRecord{Number: 1 << 40, Members: reps, Leader: reps[0]}}
	forgedStore := msg.Store{Epoch: 1 << 47, Batch: 1, Truncate: true, TruncateAbove: 0}
	var attacks []Attack
	add := func(name string, fn func(ctx context.Context) (bool, string)) {
		attacks = append(attacks, Attack{Class: ClassLogPeer, Name: name, Run: fn})
	}
	add(fmt.Sprintf("client certificate claiming replica %d's id at replica %d", reps[1], reps[0]), func(ctx context.Context) (bool, string) {
		return l.send(ctx, l.ClientTLS, reps[0], reps[1], nil, mesh.CodeBadIdentity)
	})
	add(fmt.Sprintf("client certificate claiming shard %d's id at shard %d", shards[len(shards)-1], shards[0]), func(ctx context.Context) (bool, string) {
		return l.send(ctx, l.ClientTLS, shards[0], shards[len(shards)-1], forgedStore, mesh.CodeBadIdentity)
	})
	add(fmt.Sprintf("forged StartView (view 2^40) from a client certificate to replicas %v", reps), func(ctx context.Context) (bool, string) {
		return l.sendAll(ctx, l.ClientTLS, reps, client, forgedView, transport.CodeUnauthorized)
	})
	add(fmt.Sprintf("forged Store{Epoch 2^47, Truncate} from a client certificate to shards %v", shards), func(ctx context.Context) (bool, string) {
		return l.sendAll(ctx, l.ClientTLS, shards, client, forgedStore, transport.CodeUnauthorized)
	})
	add("forged StableGP and Seal from a client certificate", func(ctx context.Context) (bool, string) {
		if ok, how := l.send(ctx, l.ClientTLS, shards[0], client, msg.StableGP{Epoch: 1 << 47, GP: 1 << 40}, transport.CodeUnauthorized); !ok {
			return ok, how
		}
		return l.send(ctx, l.ClientTLS, reps[0], client, msg.Seal{View: 1 << 40}, transport.CodeUnauthorized)
	})
	add("Trim of the whole log from a client certificate without perm:trim", func(ctx context.Context) (bool, string) {
		return l.sendAll(ctx, l.ReaderTLS, shards, client, msg.Trim{ReqID: 1, UpTo: 1 << 40}, transport.CodeUnauthorized)
	})
	add("garbage message on a log link", func(ctx context.Context) (bool, string) {
		return l.raw(ctx, l.ClientTLS, reps[0], client, func(st *transport.Stream) { st.WriteFrame(randomBytes(200, 9)) }, mesh.CodeBadMessage)
	})
	add("oversized frame on a log link (64 MiB announced)", func(ctx context.Context) (bool, string) {
		return l.raw(ctx, l.ClientTLS, shards[0], client, func(st *transport.Stream) {
			st.QUIC().Write(binary.BigEndian.AppendUint32(nil, 64<<20))
			st.QUIC().Write(randomBytes(8<<10, 10))
		}, transport.CodeFrameTooLarge)
	})
	return attacks
}

func (l LogTarget) sendAll(ctx context.Context, cfg *tls.Config, to []msg.NodeID, claim msg.NodeID, m msg.Message, want transport.ErrorCode) (bool, string) {
	var how string
	for _, id := range to {
		ok, h := l.send(ctx, cfg, id, claim, m, want)
		if !ok {
			return false, fmt.Sprintf("node %d: %s", id, h)
		}
		how = h
	}
	return true, fmt.Sprintf("each of %d nodes %s", len(to), how)
}

// send links to node to as claim and sends m (nil: nothing after the
// hello), expecting the node to close the link with want.
func (l LogTarget) send(ctx context.Context, cfg *tls.Config, to, claim msg.NodeID, m msg.Message, want transport.ErrorCode) (bool, string) {
	return l.raw(ctx, cfg, to, claim, func(st *transport.Stream) {
		if m != nil {
			st.WriteFrame(codec.Encode(nil, m))
		}
	}, want)
}

// raw links to node to as claim (the mesh's hello: the 4-byte node id in
// the first frame), runs write on the stream and waits for the close.
func (l LogTarget) raw(ctx context.Context, cfg *tls.Config, to, claim msg.NodeID, write func(*transport.Stream), want transport.ErrorCode) (bool, string) {
	ep, err := transport.NewEndpoint(transport.Config{ListenAddr: "127.0.0.1:0", ClientTLS: cfg, ALPN: []string{mesh.ALPN},
		MaxFrameSize: mesh.MaxFrameSize, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return false, err.Error()
	}
	defer ep.Close()
	conn, err := ep.Dial(ctx, l.Peers[to])
	if err != nil {
		return false, err.Error()
	}
	st, err := conn.OpenStream(ctx)
	if err != nil {
		return false, err.Error()
	}
	var hello [4]byte
	binary.BigEndian.PutUint32(hello[:], uint32(claim))
	if err := st.WriteFrame(hello[:]); err != nil {
		return false, err.Error()
	}
	write(st)
	return expectClose(ctx, conn, want)
}
