package lineage

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Asking a running server the lineage queries of 'broadside lineage': the
// client POSTs a JSON array of the command's arguments (the query and its
// flags) to {base}/lineage and gets back what the command prints there.

// RemoteQueries are the queries a server answers.
var RemoteQueries = map[string]bool{"why": true, "affected": true, "frame": true, "info": true}

// Limits of a remote query: the request's bytes and arguments, the
// answer's bytes, and how long either side waits.
const (
	maxQueryRequestBytes = 64 << 10
	maxQueryArgs         = 32
	maxQueryAnswerBytes  = 64 << 20
	queryTimeout         = 30 * time.Second
)

// AskServer sends the query args (a RemoteQueries name and its flags) to
// the server at serverURL (http:// is assumed when no scheme is given),
// with token as its admin bearer token (nil: none), and returns the answer.
func AskServer(ctx context.Context, serverURL string, token []byte, args []string) ([]byte, error) {
	body, _ := json.Marshal(args)
	url := strings.TrimSuffix(serverURL, "/") + "/lineage"
	if !strings.Contains(url, "://") {
		url = "http://" + url
	}
	client := &http.Client{Timeout: queryTimeout}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != nil {
		req.Header.Set("Authorization", "Bearer "+string(token))
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("lineage server: %w", err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, maxQueryAnswerBytes))
	if err != nil {
		return nil, fmt.Errorf("lineage server: %w", err)
	}
	if resp.StatusCode == http.StatusUnauthorized && token == nil {
		return nil, fmt.Errorf("lineage server %s: give the server's admin token (--admin-token-file)", resp.Status)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("lineage server %s: %s", resp.Status, strings.TrimSpace(string(out)))
	}
	return out, nil
}

// QueryHandler answers the queries AskServer sends from the store that
// store returns (nil: 503; release is called after each use), one query at
// a time (each indexes the store), by calling run with the arguments under
// a deadline; what run writes is the answer, an error from it a 400 (503
// when its context ended).
func QueryHandler(store func() (Store, func()), run func(ctx context.Context, s Store, args []string, out io.Writer) error) http.Handler {
	one := make(chan struct{}, 1)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "POST a JSON array of 'broadside lineage' arguments", http.StatusMethodNotAllowed)
			return
		}
		var args []string
		if err := json.NewDecoder(io.LimitReader(r.Body, maxQueryRequestBytes)).Decode(&args); err != nil || len(args) == 0 || len(args) > maxQueryArgs {
			http.Error(w, "body must be a JSON array of 1 to 32 arguments", http.StatusBadRequest)
			return
		}
		if !RemoteQueries[args[0]] {
			http.Error(w, fmt.Sprintf("unknown query %q (why, affected, frame, info)", args[0]), http.StatusBadRequest)
			return
		}
		select {
		case one <- struct{}{}:
			defer func() { <-one }()
		case <-r.Context().Done():
			return
		}
		s, release := store()
		if s == nil {
			release()
			http.Error(w, "no lineage store: the world is not running", http.StatusServiceUnavailable)
			return
		}
		// The query runs under the store's lock, with a deadline (a
		// stopping server waits for it); the answer is written after.
		ctx, cancel := context.WithTimeout(r.Context(), queryTimeout)
		var out bytes.Buffer
		err := run(ctx, s, args, &out)
		cancel()
		release()
		if err != nil {
			code := http.StatusBadRequest
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				code = http.StatusServiceUnavailable
			}
			http.Error(w, err.Error(), code)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write(out.Bytes())
	})
}
