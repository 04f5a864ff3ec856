package clientmeta

// Error is every error of this package. Reason is a short sentence for the
// client (an OAuth error_description); Cause, when set, is what went wrong
// inside (a dial, TLS or JSON error) and is for logs only: it may name
// internal addresses.
type Error struct {
	Reason string
	Cause  error
}

// Error returns the Reason only, so that an Error printed into an answer
// never carries the Cause's text.
func (e *Error) Error() string { return "client metadata document: " + e.Reason }

// Unwrap returns the Cause, for errors.Is (a context deadline, say).
func (e *Error) Unwrap() error { return e.Cause }

// refuse returns an Error with reason and no cause.
func refuse(reason string) *Error { return &Error{Reason: reason} }

// fail returns an Error with reason and its cause.
func fail(reason string, cause error) *Error { return &Error{Reason: reason, Cause: cause} }
