package transport

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"
)

// datagramPair returns a client connection and the server side of it, with
// datagrams enabled as requested on each side.
func datagramPair(t *testing.T, serverDatagrams, clientDatagrams bool) (client, server *Conn) {
	t.Helper()
	srv := newEndpoint(t, func(c *Config) { c.EnableDatagrams = serverDatagrams })
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	client = dial(t, srv.Addr(), func(c *Config) { c.EnableDatagrams = clientDatagrams })
	server, err := srv.Accept(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	return client, server
}

func TestDatagramRoundTrip(t *testing.T) {
	client, server := datagramPair(t, true, true)
	if !client.DatagramsEnabled() || !server.DatagramsEnabled() {
		t.Fatal("datagrams not negotiated")
	}
	for _, size := range []int{0, 1, 100, MaxDatagramSize} {
		payload := bytes.Repeat([]byte{byte(size)}, size)
		// Datagrams are unreliable even on loopback, so resend until one
		// arrives, a bounded number of times.
		ctx, cancel := context.WithCancel(testCtx(t))
		received := make(chan []byte, 1)
		go func() {
			p, err := server.ReceiveDatagram(ctx)
			if err != nil {
				p = nil
			}
			received <- p
		}()
		var got []byte
		for attempt := 0; got == nil && attempt < 200; attempt++ {
			if err := client.SendDatagram(payload); err != nil {
				t.Fatalf("send %d bytes: %v", size, err)
			}
			select {
			case got = <-received:
			case <-time.After(50 * time.Millisecond):
			}
		}
		cancel()
		if got == nil {
			t.Fatalf("no datagram of %d bytes arrived", size)
		}
		if !bytes.Equal(got, payload) {
			t.Fatalf("received %d bytes, want the %d sent", len(got), size)
		}
		// Drain stray duplicates so the next size starts clean.
		for {
			dctx, dcancel := context.WithTimeout(testCtx(t), 20*time.Millisecond)
			_, err := server.ReceiveDatagram(dctx)
			dcancel()
			if err != nil {
				break
			}
		}
	}
}

func TestDatagramTooLarge(t *testing.T) {
	client, _ := datagramPair(t, true, true)
	err := client.SendDatagram(make([]byte, MaxDatagramCeiling+1))
	if !errors.Is(err, ErrDatagramTooLarge) {
		t.Fatalf("got %v, want ErrDatagramTooLarge", err)
	}
}

// TestDatagramRoom: a payload above MaxDatagramSize is refused while
// QUIC's packets are small, and DatagramRoom then says what fits; once
// path MTU discovery has raised the packet size (loopback allows 1,452
// bytes), a payload of MaxDatagramCeiling goes out and arrives whole.
func TestDatagramRoom(t *testing.T) {
	client, server := datagramPair(t, true, true)
	if r := client.DatagramRoom(); r != MaxDatagramCeiling {
		t.Fatalf("room before any refusal %d, want %d", r, MaxDatagramCeiling)
	}
	payload := bytes.Repeat([]byte{7}, MaxDatagramCeiling)
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	received := make(chan []byte, 64)
	go func() {
		for {
			p, err := server.ReceiveDatagram(ctx)
			if err != nil {
				return
			}
			received <- p
		}
	}()
	refused := 0
	var got []byte
	for attempt := 0; got == nil && attempt < 300; attempt++ {
		err := client.SendDatagram(payload)
		switch {
		case errors.Is(err, ErrDatagramTooLarge):
			refused++
			r := client.DatagramRoom()
			if r < MaxDatagramSize || r >= MaxDatagramCeiling {
				t.Fatalf("room after a refusal %d, want within [%d, %d)", r, MaxDatagramSize, MaxDatagramCeiling)
			}
			// What the room says fits is sent.
			if err := client.SendDatagram(payload[:r]); err != nil {
				t.Fatalf("send of the room's %d bytes: %v", r, err)
			}
		case err != nil:
			t.Fatal(err)
		}
		// Keep the connection busy both ways so that MTU probes go out
		// and get acknowledged.
		if err := server.SendDatagram([]byte("x")); err != nil {
			t.Fatal(err)
		}
		select {
		case p := <-received:
			if len(p) == MaxDatagramCeiling {
				got = p
			}
		case <-time.After(30 * time.Millisecond):
		}
	}
	if got == nil {
		t.Fatalf("no datagram of %d bytes arrived (%d refused)", MaxDatagramCeiling, refused)
	}
	if !bytes.Equal(got, payload) {
		t.Fatal("the large datagram arrived changed")
	}
	t.Logf("%d refusals before path MTU discovery let %d bytes through", refused, MaxDatagramCeiling)
}

func TestDatagramsDisabled(t *testing.T) {
	client, server := datagramPair(t, false, true)
	if client.DatagramsEnabled() {
		t.Fatal("client thinks datagrams work although the server refused them")
	}
	if err := client.SendDatagram([]byte("x")); !errors.Is(err, ErrDatagramsDisabled) {
		t.Fatalf("send: got %v, want ErrDatagramsDisabled", err)
	}
	if _, err := server.ReceiveDatagram(testCtx(t)); !errors.Is(err, ErrDatagramsDisabled) {
		t.Fatalf("receive: got %v, want ErrDatagramsDisabled", err)
	}
}
