package bots

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/anoptic/broadside/cmdlog/msg"
	"github.com/anoptic/broadside/demo/broadside"
	"github.com/anoptic/broadside/internal/report"
	"github.com/anoptic/broadside/netcode/server"
	"github.com/anoptic/broadside/netcode/transport"
	"github.com/anoptic/broadside/netcode/wire"
)

type countingLog struct{ n chan struct{} }

func (l countingLog) AppendWithID(_ context.Context, _ msg.RecordID, data []byte) error {
	if _, err := wire.DecodeEnvelope(data); err != nil {
		return err
	}
	select {
	case l.n <- struct{}{}:
	default:
	}
	return nil
}

func TestBotsAgainstServer(t *testing.T) {
	for _, d := range []server.Durability{server.Durable, server.Replicated} {
		t.Run(d.String(), func(t *testing.T) { testBotsAgainstServer(t, d) })
	}
}

func testBotsAgainstServer(t *testing.T, durability server.Durability) {
	srv, ca, secret := startBotServer(t, durability)

	rep, err := Run(context.Background(), Config{Server: srv.Addr(), TLS: ca.ClientTLS(), Secret: secret,
		N: 4, Rate: 20, Duration: 1500 * time.Millisecond, Behaviour: "random", Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	// Each bot joins, then sends about Rate*Duration commands.
	if rep.Sent < 4*20 || rep.Acked != rep.Sent || len(rep.Errors) != 0 {
		t.Fatalf("report %+v", rep)
	}
	// What the acknowledgements said, and only that: replicated is never
	// counted as durable.
	want, durable := durability.String(), rep.Sent
	if durability == server.Replicated {
		durable = 0
	}
	if rep.AckStatus != want || rep.Durable != durable || rep.Durable+rep.Replicated != rep.Acked {
		t.Fatalf("acks said %q: %d durable, %d replicated of %d; want all %s", rep.AckStatus, rep.Durable, rep.Replicated, rep.Acked, want)
	}
	if rep.Reconnects != 0 || rep.Resent != 0 || rep.ResentAcks != 0 {
		t.Fatalf("reconnections without a lost connection: %+v", rep)
	}
	if rep.AckP50us <= 0 || rep.AckP99us < rep.AckP50us || rep.UpBytesPerSec <= 0 {
		t.Fatalf("latency/bandwidth not measured: %+v", rep)
	}
}

// TestEachBotKeepsItsRate: the bots of a socket group take their turns
// from one driver, each bot on its own schedule: every bot sends its join
// and about Rate × Duration commands, never more than its schedule
// allows (a driver that served a bot at every wake-up of the group would
// send several times as many), and every command is acknowledged once.
func TestEachBotKeepsItsRate(t *testing.T) {
	srv, ca, secret := startBotServer(t, server.Durable)
	var mu sync.Mutex
	acked := map[uint32]map[uint64]int{}
	const n, rate, dur = 6, 25, 2 * time.Second
	rep, err := Run(context.Background(), Config{Server: srv.Addr(), TLS: ca.ClientTLS(), Secret: secret,
		N: n, Rate: rate, Duration: dur, Behaviour: Random, Seed: 5, BotsPerSocket: 3,
		OnAck: func(player uint32, seq uint64, _ wire.AckStatus) {
			mu.Lock()
			defer mu.Unlock()
			if acked[player] == nil {
				acked[player] = map[uint64]int{}
			}
			acked[player][seq]++
		}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Acked != rep.Sent || len(rep.Errors) != 0 {
		t.Fatalf("report %+v", rep)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(acked) != n {
		t.Fatalf("%d bots acknowledged, want %d", len(acked), n)
	}
	turns := rate * dur.Seconds()
	for p, seqs := range acked {
		for seq, k := range seqs {
			if k != 1 {
				t.Fatalf("bot %d: command %d acknowledged %d times", p, seq, k)
			}
		}
		// The join, then one command per turn: dense from 1.
		sent := float64(len(seqs))
		if sent < 1+0.6*turns || sent > 1+turns+2 {
			t.Fatalf("bot %d sent %v commands in %v at %v/s, want the join and about %v", p, sent, dur, rate, turns)
		}
	}
}

// TestStateErrorsSayWhatFailed: the report names what went wrong with a
// state update (it used to count every failure as "state", printed as
// "state: 1").
func TestStateErrorsSayWhatFailed(t *testing.T) {
	var tr broadside.StateTracker
	_, err := tr.Apply(30, 25, []byte{1, 0, 0, 0, 0})
	if got := StateErrorKind(err); got != "state: base not held" {
		t.Fatalf("delta against a tick not held: kind %q (%v)", got, err)
	}
	_, err = tr.Apply(31, 0, []byte{9})
	if got := StateErrorKind(err); got != "state: malformed" {
		t.Fatalf("malformed update: kind %q (%v)", got, err)
	}
	st := &stats{errors: map[string]int64{}, firstErr: map[string]string{}}
	st.errDetail(StateErrorKind(err), err.Error())
	if st.firstErr["state: malformed"] == "" || st.errors["state: malformed"] != 1 {
		t.Fatalf("errors %v, first %v", st.errors, st.firstErr)
	}
}

// BenchmarkBotsCPU: the process's CPU (server and bots: one process) per
// command acknowledged, for 40 bots at 30 commands/s against a server
// whose log stores at once and which sends no state, with a socket per
// bot and with the bots sharing sockets (Config.BotsPerSocket). CPU time
// per command, unlike latency, holds up on a loaded machine.
func BenchmarkBotsCPU(b *testing.B) {
	for _, per := range []int{1, 32} {
		b.Run(fmt.Sprintf("bots-per-socket-%d", per), func(b *testing.B) {
			srv, ca, secret := startBotServer(b, server.Durable)
			// Measured between the first and the last progress
			// snapshot: the bots connected and playing, no handshakes.
			var cpu time.Duration
			var acked int64
			for b.Loop() {
				var first, last Snapshot
				var cpu0, cpu1 time.Duration
				_, err := Run(context.Background(), Config{Server: srv.Addr(), TLS: ca.ClientTLS(), Secret: secret,
					N: 40, Rate: 30, Duration: 4 * time.Second, Behaviour: Random, Seed: 3, BotsPerSocket: per,
					Progress: func(s Snapshot) {
						if first.Elapsed == 0 {
							first, cpu0 = s, report.ProcessCPU()
						}
						last, cpu1 = s, report.ProcessCPU()
					}})
				if err != nil {
					b.Fatal(err)
				}
				cpu += cpu1 - cpu0
				acked += last.Durable - first.Durable
			}
			if acked > 0 {
				b.ReportMetric(float64(cpu.Microseconds())/float64(acked), "cpu-µs/cmd")
			}
		})
	}
}

// startBotServer starts a game server on loopback whose log stores at once
// (countingLog) and which sends no state, stopped when tb ends; it returns
// the server, the CA its clients trust and the token secret.
func startBotServer(tb testing.TB, durability server.Durability) (*server.Server, *transport.DevCA, []byte) {
	tb.Helper()
	ca, err := transport.NewDevCA()
	if err != nil {
		tb.Fatal(err)
	}
	stls, err := ca.ServerTLS("localhost")
	if err != nil {
		tb.Fatal(err)
	}
	secret := []byte("bots-test-secret-0123456789")
	srv, err := server.New(server.Config{ListenAddr: "127.0.0.1:0", TLS: stls, Secret: secret,
		Log: countingLog{n: make(chan struct{}, 1)}, Durability: durability})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	tb.Cleanup(func() { cancel(); <-done })
	return srv, ca, secret
}
