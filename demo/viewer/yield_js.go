//go:build js

package viewer

import "time"

// yieldSlice is how long the background verification computes before it
// gives the browser's event loop a turn.
const yieldSlice = 8 * time.Millisecond

var lastYield time.Time

// yieldCPU lets the browser draw frames while a recording verifies: Go on
// js/wasm has one thread and no preemption, so a goroutine that computes
// for seconds would freeze the page. Every yieldSlice it sleeps, which
// parks every goroutine and hands control back to the event loop
// (requestAnimationFrame, input) until a timer wakes it.
func yieldCPU() {
	if time.Since(lastYield) < yieldSlice {
		return
	}
	time.Sleep(time.Millisecond)
	lastYield = time.Now()
}
