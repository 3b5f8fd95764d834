package lineage

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
)

func TestHTTPStoreServesAnIndex(t *testing.T) {
	ctx := context.Background()
	s := NewMemStore()
	putTestRange(t, s, testRange(0, 0, 128, 1))
	putTestRange(t, s, testRange(0, 128, 128, 129))
	putTestRange(t, s, testRange(1, 0, 64, 1))
	if err := PutKindNames(ctx, s, map[uint8]string{1: "fire"}); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/lineage/store/", StoreHandler(func() (Store, func()) { return s, func() {} }))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	remote := NewHTTPStore(srv.URL + "/lineage/store")
	local, err := LoadIndex(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	over, err := LoadIndex(ctx, remote)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(local.Stats(), over.Stats()) || over.Stats().Ranges != 3 {
		t.Fatalf("index over HTTP %+v, local %+v", over.Stats(), local.Stats())
	}
	if over.KindName(1) != "fire" {
		t.Fatalf("kind names not served: %q", over.KindName(1))
	}
	if _, err := remote.GetRange(ctx, 7, 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing range: %v", err)
	}
	if err := remote.PutMeta(ctx, "x", nil); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("write to a read-only store: %v", err)
	}
}

// A hostile or broken server gets errors, never a panic or a bad index.
func TestHTTPStoreRejectsGarbage(t *testing.T) {
	for name, body := range map[string]string{
		"not json":     "{{{",
		"out of order": `[{"Shard":1,"FirstTick":0,"LastTick":5},{"Shard":0,"FirstTick":0,"LastTick":5}]`,
		"backwards":    `[{"Shard":0,"FirstTick":9,"LastTick":5}]`,
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(body)) }))
		_, err := LoadIndex(context.Background(), NewHTTPStore(srv.URL))
		srv.Close()
		if err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// Ranges listed, but their bytes are garbage: the decoder refuses them.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ranges" {
			w.Write([]byte(`[{"Shard":0,"FirstTick":0,"LastTick":5,"Bytes":10}]`))
			return
		}
		w.Write([]byte("BSLR garbage garbage"))
	}))
	defer srv.Close()
	if _, err := LoadIndex(context.Background(), NewHTTPStore(srv.URL)); err == nil {
		t.Error("garbage range accepted")
	}
}

// TestHTTPStoreToken: WithToken's bearer token goes with every request
// (a server's admin endpoint behind --admin-token-file).
func TestHTTPStoreToken(t *testing.T) {
	s := NewMemStore()
	putTestRange(t, s, testRange(0, 0, 128, 1))
	h := StoreHandler(func() (Store, func()) { return s, func() {} })
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer sesame-sesame-sesame" {
			http.Error(w, "token required", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	if _, err := LoadIndex(context.Background(), NewHTTPStore(srv.URL)); err == nil {
		t.Fatal("loaded without the token")
	}
	ix, err := LoadIndex(context.Background(), NewHTTPStore(srv.URL).WithToken("sesame-sesame-sesame"))
	if err != nil || ix.Stats().Ranges != 1 {
		t.Fatalf("with the token: %v", err)
	}
}
