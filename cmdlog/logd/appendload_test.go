package logd

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
)

type countingAppender struct {
	mu      sync.Mutex
	n, fail int
	sizes   map[int]int
}

func (c *countingAppender) Append(_ context.Context, data []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fail > 0 && c.n >= c.fail {
		return errors.New("log down")
	}
	c.n++
	c.sizes[len(data)]++
	return nil
}

func TestAppendLoad(t *testing.T) {
	a := &countingAppender{sizes: map[int]int{}}
	var out bytes.Buffer
	if err := (AppendLoad{Count: 1000, Concurrency: 7, Size: 33}).Run(context.Background(), &out, a); err != nil {
		t.Fatal(err)
	}
	if a.n != 1000 || a.sizes[33] != 1000 {
		t.Fatalf("%d appends, sizes %v", a.n, a.sizes)
	}
	if !strings.HasPrefix(out.String(), "appended 1000 records of 33 bytes in ") || !strings.HasSuffix(out.String(), " appends/s, 7 concurrent)\n") {
		t.Fatalf("%q", out.String())
	}
	b := &countingAppender{sizes: map[int]int{}, fail: 10}
	out.Reset()
	err := (AppendLoad{Count: 100, Concurrency: 4, Size: 1}).Run(context.Background(), &out, b)
	if err == nil || err.Error() != "after 10 appends: log down" || out.Len() != 0 {
		t.Fatalf("a failing log: %v %q", err, out.String())
	}
}
