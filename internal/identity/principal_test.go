package identity

import "testing"

func TestTenantOf(t *testing.T) {
	for _, tt := range []struct{ id, want string }{
		{Principal{Issuer: "https://login.microsoftonline.com/t1/v2.0", Tenant: "t1", ObjectID: "o1"}.ID(), "t1"},
		{Principal{Issuer: "https://idp.example.com", Subject: "alice"}.ID(), ""},
		{"alice", ""},
		{"a|b", ""},
		{"a|b|c|d", ""},
	} {
		if got := TenantOf(tt.id); got != tt.want {
			t.Errorf("TenantOf(%q) = %q, want %q", tt.id, got, tt.want)
		}
	}
}
