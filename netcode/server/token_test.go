package server

import (
	"errors"
	"strings"
	"testing"
	"time"
)

var testSecret = []byte("0123456789abcdef-test-secret")

func TestTokenRoundTrip(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	for _, aud := range []Audience{AudiencePlayer, AudienceSpectator} {
		c := Claims{Player: "ada", PlayerID: 7, Audience: aud, ID: 42, IssuedAt: now.Add(-time.Second), Expires: now.Add(time.Hour)}
		tok, err := IssueToken(testSecret, c)
		if err != nil {
			t.Fatal(err)
		}
		got, err := VerifyToken(testSecret, tok, now)
		if err != nil {
			t.Fatal(err)
		}
		if got.Player != "ada" || got.PlayerID != 7 || got.Audience != aud || got.ID != 42 ||
			!got.IssuedAt.Equal(c.IssuedAt) || !got.Expires.Equal(c.Expires) {
			t.Fatalf("claims %+v, want %+v", got, c)
		}
	}
}

// TestTokenIDsDiffer: two tokens issued with the same claims are two
// tokens (a random id each), and the later is newer.
func TestTokenIDsDiffer(t *testing.T) {
	now := time.Now()
	c := Claims{Player: "ada", PlayerID: 7, Audience: AudiencePlayer, Expires: now.Add(time.Hour)}
	a, _ := IssueToken(testSecret, c)
	b, _ := IssueToken(testSecret, c)
	ca, err1 := VerifyToken(testSecret, a, now)
	cb, err2 := VerifyToken(testSecret, b, now)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if ca.ID == cb.ID || ca.ID == 0 {
		t.Fatalf("token ids %d and %d", ca.ID, cb.ID)
	}
	if !cb.newer(ca) && !cb.IssuedAt.Equal(ca.IssuedAt) {
		t.Fatalf("second token %v not newer than first %v", cb.IssuedAt, ca.IssuedAt)
	}
}

func TestTokenRejections(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	tok, _ := IssueToken(testSecret, Claims{Player: "ada", PlayerID: 7, Audience: AudiencePlayer, IssuedAt: now, Expires: now.Add(time.Minute)})
	cases := map[string]struct {
		secret []byte
		token  string
		now    time.Time
	}{
		"expired":        {testSecret, tok, now.Add(time.Minute)},
		"wrong secret":   {[]byte("another-secret-of-16b"), tok, now},
		"tampered body":  {testSecret, strings.Replace(tok, tok[5:6], flip(tok[5:6]), 1), now},
		"truncated":      {testSecret, tok[:len(tok)-3], now},
		"not a token":    {testSecret, "hello", now},
		"empty":          {testSecret, "", now},
		"old version":    {testSecret, "v1" + tok[2:], now},
		"huge":           {testSecret, strings.Repeat("a", 10000), now},
		"bad base64 sig": {testSecret, tok + "!", now},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := VerifyToken(tc.secret, tc.token, tc.now); !errors.Is(err, ErrBadToken) {
				t.Fatalf("got %v, want ErrBadToken", err)
			}
		})
	}
}

func flip(s string) string {
	if s == "A" {
		return "B"
	}
	return "A"
}

func TestIssueTokenValidates(t *testing.T) {
	now := time.Now()
	cases := map[string]struct {
		secret []byte
		c      Claims
	}{
		"short secret":  {[]byte("short"), Claims{Player: "a", PlayerID: 1}},
		"empty name":    {testSecret, Claims{Player: "", PlayerID: 1}},
		"player id 0":   {testSecret, Claims{Player: "a", PlayerID: 0}},
		"long name":     {testSecret, Claims{Player: strings.Repeat("x", MaxPlayerName+1), PlayerID: 1}},
		"audience":      {testSecret, Claims{Player: "a", PlayerID: 1, Audience: 7}},
		"long lifetime": {testSecret, Claims{Player: "a", PlayerID: 1, IssuedAt: now, Expires: now.Add(MaxTokenLifetime + time.Second)}},
	}
	for name, tc := range cases {
		if _, err := IssueToken(tc.secret, tc.c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestParseAudience(t *testing.T) {
	for _, a := range []Audience{AudiencePlayer, AudienceSpectator} {
		if got, err := ParseAudience(a.String()); err != nil || got != a {
			t.Fatalf("%s: %v %v", a, got, err)
		}
	}
	if _, err := ParseAudience("admin"); err == nil {
		t.Fatal("admin accepted")
	}
}

func FuzzVerifyToken(f *testing.F) {
	now := time.Unix(1_800_000_000, 0)
	tok, _ := IssueToken(testSecret, Claims{Player: "ada", PlayerID: 7, Audience: AudiencePlayer, IssuedAt: now, Expires: now.Add(time.Hour)})
	f.Add(tok)
	f.Add("v2..")
	f.Add("v2.AAAA.AAAA")
	f.Add("v1.AAAA.AAAA")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := VerifyToken(testSecret, s, now)
		if err == nil && (c.PlayerID == 0 || c.Player == "" || c.Audience > AudiencePlayer || !now.Before(c.Expires)) {
			t.Fatalf("accepted bad claims %+v", c)
		}
	})
}

// FuzzTokenBody signs arbitrary bodies with the secret (a leaked or
// misused secret): verification never panics and never accepts claims
// outside the rules.
func FuzzTokenBody(f *testing.F) {
	now := time.Unix(1_800_000_000, 0)
	f.Add([]byte{2, 1, 0, 0, 0, 7})
	f.Add(make([]byte, tokenFixed+1))
	f.Fuzz(func(t *testing.T, body []byte) {
		tok := signBody(testSecret, body)
		c, err := VerifyToken(testSecret, tok, now)
		if err == nil && (c.PlayerID == 0 || c.Player == "" || c.Audience > AudiencePlayer || c.Expires.Sub(c.IssuedAt) > MaxTokenLifetime) {
			t.Fatalf("accepted bad claims %+v", c)
		}
	})
}
