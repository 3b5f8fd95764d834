package lineage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Serving a store's read side over HTTP lets a client (a viewer following
// a live server) build an Index of a running match with LoadIndex, exactly
// as from a local store:
//
//	GET {base}/ranges                       JSON list of RangeInfo
//	GET {base}/range?shard=S&first=T        the encoded range (binary)
//	GET {base}/meta?name=N                  a metadata value (binary)
//
// Ranges are CRC-checked and fully validated when decoded, so a client
// trusts nothing it receives.

// maxHTTPRange bounds a range a client accepts (MaxRangeRawBytes is the
// raw bound; encoded ranges are smaller).
const maxHTTPRange = MaxRangeRawBytes

// StoreHandler serves the read side of the store that store returns (nil:
// 503) under the handler's path; release is called after each use.
func StoreHandler(store func() (Store, func())) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			http.Error(w, "GET only", http.StatusMethodNotAllowed)
			return
		}
		s, release := store()
		released := false
		unlock := func() {
			if !released {
				released = true
				release()
			}
		}
		defer unlock()
		if s == nil {
			http.Error(w, "no lineage store", http.StatusServiceUnavailable)
			return
		}
		// Read under the store's lock, answer after releasing it: a
		// client that does not read must not hold the store open.
		ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
		defer cancel()
		fail := func(err error) {
			code := http.StatusInternalServerError
			if errors.Is(err, ErrNotFound) {
				code = http.StatusNotFound
			}
			http.Error(w, err.Error(), code)
		}
		switch path := r.URL.Path; {
		case strings.HasSuffix(path, "/ranges"):
			infos, err := s.Ranges(ctx)
			unlock()
			if err != nil {
				fail(err)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(infos)
		case strings.HasSuffix(path, "/range"):
			shard, err1 := strconv.ParseUint(r.URL.Query().Get("shard"), 10, 32)
			first, err2 := strconv.ParseUint(r.URL.Query().Get("first"), 10, 64)
			if err1 != nil || err2 != nil {
				http.Error(w, "want ?shard=S&first=T", http.StatusBadRequest)
				return
			}
			b, err := s.GetRange(ctx, ShardID(shard), first)
			unlock()
			if err != nil {
				fail(err)
				return
			}
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Write(b)
		case strings.HasSuffix(path, "/meta"):
			b, err := s.GetMeta(ctx, r.URL.Query().Get("name"))
			unlock()
			if err != nil {
				fail(err)
				return
			}
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Write(b)
		default:
			http.NotFound(w, r)
		}
	})
}

// HTTPStore is a read-only Store over a StoreHandler at a base URL. Its
// write methods return ErrReadOnly.
type HTTPStore struct {
	base   string
	token  string
	client *http.Client
}

// ErrReadOnly is returned by HTTPStore's write methods.
var ErrReadOnly = errors.New("lineage: read-only store")

var _ Store = (*HTTPStore)(nil)

// NewHTTPStore returns the store served at base (e.g.
// http://127.0.0.1:9090/lineage/store).
func NewHTTPStore(base string) *HTTPStore {
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	return &HTTPStore{base: strings.TrimSuffix(base, "/"), client: &http.Client{Timeout: 30 * time.Second}}
}

// WithToken makes every request carry the admin bearer token (a server
// whose admin endpoint has --admin-token-file) and returns h.
func (h *HTTPStore) WithToken(token string) *HTTPStore {
	h.token = token
	return h
}

func (h *HTTPStore) get(ctx context.Context, path string, limit int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.base+path, nil)
	if err != nil {
		return nil, err
	}
	if h.token != "" {
		req.Header.Set("Authorization", "Bearer "+h.token)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("lineage: %s: %w", h.base, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("lineage: %s%s: %w", h.base, path, err)
	case resp.StatusCode == http.StatusNotFound:
		return nil, fmt.Errorf("lineage: %s%s: %w", h.base, path, ErrNotFound)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("lineage: %s%s: %s", h.base, path, resp.Status)
	case int64(len(b)) > limit:
		return nil, fmt.Errorf("lineage: %s%s: more than %d bytes: %w", h.base, path, limit, ErrCorrupt)
	}
	return b, nil
}

// Ranges implements Store.
func (h *HTTPStore) Ranges(ctx context.Context) ([]RangeInfo, error) {
	b, err := h.get(ctx, "/ranges", 64<<20)
	if err != nil {
		return nil, err
	}
	var infos []RangeInfo
	if err := json.Unmarshal(b, &infos); err != nil {
		return nil, fmt.Errorf("lineage: %s/ranges: %v: %w", h.base, err, ErrCorrupt)
	}
	for i, info := range infos {
		if info.LastTick < info.FirstTick || info.Bytes < 0 || info.Bytes > maxHTTPRange ||
			(i > 0 && (infos[i-1].Shard > info.Shard || infos[i-1].Shard == info.Shard && infos[i-1].FirstTick >= info.FirstTick)) {
			return nil, fmt.Errorf("lineage: %s/ranges: entry %d out of order or invalid: %w", h.base, i, ErrCorrupt)
		}
	}
	return infos, nil
}

// GetRange implements Store.
func (h *HTTPStore) GetRange(ctx context.Context, shard ShardID, firstTick uint64) ([]byte, error) {
	return h.get(ctx, fmt.Sprintf("/range?shard=%d&first=%d", shard, firstTick), maxHTTPRange)
}

// GetMeta implements Store.
func (h *HTTPStore) GetMeta(ctx context.Context, name string) ([]byte, error) {
	return h.get(ctx, "/meta?name="+url.QueryEscape(name), 1<<20)
}

// PutRange implements Store: read-only.
func (h *HTTPStore) PutRange(context.Context, RangeInfo, []byte) error { return ErrReadOnly }

// DeleteBefore implements Store: read-only.
func (h *HTTPStore) DeleteBefore(context.Context, ShardID, uint64) error { return ErrReadOnly }

// PutMeta implements Store: read-only.
func (h *HTTPStore) PutMeta(context.Context, string, []byte) error { return ErrReadOnly }

// Close implements Store.
func (h *HTTPStore) Close() error { return nil }
