package identity

import (
	"cmp"
	"context"
	"slices"
	"strings"
)

// Principal is an authenticated caller of the API.
type Principal struct {
	// Issuer is the token's "iss"; for a multi-tenant issuer, the
	// tenant's own issuer.
	Issuer string
	// Tenant is the token's "tid" (Entra); empty for issuers without
	// tenants.
	Tenant string
	// ObjectID is the token's "oid" (Entra): the user's id in the tenant,
	// the same for every application.
	ObjectID string
	// Subject is the token's "sub" (pairwise per application in Entra).
	Subject string
	// Name is for display only ("name", else "preferred_username").
	Name string
	// Email is for display only ("email"); it may be empty or unverified.
	Email string
	// Scopes are the token's delegated scopes ("scp", else "scope").
	Scopes []string
	// Groups are the token's "groups" (Entra group object ids).
	Groups []string
	// Roles are the token's "roles" (Entra app roles).
	Roles []string
}

// ID returns the stable key of the principal: "<issuer>|<tenant>|<oid>",
// with "sub" standing in for an absent "oid" and the tenant possibly empty.
// It never uses a name or an email, which can change hands.
func (p Principal) ID() string {
	return p.Issuer + "|" + p.Tenant + "|" + cmp.Or(p.ObjectID, p.Subject)
}

// InAnyOf reports whether one of groups is among p's groups or app roles,
// as a role such as review.groups or admin.groups names its members. An
// empty group names no one, nor does an empty list.
func (p Principal) InAnyOf(groups []string) bool {
	return slices.ContainsFunc(groups, func(g string) bool {
		return g != "" && (slices.Contains(p.Groups, g) || slices.Contains(p.Roles, g))
	})
}

// TenantOf returns the tenant of a principal id (see Principal.ID), or ""
// when id is not one, such as a bare user name.
func TenantOf(id string) string {
	parts := strings.Split(id, "|")
	if len(parts) != 3 {
		return ""
	}
	return parts[1]
}

type principalKey struct{}

// NewContext returns a copy of ctx carrying p.
func NewContext(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// FromContext returns the principal carried by ctx, if any.
func FromContext(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}
