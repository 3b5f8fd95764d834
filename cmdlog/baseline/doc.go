// Package baseline holds the shared-log designs Broadside's cmdlog is
// measured against side by side (broadside bench log). They run over the
// same transport (netcode/transport) and the same storage
// (cmdlog/shardstore) as cmdlog, so the comparison is of protocols, not of
// plumbing:
//
//   - corfu: a Corfu-style log; an append takes a token (a position) from a
//     sequencer, then writes through a chain of storage replicas, client
//     driven: 4 round trips for 3 replicas.
//   - pipe: pipelined request/response calls on one long-lived stream, the
//     request path the baselines (and the raw QUIC floor) share.
package baseline
