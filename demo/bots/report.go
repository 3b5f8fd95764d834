package bots

import (
	"fmt"
	"io"
)

// WriteText writes the report's summary lines (what 'broadside bots'
// prints after its run).
func (rep Report) WriteText(out io.Writer) {
	fmt.Fprintf(out, "commands:    %d sent, %d acknowledged %s (%d durable, %d replicated), %d applied, %d rate-limited, %d turns skipped with the window full\n",
		rep.Sent, rep.Acked, rep.AckStatus, rep.Durable, rep.Replicated, rep.Applied, rep.RateLimited, rep.Skipped)
	fmt.Fprintf(out, "ack latency: p50 %.2fms  p99 %.2fms  p99.9 %.2fms  max %.2fms (sent to acknowledged %s, on one connection)\n",
		usMs(rep.AckP50us), usMs(rep.AckP99us), usMs(rep.AckP999us), usMs(rep.AckMaxus), rep.AckStatus)
	fmt.Fprintf(out, "sessions:    %d reconnections, %d commands resent", rep.Reconnects, rep.Resent)
	if rep.ResentAcks > 0 {
		fmt.Fprintf(out, "; %d acknowledged after waiting across a reconnection: p50 %.1fms max %.1fms (outage included)",
			rep.ResentAcks, usMs(rep.ResentAckP50us), usMs(rep.ResentAckMaxus))
	}
	fmt.Fprintln(out)
	fmt.Fprintf(out, "applied:     p50 %.1fms  p99 %.1fms  p99.9 %.1fms (sent to the state update of the tick that applied it)\n",
		usMs(rep.AppliedP50us), usMs(rep.AppliedP99us), usMs(rep.AppliedP999us))
	fmt.Fprintf(out, "state:       %.1f updates/s per client, inter-arrival jitter p50 %.2fms p99 %.2fms\n", rep.UpdatesPerSec, usMs(rep.JitterP50us), usMs(rep.JitterP99us))
	fmt.Fprintf(out, "bandwidth:   %.0f B/s up, %.0f B/s down per client\n", rep.UpBytesPerSec, rep.DownBytesPerSec)
	fmt.Fprintf(out, "packets:     %.1f/s up, %.1f/s down per client", rep.UpPacketsPerSec, rep.DownPacketsPerSec)
	if rep.UpdatesPerSec > 0 {
		fmt.Fprintf(out, "; %.2f down per state update", rep.DownPacketsPerSec/rep.UpdatesPerSec)
	}
	if rep.Acked > 0 {
		fmt.Fprintf(out, "; %.0f%% of acknowledgements inside state updates", 100*float64(rep.AckedInState)/float64(rep.Acked))
	}
	fmt.Fprintln(out)
}

func usMs(us int64) float64 { return float64(us) / 1000 }
