package hostile

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// AdminTarget is a server's admin HTTP endpoint (host:port) and its
// bearer token (for the requests that must pass but for their Host).
type AdminTarget struct {
	Addr  string
	Token string
}

// adminPaths are the admin endpoints an attacker wants: metrics, pprof,
// the log export, lineage queries and the lineage store.
var adminPaths = []struct{ method, path, body string }{
	{http.MethodGet, "/metrics", ""},
	{http.MethodGet, "/debug/pprof/heap", ""},
	{http.MethodGet, "/debug/pprof/cmdline", ""},
	{http.MethodGet, "/replay/log?from=1", ""},
	{http.MethodPost, "/lineage", `["info"]`},
	{http.MethodGet, "/lineage/store/ranges", ""},
	{http.MethodGet, "/world/hashes?from=1", ""},
}

// AdminAttacks returns the attacks on the admin endpoint.
func (a AdminTarget) AdminAttacks() []Attack {
	return []Attack{
		{ClassAdmin, "every admin path without a bearer token", func(ctx context.Context) (bool, string) {
			return a.expect(ctx, "", "", http.StatusUnauthorized)
		}},
		{ClassAdmin, "every admin path with a wrong bearer token", func(ctx context.Context) (bool, string) {
			return a.expect(ctx, "Bearer not-the-admin-token-0123456789", "", http.StatusUnauthorized)
		}},
		{ClassAdmin, "every admin path with a foreign Host (DNS rebinding), token included", func(ctx context.Context) (bool, string) {
			return a.expect(ctx, "Bearer "+a.Token, "attacker.example:80", http.StatusMisdirectedRequest)
		}},
	}
}

// Check reports whether the endpoint answers an authorised request (so
// that its refusals are refusals, not a dead endpoint).
func (a AdminTarget) Check(ctx context.Context) error {
	code, body, err := a.do(ctx, http.MethodGet, "/metrics", "", "Bearer "+a.Token, "")
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("hostile: admin /metrics with the token: %d %s", code, body)
	}
	return nil
}

func (a AdminTarget) expect(ctx context.Context, auth, host string, want int) (bool, string) {
	for _, p := range adminPaths {
		code, body, err := a.do(ctx, p.method, p.path, p.body, auth, host)
		if err != nil {
			return false, err.Error()
		}
		if code != want {
			return false, fmt.Sprintf("%s %s answered %d, want %d: %s", p.method, p.path, code, want, body)
		}
	}
	return true, fmt.Sprintf("all %d paths answered HTTP %d %s", len(adminPaths), want, http.StatusText(want))
}

func (a AdminTarget) do(ctx context.Context, method, path, body, auth, host string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://"+a.Addr+path, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if host != "" {
		req.Host = host
	}
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	return resp.StatusCode, strings.TrimSpace(string(b)), nil
}
