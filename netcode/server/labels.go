package server

import (
	"context"
	"runtime/pprof"
)

// The server's goroutines carry a pprof label "component" (see
// ComponentLabel), so that a CPU profile of a running server splits its
// time by what it was doing: `broadside bench serve` reports CPU per
// player-tick by component from these labels, and
// `go tool pprof -tagfocus component=fan-out` shows one of them.
const (
	// ComponentLabel is the label's key.
	ComponentLabel = "component"
	// ComponentQUIC: the players' QUIC connections (packets, encryption,
	// UDP send and receive, QUIC's own acknowledgements).
	ComponentQUIC = "quic"
	// ComponentIntake: sessions' handshakes, reading and checking
	// commands, handing them to the log and writing nothing else.
	ComponentIntake = "intake"
	// ComponentFanOut: encoding and queueing state updates and command
	// acknowledgements for each client.
	ComponentFanOut = "fan-out"
)

// labelled runs f with the component label set (goroutines f starts
// inherit it).
func labelled(component string, f func()) {
	pprof.Do(context.Background(), pprof.Labels(ComponentLabel, component), func(context.Context) { f() })
}
