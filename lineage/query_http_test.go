package lineage

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

// TestQueryOverHTTP: AskServer's arguments reach QueryHandler's run with
// the store, its answer comes back, and bad requests, run's errors and a
// missing store are refused with the status and text a client shows.
func TestQueryOverHTTP(t *testing.T) {
	s := NewMemStore()
	var store Store = s
	var got []string
	run := func(ctx context.Context, st Store, args []string, out io.Writer) error {
		if st != s {
			t.Error("run got another store")
		}
		got = args
		if args[0] == "frame" {
			return errors.New("no such tick")
		}
		io.WriteString(out, "the answer\n")
		return nil
	}
	released := 0
	h := QueryHandler(func() (Store, func()) { return store, func() { released++ } }, run)
	srv := httptest.NewServer(http.StripPrefix("/x", h))
	defer srv.Close()
	base := srv.URL + "/x"
	ctx := context.Background()

	out, err := AskServer(ctx, base+"/", nil, []string{"why", "--tick=3"})
	if err != nil || string(out) != "the answer\n" || !slices.Equal(got, []string{"why", "--tick=3"}) {
		t.Fatalf("why: %q %v, run got %q", out, err, got)
	}
	if released != 1 {
		t.Fatalf("the store was released %d times", released)
	}
	if _, err := AskServer(ctx, base, nil, []string{"frame"}); err == nil || err.Error() != "lineage server 400 Bad Request: no such tick" {
		t.Fatalf("a failing query: %v", err)
	}
	if _, err := AskServer(ctx, base, nil, []string{"delete"}); err == nil || !strings.Contains(err.Error(), `unknown query "delete"`) {
		t.Fatalf("an unknown query: %v", err)
	}
	if _, err := AskServer(ctx, base, nil, nil); err == nil || !strings.Contains(err.Error(), "1 to 32 arguments") {
		t.Fatalf("no arguments: %v", err)
	}
	if _, err := AskServer(ctx, base, nil, make([]string, 33)); err == nil || !strings.Contains(err.Error(), "1 to 32 arguments") {
		t.Fatalf("33 arguments: %v", err)
	}
	resp, err := http.Get(base)
	if err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET: %v %v", resp, err)
	}
	resp.Body.Close()
	store = nil
	if _, err := AskServer(ctx, base, nil, []string{"info"}); err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("no store: %v", err)
	}
}

// TestAskServerToken: the token goes as a bearer token; a 401 without one
// names the flag that gives it.
func TestAskServerToken(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer t0k" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		w.Write([]byte("ok"))
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	if out, err := AskServer(context.Background(), host, []byte("t0k"), []string{"info"}); err != nil || string(out) != "ok" {
		t.Fatalf("with the token (no scheme): %q %v", out, err)
	}
	if _, err := AskServer(context.Background(), srv.URL, nil, []string{"info"}); err == nil || !strings.Contains(err.Error(), "--admin-token-file") {
		t.Fatalf("without: %v", err)
	}
	if _, err := AskServer(context.Background(), srv.URL, []byte("bad"), []string{"info"}); err == nil || !strings.Contains(err.Error(), "401 Unauthorized: no") {
		t.Fatalf("a wrong token: %v", err)
	}
}
