package transport

import (
	"log/slog"
	"net"
	"os"
	"sync"
)

// desiredSocketBuffer is the UDP buffer size quic-go asks for (7 MiB).
const desiredSocketBuffer = 7 << 20

// quicBufferWarningEnv is quic-go's switch for its own buffer warning, which
// it prints with the standard log package.
const quicBufferWarningEnv = "QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING"

var bufferWarningOnce sync.Once

// tuneSocketBuffers asks for 7 MiB receive and send buffers before quic-go
// sees the socket, as quic-go would, and reports a shortfall once per process
// through the endpoint's slog logger instead of quic-go's log.Printf. Unless
// the user set QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING themselves, it is set
// to true so the warning is not printed twice.
func tuneSocketBuffers(udp *net.UDPConn, logger *slog.Logger) {
	_ = udp.SetReadBuffer(desiredSocketBuffer)
	_ = udp.SetWriteBuffer(desiredSocketBuffer)
	recv, send, ok := socketBufferSizes(udp)
	if ok && (recv < desiredSocketBuffer || send < desiredSocketBuffer) {
		forceSocketBuffers(udp, desiredSocketBuffer)
		recv, send, ok = socketBufferSizes(udp)
	}
	bufferWarningOnce.Do(func() {
		if _, set := os.LookupEnv(quicBufferWarningEnv); !set {
			_ = os.Setenv(quicBufferWarningEnv, "true")
		}
		if ok && (recv < desiredSocketBuffer || send < desiredSocketBuffer) {
			logger.Warn("transport: UDP socket buffers below what QUIC wants; throughput may suffer. "+
				"As root: sysctl -w net.core.rmem_max=7500000 net.core.wmem_max=7500000",
				"recv_bytes", recv, "send_bytes", send, "wanted_bytes", desiredSocketBuffer)
		}
	})
}
