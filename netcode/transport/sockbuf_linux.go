//go:build linux

package transport

import (
	"net"
	"syscall"
)

// socketBufferSizes reads SO_RCVBUF and SO_SNDBUF as quic-go does (Linux
// reports twice the usable size; quic-go compares the raw value, and so do we).
func socketBufferSizes(udp *net.UDPConn) (recv, send int, ok bool) {
	raw, err := udp.SyscallConn()
	if err != nil {
		return 0, 0, false
	}
	var recvErr, sendErr error
	if err := raw.Control(func(fd uintptr) {
		recv, recvErr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF)
		send, sendErr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF)
	}); err != nil || recvErr != nil || sendErr != nil {
		return 0, 0, false
	}
	return recv, send, true
}

// forceSocketBuffers uses SO_RCVBUFFORCE/SO_SNDBUFFORCE, which bypass the
// rmem_max/wmem_max caps for processes with CAP_NET_ADMIN; it fails silently
// otherwise.
func forceSocketBuffers(udp *net.UDPConn, size int) {
	raw, err := udp.SyscallConn()
	if err != nil {
		return
	}
	_ = raw.Control(func(fd uintptr) {
		_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUFFORCE, size)
		_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUFFORCE, size)
	})
}
