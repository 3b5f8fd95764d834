// Package server is the player server: sessions over QUIC (ALPN
// wire.ALPN), authentication by signed tokens (IssueToken, VerifyToken),
// per-player rate limits, command intake into the command log (Intake), and
// the state fan-out (StateSource, Publish). It knows no particular game;
// the client side is package netcode/client.
package server
