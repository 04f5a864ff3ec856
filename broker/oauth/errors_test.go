package oauth_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/usherhq/usher/broker/oauth"
)

func TestWriteError(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                string
		status              int
		code, description   string
		wantStatus          int
		wantBody            string
		wantWWWAuthenticate string
	}{
		{"bad request", 400, oauth.CodeInvalidRequest, "client_id is required.", 400,
			`{"error":"invalid_request","error_description":"client_id is required."}`, ""},
		{"no description", 400, oauth.CodeInvalidGrant, "", 400, `{"error":"invalid_grant"}`, ""},
		{"client authentication failed", 401, oauth.CodeInvalidClient, "Client authentication failed.", 401,
			`{"error":"invalid_client","error_description":"Client authentication failed."}`, `Basic realm="oauth"`},
		{"server error", 500, oauth.CodeServerError, "Try again.", 500,
			`{"error":"server_error","error_description":"Try again."}`, ""},
		{"quote, backslash, newline and non-ASCII replaced", 400, oauth.CodeInvalidRequest, "a\"b\\c\nd\u00e9\u202e", 400,
			`{"error":"invalid_request","error_description":"a?b?c?d??"}`, ""},
		{"empty code", 400, "", "x", 400, `{"error":"server_error","error_description":"x"}`, ""},
		{"success status is not an error status", 200, oauth.CodeInvalidRequest, "", 400, `{"error":"invalid_request"}`, ""},
		{"status out of range", 999, oauth.CodeInvalidRequest, "", 400, `{"error":"invalid_request"}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			oauth.WriteError(rec, tt.status, tt.code, tt.description)
			if rec.Code != tt.wantStatus {
				t.Errorf("status %d, want %d", rec.Code, tt.wantStatus)
			}
			if got := rec.Body.String(); got != tt.wantBody+"\n" {
				t.Errorf("body %s, want %s", got, tt.wantBody)
			}
			h := rec.Header()
			for k, want := range map[string]string{
				"Content-Type":     "application/json; charset=utf-8",
				"Cache-Control":    "no-store",
				"Pragma":           "no-cache",
				"WWW-Authenticate": tt.wantWWWAuthenticate,
			} {
				if got := h.Get(k); got != want {
					t.Errorf("%s: %q, want %q", k, got, want)
				}
			}
		})
	}
}

func TestErrorWriteAndAs(t *testing.T) {
	t.Parallel()
	e := &oauth.Error{Status: http.StatusBadRequest, Code: oauth.CodeInvalidTarget, Description: "No such resource.", URI: "https://usher.example/docs/oauth"}
	rec := httptest.NewRecorder()
	e.Write(rec)
	var got map[string]string
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"error": "invalid_target", "error_description": "No such resource.", "error_uri": "https://usher.example/docs/oauth"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("body %v, want %v", got, want)
	}
	if e.Error() != "invalid_target: No such resource." {
		t.Errorf("Error() = %q", e.Error())
	}
	if (&oauth.Error{Code: "x"}).Error() != "x" {
		t.Error("Error() of a code alone")
	}

	wrapped := fmt.Errorf("authorize: %w", oauth.CheckChallenge("plain", "x"))
	var oe *oauth.Error
	if !errors.As(wrapped, &oe) || oe.Code != oauth.CodeInvalidRequest || oe.Status != 400 || !oe.Redirectable {
		t.Errorf("errors.As found %+v", oe)
	}
}
