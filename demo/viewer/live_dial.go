//go:build !js

package viewer

import (
	"context"
	"errors"
	"fmt"

	"github.com/anoptic/broadside/netcode/client"
)

// DialLive connects to the server at o.Addr over QUIC as a spectator and
// waits for the first state update.
func DialLive(ctx context.Context, o LiveOptions) (*Live, error) {
	if o.Token == "" {
		return nil, errors.New("viewer: live mode needs a token (broadside token --player NAME)")
	}
	c, err := client.Dial(ctx, client.Config{Addr: o.Addr, TLS: o.TLS, Token: o.Token, Spectator: true})
	if err != nil {
		return nil, fmt.Errorf("viewer: live %s: %w", o.Addr, err)
	}
	return NewLive(ctx, c, o)
}
