package assistant

import (
	"context"
	"errors"
	"net/http"

	"github.com/usherhq/usher/internal/httpx"
	"github.com/usherhq/usher/store"
)

var errRunNotQuiet = httpx.Errorf(http.StatusConflict, "run_not_quiet",
	"This session is not quiet: it is working, has a message waiting for its answer, waits for an approval, or is closed. Only a quiet session can be set aside.")

// Park sets the owner's quiet run aside at once (Idle), as the sweep does
// after IdleAfter: it stops counting against the active limit and wakes
// on its next message. A run that is working, has an unanswered message,
// waits for an approval or is closed is not parked (409 run_not_quiet);
// an Idle run is answered as it is.
func (rt *Runtime) Park(ctx context.Context, owner, id string) (store.Run, error) {
	if _, err := rt.Run(ctx, owner, id); err != nil {
		return store.Run{}, err
	}
	r, err := rt.st.ParkRun(ctx, id)
	switch {
	case errors.Is(err, store.ErrConflict):
		return store.Run{}, errRunNotQuiet
	case errors.Is(err, store.ErrNotFound):
		return store.Run{}, errRunNotFound
	case err == nil:
		// The store released the run's hold with it, as Close does.
		rt.holder.forget(id)
	}
	return r, err
}

// handlePark answers POST …/runs/{id}/park (no body) with the parked run.
func (rt *Runtime) handlePark(w http.ResponseWriter, r *http.Request) {
	owner, ok := principal(r)
	if !ok {
		rt.fail(w, r, errUnauthenticated)
		return
	}
	if _, ok := rt.emptyBodyAndKey(w, r); !ok {
		return
	}
	run, err := rt.Park(r.Context(), owner, r.PathValue("id"))
	if err != nil {
		rt.fail(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, viewRun(run))
}
