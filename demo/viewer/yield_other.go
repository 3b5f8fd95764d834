//go:build !js

package viewer

// yieldCPU lets the window draw while a recording verifies; with threads
// there is nothing to do.
func yieldCPU() {}
