//go:build !linux

package transport

import "net"

// socketBufferSizes is not implemented off Linux: the sizes are unknown, and
// no warning is logged.
func socketBufferSizes(*net.UDPConn) (recv, send int, ok bool) { return 0, 0, false }

// forceSocketBuffers does nothing off Linux.
func forceSocketBuffers(*net.UDPConn, int) {}
