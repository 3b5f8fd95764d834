package mesh

import (
	"crypto/x509"
	"net/url"
	"testing"
)

// FuzzIdentityOf: whatever URIs a peer's certificate carries, IdentityOf
// never panics, and an identity it accepts permits only ids of its role.
func FuzzIdentityOf(f *testing.F) {
	for _, s := range []string{"broadside:node:1", "broadside:role:seq", "broadside:node:99999999999", "broadside:role:client",
		"broadside:node:", "broadside:role:admin", "https://example.com/x"} {
		f.Add(s, "broadside:role:shard")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		var cert x509.Certificate
		for _, s := range []string{a, b} {
			if u, err := url.Parse(s); err == nil {
				cert.URIs = append(cert.URIs, u)
			}
		}
		id, ok, err := IdentityOf(&cert)
		if err != nil || !ok {
			return
		}
		if id.ID != 0 && id.Permits(id.ID) != nil && RoleOf(id.ID) == id.Role {
			t.Fatalf("identity %+v does not permit its own id", id)
		}
		if id.Role != RoleClient && id.Permits(ClientIDBase+1) == nil {
			t.Fatalf("identity %+v permits a client id", id)
		}
	})
}
