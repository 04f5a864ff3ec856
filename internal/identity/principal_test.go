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

// A role's groups name the principals with one of them among their
// groups or app roles; an empty group or list names no one.
func TestInAnyOf(t *testing.T) {
	p := Principal{Groups: []string{"staff", "security"}, Roles: []string{"Usher.Admin"}}
	for _, c := range []struct {
		groups []string
		want   bool
	}{
		{nil, false},
		{[]string{""}, false},
		{[]string{"finance"}, false},
		{[]string{"finance", "security"}, true},
		{[]string{"Usher.Admin"}, true},
		{[]string{"usher.admin"}, false},
	} {
		if got := p.InAnyOf(c.groups); got != c.want {
			t.Errorf("InAnyOf(%q) = %v, want %v", c.groups, got, c.want)
		}
	}
	if (Principal{}).InAnyOf([]string{""}) {
		t.Error("an empty group names a principal without groups")
	}
}
