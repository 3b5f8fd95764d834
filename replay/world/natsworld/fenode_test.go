package natsworld

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/anoptic/broadside/cmdlog/coord/natscoord"
	"github.com/anoptic/broadside/replay/world"
)

// TestFrontEndNodeReadiness: a front end with no worker is not ready
// (no tick, sectors unowned) and says why; once every sector is leased
// and its frames arrive, /readyz answers 200 and /world names the owners.
func TestFrontEndNodeReadiness(t *testing.T) {
	e, err := natscoord.StartEmbedded(natscoord.EmbeddedOptions{StoreDir: t.TempDir(), Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown()
	nc, err := nats.Connect(e.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	frames := world.NewFrames(2, func(tick uint64) world.Frame { return &partFrame{tick: tick, parts: map[uint32]string{}} })
	node, err := StartFrontEndNode(ctxT(t), FrontEndNodeConfig{World: 1, Sectors: 2, Frames: frames, Conn: nc, Logger: quiet(), Stale: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Stop()
	ready := FrontEndReadyHandler(func() *FrontEndNode { return node })
	status := FrontEndStatusHandler(func() *FrontEndNode { return node })
	get := func(h http.Handler) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
		return rec.Code, rec.Body.String()
	}
	if code, body := get(ready); code != http.StatusServiceUnavailable || !strings.Contains(body, "no tick assembled") || !strings.Contains(body, "sector 0 has no owner") {
		t.Fatalf("/readyz with no worker: %d %q", code, body)
	}
	if code, _ := get(FrontEndReadyHandler(func() *FrontEndNode { return nil })); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz with no front end: %d", code)
	}

	// A worker leases both sectors and publishes their frames.
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	l := openLeases(t, js, "w1")
	var leases [2]Lease
	var epochs [2]uint64
	for s := range uint32(2) {
		if leases[s], err = l.Claim(ctxT(t), s); err != nil {
			t.Fatal(err)
		}
		epochs[s] = leases[s].Epoch
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for tick := uint64(1); ; tick++ {
			for s := range uint32(2) {
				_ = l.Renew(ctxT(t), &leases[s])
				b := AppendSectorFrame(nil, SectorFrame{World: 1, Sector: s, Epoch: epochs[s], Tick: tick, Published: time.Now().UnixNano(), Payload: []byte{byte(s)}})
				_ = nc.Publish(SectorSubject(1, s), b)
			}
			select {
			case <-stop:
				return
			case <-time.After(30 * time.Millisecond):
			}
		}
	}()
	defer func() { close(stop); <-done }()
	waitFor(t, "/readyz 200", func() bool { code, _ := get(ready); return code == http.StatusOK })
	code, body := get(status)
	var st FrontEndStatus
	if err := json.Unmarshal([]byte(body), &st); err != nil || code != http.StatusOK {
		t.Fatalf("/world: %d %q %v", code, body, err)
	}
	if !st.Ready || len(st.Sectors) != 2 || st.Sectors[0].Owner != "w1" || st.Sectors[1].Epoch != epochs[1] || st.Ticks == 0 {
		t.Fatalf("/world: %+v", st)
	}
}
