package assistant

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"net/http"
	"time"

	"github.com/usherhq/usher/internal/httpx"
)

// openAPIDocument describes the whole HTTP API (the Assistant API, the
// approvals API, /api/me) in OpenAPI 3.1. It is written by hand, and
// openapi_test.go holds it to the code: the routes the handlers register,
// the error codes they send, the fields of the types they encode.
//
//go:embed openapi.json
var openAPIDocument []byte

// OpenAPIHandler serves the OpenAPI document of Usher's API, to mount at
// GET /api/openapi.json. It needs no authentication: it describes the API
// and holds no data. Clients revalidate it (Cache-Control: no-cache) with
// its ETag, so that a new version of the server is seen at once.
func OpenAPIHandler() http.Handler {
	sum := sha256.Sum256(openAPIDocument)
	etag := `"` + hex.EncodeToString(sum[:16]) + `"`
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			httpx.WriteError(w, r, nil, httpx.ErrMethodNotAllowed)
			return
		}
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("ETag", etag)
		// ServeContent answers If-None-Match with 304, and HEAD.
		http.ServeContent(w, r, "openapi.json", time.Time{}, bytes.NewReader(openAPIDocument))
	})
}
