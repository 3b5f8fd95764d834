package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/anoptic/broadside/internal/adminauth"
)

// TestLineageServerToken: 'lineage ... --server' sends the admin bearer
// token of --admin-token-file (and not the flag itself as a query
// argument), and without it says which flag is missing.
func TestLineageServerToken(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "admin.token")
	if err := os.WriteFile(tokenFile, []byte("lineage-admin-token-0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	guard, err := adminauth.New(adminauth.Options{Addr: "127.0.0.1:0", TokenFile: tokenFile})
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	srv := httptest.NewServer(guard.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewDecoder(r.Body).Decode(&args)
		w.Write([]byte("the answer\n"))
	})))
	defer srv.Close()
	run := func(extra ...string) (string, error) {
		cmd := newLineageCmd()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(append([]string{"info", "--server", srv.URL}, extra...))
		err := cmd.Execute()
		return out.String(), err
	}
	out, err := run("--admin-token-file", tokenFile)
	if err != nil || !strings.Contains(out, "the answer") {
		t.Fatalf("with the token: %q, %v", out, err)
	}
	if !slices.Equal(args, []string{"info"}) {
		t.Fatalf("the server was asked %q", args)
	}
	if _, err := run(); err == nil || !strings.Contains(err.Error(), "--admin-token-file") {
		t.Fatalf("without the token: %v", err)
	}
}
