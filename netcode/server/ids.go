package server

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"

	"github.com/anoptic/broadside/cmdlog/msg"
)

// Log ids of player commands.
//
// The server appends a player's command with the deterministic id
// CommandID(player, session, seq): the client id is derived from the
// authenticated player and the session id the client library chose (Hello),
// the request id is the command's client sequence number. A command resent
// after a reconnection, to this server, another front end or a restarted
// server on the same log, therefore has the same id, and the log stores it
// once (its replicas' per-client windows, cmdlog/dedup; in fsync durability
// they survive restarts). The server keeps no dedup state of its own.
//
// Client ids are partitioned by their top bits, so that no writer's ids can
// collide with another kind's:
//   - cmdlog.Client's random ids have bit 62 set (so do world.LocalWorld's
//     player ids);
//   - the engine's ids (replay.TickerClientID, replay.OutputClientID) have
//     the top byte 0xB5 (bits 63..61 = 101);
//   - player sessions have bits 63..61 = 100: PlayerClientTag, and 61 bits
//     of SHA-256("broadside player session", player, session).
//
// Two sessions share a client id only by a collision of 61-bit hashes: by
// chance, about n²/2⁶² for n sessions ever (one in a billion at 10⁵ sessions), or
// by an attacker finding a second preimage of a 61-bit SHA-256 prefix for
// a chosen victim's session, which it would first have to learn. A collision
// makes the later session's commands look like duplicates of the earlier
// one's.
//
// The window of each client id in the log is a high-water mark and the ids
// seen above it, and the log's replicas take an id only if it is less than
// 16 above the mark, so a session's sequence numbers must be dense from 1:
// the client library numbers its commands 1, 2, 3, ... and a resumed
// session continues its numbering. A command the server refuses
// (rate-limited, busy, or refused while draining) is never appended and
// leaves a hole below which the mark stops; the server closes it with the
// session's floor, declared with each later append (floor.go,
// FloorAppender): every command of the connection below it is stored or
// refused. An appender without floors (replay.MemLog keeps no window)
// leaves the holes.
const (
	// PlayerClientTag marks the client ids of player sessions (bits 63..61
	// = 100).
	PlayerClientTag = uint64(1) << 63
	playerHashMask  = uint64(1)<<61 - 1
)

// PlayerClientID returns the log client id of player's commands in
// session.
func PlayerClientID(player uint32, session uint64) uint64 {
	const domain = "broadside player session\x00"
	var b [len(domain) + 12]byte
	copy(b[:], domain)
	binary.BigEndian.PutUint32(b[len(domain):], player)
	binary.BigEndian.PutUint64(b[len(domain)+4:], session)
	h := sha256.Sum256(b[:])
	return PlayerClientTag | binary.BigEndian.Uint64(h[:8])&playerHashMask
}

// CommandID returns the log id of player's command seq in session.
func CommandID(player uint32, session, seq uint64) msg.RecordID {
	return msg.RecordID{Client: PlayerClientID(player, session), Seq: seq}
}

// NewSessionID returns a random non-zero session id (what the client
// library picks per client process; the server picks one for a Hello
// without one).
func NewSessionID() uint64 {
	for {
		var b [8]byte
		rand.Read(b[:])
		if id := binary.LittleEndian.Uint64(b[:]); id != 0 {
			return id
		}
	}
}
