package httpx

import "net/http"

// LimitBody caps every request body at max bytes. A handler that reads past
// the cap gets an *http.MaxBytesError, which it reports as ErrBodyTooLarge; a
// declared Content-Length over the cap is refused before the handler runs.
func LimitBody(max int64, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > max {
			WriteError(w, r, nil, ErrBodyTooLarge)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, max)
		next.ServeHTTP(w, r)
	})
}
