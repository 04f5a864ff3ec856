package identity

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
)

// Refusals of the middleware itself, before a token is verified.
var (
	errNoToken      = fmt.Errorf("%w: no bearer token", ErrUnauthenticated)
	errTokenInQuery = fmt.Errorf("%w: access_token in the query string", ErrUnauthenticated)
)

// Middleware authenticates every request to next. It takes the token only
// from the "Authorization: Bearer" header, puts the [Principal] in the
// request context (see [FromContext]) and otherwise answers, per RFC 6750:
//
//   - 400 invalid_request when the query string carries access_token,
//     even next to a valid header: tokens in URLs end up in logs;
//   - 401 with a bare Bearer challenge when no bearer token is sent;
//   - 401 invalid_token for [ErrUnauthenticated];
//   - 403 insufficient_scope for [ErrInsufficientScope];
//   - 403 user_token_required for [ErrAppToken];
//   - 403 too_many_groups for [ErrTooManyGroups], logged as a warning:
//     the issuer's configuration must change (see [GroupOverageRemedy]);
//   - 403 forbidden for [ErrForbidden].
//
// Bodies are generic JSON errors; the reason is logged, never the token.
func (v *Verifier) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := v.authenticate(r)
		if err != nil {
			v.refuse(w, r, err)
			return
		}
		next.ServeHTTP(w, r.WithContext(NewContext(r.Context(), p)))
	})
}

func (v *Verifier) authenticate(r *http.Request) (Principal, error) {
	if r.URL.Query().Has("access_token") {
		return Principal{}, errTokenInQuery
	}
	raw, err := bearerToken(r.Header)
	if err != nil {
		return Principal{}, err
	}
	return v.Verify(r.Context(), raw)
}

// bearerToken returns the token of the one Authorization header.
func bearerToken(h http.Header) (string, error) {
	values := h.Values("Authorization")
	switch {
	case len(values) == 0:
		return "", errNoToken
	case len(values) > 1:
		return "", fmt.Errorf("%w: more than one Authorization header", ErrUnauthenticated)
	}
	scheme, token, _ := strings.Cut(values[0], " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return "", errNoToken
	}
	return strings.TrimSpace(token), nil
}

func (v *Verifier) refuse(w http.ResponseWriter, r *http.Request, err error) {
	level := slog.LevelInfo
	if errors.Is(err, ErrTooManyGroups) {
		level = slog.LevelWarn // not the caller's doing: the issuer's configuration
	}
	v.logger.LogAttrs(r.Context(), level, "identity: request refused",
		slog.String("method", r.Method),
		slog.String("path", r.URL.Path),
		slog.String("reason", err.Error()))
	switch {
	case errors.Is(err, errTokenInQuery):
		writeError(w, http.StatusBadRequest, `Bearer error="invalid_request"`,
			"invalid_request", "Send the access token in the Authorization header, never in the URL.")
	case errors.Is(err, errNoToken):
		writeError(w, http.StatusUnauthorized, "Bearer",
			"unauthenticated", "An access token is required.")
	case errors.Is(err, ErrInsufficientScope):
		writeError(w, http.StatusForbidden, v.scopeChallenge(),
			"insufficient_scope", "The access token lacks a required scope.")
	case errors.Is(err, ErrAppToken):
		writeError(w, http.StatusForbidden, v.scopeChallenge(),
			"user_token_required", "An application's own token cannot be used here: sign in as a person.")
	case errors.Is(err, ErrTooManyGroups):
		writeError(w, http.StatusForbidden, "",
			"too_many_groups", "This account is in more groups than a token lists, so its groups cannot be checked: an administrator must have the identity provider send only the groups assigned to this application.")
	case errors.Is(err, ErrForbidden):
		writeError(w, http.StatusForbidden, "",
			"forbidden", "This account is not allowed to use this service.")
	default:
		writeError(w, http.StatusUnauthorized, `Bearer error="invalid_token"`,
			"unauthenticated", "The access token is invalid or expired.")
	}
}

// scopeChallenge names the delegated scopes a token must carry.
func (v *Verifier) scopeChallenge() string {
	return fmt.Sprintf(`Bearer error="insufficient_scope", scope=%q`, strings.Join(v.requiredScopes, " "))
}

func writeError(w http.ResponseWriter, status int, challenge, code, message string) {
	h := w.Header()
	if challenge != "" {
		h.Set("WWW-Authenticate", challenge)
	}
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	type body struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	_ = json.NewEncoder(w).Encode(struct {
		Error body `json:"error"`
	}{body{code, message}})
}
