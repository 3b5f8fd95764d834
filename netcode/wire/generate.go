// Package wire owns Broadside's FlatBuffers schemas (*.fbs in this folder),
// the Go code flatc generates from them (package fb), and a verifier.
//
// The Go FlatBuffers runtime has no verifier: its accessors panic, or
// silently read garbage, on malformed bytes. Every buffer that comes from
// outside the process (a network peer, a file, the command log) is therefore
// checked with one of the Verify functions of this package before any
// generated accessor runs. The decoders here (DecodeEnvelope,
// DecodeGameCommand) and in cmdlog/codec do so.
//
// Four schemas live here:
//   - cmdlog.fbs: Frame, the root of every cmdlog protocol message (file
//     identifier "BSCL"); encoded and decoded by cmdlog/codec.
//   - envelope.fbs: Envelope, one record the game server appends to the
//     command log ("BSEV"); see EncodeEnvelope and DecodeEnvelope.
//   - command.fbs: GameCommand, what a game client sends to the server
//     ("BSGC"); see EncodeGameCommand and DecodeGameCommand.
//   - session.fbs: SessionFrame, the rest of a player session (Hello,
//     Welcome, command results, state updates, Goodbye; "BSSN"); see
//     EncodeSession and DecodeSession.
//
// Package wire imports nothing else from the project.
package wire

// The generated code is committed. Regenerate with `go generate
// ./netcode/wire` (needs flatc 2.0.8, Debian package flatbuffers-compiler);
// TestGeneratedCodeFresh fails when the committed code is stale.
//go:generate flatc --go -o . cmdlog.fbs envelope.fbs command.fbs session.fbs
