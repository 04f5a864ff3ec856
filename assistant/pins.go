package assistant

import (
	"errors"
	"net/http"
	"slices"

	"github.com/usherhq/usher/internal/httpx"
	"github.com/usherhq/usher/store"
)

// handlePin answers PUT …/runs/{id}/pin (pin the run to the top of the
// caller's list) and DELETE …/runs/{id}/pin (unpin it) with the run.
func (rt *Runtime) handlePin(pin bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		// The caller's run (ownRun answers 401 or 404 for anything else).
		run, ok := rt.ownRun(w, r)
		if !ok {
			return
		}
		if _, ok := rt.emptyBodyAndKey(w, r); !ok {
			return
		}
		var err error
		if pin {
			_, err = rt.st.PinRun(r.Context(), run.Owner, run.ID)
		} else {
			err = rt.st.UnpinRun(r.Context(), run.Owner, run.ID)
		}
		if errors.Is(err, store.ErrNotFound) {
			err = errRunNotFound
		}
		if err != nil {
			rt.fail(w, r, err)
			return
		}
		v := viewRun(run)
		v.Pinned = pin
		httpx.WriteJSON(w, http.StatusOK, v)
	}
}

// pinnedFirst marks the pinned runs of views and moves them first, the
// latest pinned first; the others keep their order.
func pinnedFirst(views []RunView, pins []store.Pin) []RunView {
	rank := make(map[string]int, len(pins))
	for i, p := range pins {
		rank[p.RunID] = i
	}
	for i := range views {
		_, views[i].Pinned = rank[views[i].ID]
	}
	slices.SortStableFunc(views, func(a, b RunView) int {
		ra, pa := rank[a.ID]
		rb, pb := rank[b.ID]
		switch {
		case pa && pb:
			return ra - rb
		case pa:
			return -1
		case pb:
			return 1
		}
		return 0
	})
	return views
}
