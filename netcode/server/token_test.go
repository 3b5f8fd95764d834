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
	c := Claims{Player: "ada", PlayerID: 7, Expires: now.Add(time.Hour)}
	tok, err := IssueToken(testSecret, c)
	if err != nil {
		t.Fatal(err)
	}
	got, err := VerifyToken(testSecret, tok, now)
	if err != nil {
		t.Fatal(err)
	}
	if got.Player != "ada" || got.PlayerID != 7 || !got.Expires.Equal(c.Expires) {
		t.Fatalf("claims %+v", got)
	}
}

func TestTokenRejections(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	tok, _ := IssueToken(testSecret, Claims{Player: "ada", PlayerID: 7, Expires: now.Add(time.Minute)})
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
		"wrong version":  {testSecret, "v2" + tok[2:], now},
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
	if _, err := IssueToken([]byte("short"), Claims{Player: "a", PlayerID: 1}); err == nil {
		t.Fatal("short secret accepted")
	}
	if _, err := IssueToken(testSecret, Claims{Player: "", PlayerID: 1}); err == nil {
		t.Fatal("empty name accepted")
	}
	if _, err := IssueToken(testSecret, Claims{Player: "a", PlayerID: 0}); err == nil {
		t.Fatal("player id 0 accepted")
	}
	if _, err := IssueToken(testSecret, Claims{Player: strings.Repeat("x", MaxPlayerName+1), PlayerID: 1}); err == nil {
		t.Fatal("long name accepted")
	}
}

func FuzzVerifyToken(f *testing.F) {
	now := time.Unix(1_800_000_000, 0)
	tok, _ := IssueToken(testSecret, Claims{Player: "ada", PlayerID: 7, Expires: now.Add(time.Hour)})
	f.Add(tok)
	f.Add("v1..")
	f.Add("v1.AAAA.AAAA")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := VerifyToken(testSecret, s, now)
		if err == nil && (c.PlayerID == 0 || c.Player == "") {
			t.Fatalf("accepted bad claims %+v", c)
		}
	})
}
