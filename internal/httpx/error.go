package httpx

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
)

// Error is an error a client may see: a stable machine-readable Code, a
// human-readable Message, and the HTTP Status it is sent with. Anything that
// is not an *Error is logged and answered with a generic 500, so internal
// text (SQL, token parser detail, stack) never reaches a client.
type Error struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
	// RetryAfter, when positive, is sent as the Retry-After header: the
	// seconds after which the request may succeed.
	RetryAfter int `json:"-"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Errorf builds an *Error.
func Errorf(status int, code, message string) *Error {
	return &Error{Status: status, Code: code, Message: message}
}

// Common errors.
var (
	ErrNotFound         = &Error{Status: http.StatusNotFound, Code: "not_found", Message: "The resource does not exist."}
	ErrBodyTooLarge     = &Error{Status: http.StatusRequestEntityTooLarge, Code: "body_too_large", Message: "The request body is too large."}
	ErrRequestTimeout   = &Error{Status: http.StatusRequestTimeout, Code: "request_timeout", Message: "The request was not received in time."}
	ErrMethodNotAllowed = &Error{Status: http.StatusMethodNotAllowed, Code: "method_not_allowed", Message: "The method is not allowed here."}
	errInternal         = &Error{Status: http.StatusInternalServerError, Code: "internal", Message: "Something went wrong on our side. It has been logged."}
	errUnavailable      = &Error{Status: http.StatusServiceUnavailable, Code: "unavailable",
		Message: "Usher cannot reach its database just now. Try again in a moment."}
)

// unavailable is an error of a dependency that is out of reach for a
// while, such as store.ErrUnavailable: the request may succeed if sent
// again.
type unavailable interface {
	error
	Unavailable() bool
}

// Unavailable reports whether err says that a dependency is out of reach
// for a while (it is or wraps an error whose Unavailable method reports
// true, as store.ErrUnavailable does): a handler answers it 503 with
// RetryAfter rather than a generic 500.
func Unavailable(err error) bool {
	u, ok := errors.AsType[unavailable](err)
	return ok && u.Unavailable()
}

// RetryAfter is the Retry-After, in seconds, of a 503 for an unavailable
// dependency.
const RetryAfter = "1"

// errorBody is the one error shape of every Usher API response.
type errorBody struct {
	Error *Error `json:"error"`
}

// WriteError answers with err's shape when it is (or wraps) an *Error, and
// otherwise logs err and answers a generic 500, or a 503 with Retry-After
// when err says a dependency is unavailable for a while.
func WriteError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	var e *Error
	if !errors.As(err, &e) {
		if log != nil {
			log.ErrorContext(r.Context(), "request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		}
		e = errInternal
		if Unavailable(err) {
			e = errUnavailable
			w.Header().Set("Retry-After", RetryAfter)
		}
	}
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	WriteJSON(w, e.Status, errorBody{Error: e})
}

// WriteJSON writes v as a JSON response with the given status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
