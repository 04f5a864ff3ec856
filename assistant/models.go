package assistant

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/usherhq/usher/internal/httpx"
	"github.com/usherhq/usher/store"
)

// maxModelName bounds a model's name.
const maxModelName = 200

// ModelView is one model a run may choose, as GET /api/assistant/models
// shows it.
type ModelView struct {
	Name string `json:"name"`
	// Default: the model of a run that chose none.
	Default bool `json:"default"`
}

// Models returns the models a run may choose, the default first: Models,
// or ModelName alone (none without a name).
func (rt *Runtime) Models() []ModelView {
	names := rt.o.Models
	if len(names) == 0 && rt.o.ModelName != "" {
		names = []string{rt.o.ModelName}
	}
	out := []ModelView{}
	for _, n := range names {
		if n == rt.o.ModelName {
			out = slices.Insert(out, 0, ModelView{Name: n, Default: true})
		} else {
			out = append(out, ModelView{Name: n})
		}
	}
	return out
}

// checkModel refuses a model that is not offered.
func (rt *Runtime) checkModel(name string) error {
	offered := rt.Models()
	if slices.ContainsFunc(offered, func(m ModelView) bool { return m.Name == name }) {
		return nil
	}
	names := make([]string, len(offered))
	for i, m := range offered {
		names[i] = m.Name
	}
	shown := name
	if len(shown) > 60 {
		shown = shown[:60] + "…"
	}
	if len(names) == 0 {
		return httpx.Errorf(http.StatusBadRequest, "invalid_model", fmt.Sprintf("The model %q is not offered: this Usher offers no choice of model.", shown))
	}
	return httpx.Errorf(http.StatusBadRequest, "invalid_model", fmt.Sprintf("The model %q is not offered: choose one of %s (GET /api/assistant/models).", shown, strings.Join(names, ", ")))
}

// requestModel is the model a run's requests name: its choice, when the
// operator still offers it; otherwise none (the provider's own, which is
// the default).
func (rt *Runtime) requestModel(r store.Run) string {
	if len(rt.o.Models) == 0 {
		return ""
	}
	m, err := parseRunMetadata(r.Metadata)
	if err != nil || m.Model == nil || !slices.Contains(rt.o.Models, *m.Model) {
		return ""
	}
	return *m.Model
}

// withModel returns metadata (a JSON object, or "" for none) with its
// model set to name, every other setting kept as it is.
func withModel(metadata, name string) (string, error) {
	fields := map[string]json.RawMessage{}
	if metadata != "" {
		if err := json.Unmarshal([]byte(metadata), &fields); err != nil {
			return "", errors.New("the run's metadata is not a JSON object")
		}
	}
	b, err := json.Marshal(name)
	if err != nil {
		return "", err
	}
	fields["model"] = b
	out, err := json.Marshal(fields)
	return string(out), err
}

// SetModel sets the model the owner's run uses from its next model step
// on: one of Models.
func (rt *Runtime) SetModel(ctx context.Context, owner, id, name string) (store.Run, error) {
	if err := rt.checkModel(name); err != nil {
		return store.Run{}, err
	}
	r, err := rt.Run(ctx, owner, id)
	if err != nil {
		return store.Run{}, err
	}
	metadata, err := withModel(r.Metadata, name)
	if err != nil {
		return store.Run{}, err
	}
	if len(metadata) > store.MaxRunMetadata {
		return store.Run{}, httpx.Errorf(http.StatusBadRequest, "invalid_metadata", fmt.Sprintf("The metadata would be over %d bytes.", store.MaxRunMetadata))
	}
	out, err := rt.st.SetRunMetadata(ctx, id, metadata)
	if errors.Is(err, store.ErrNotFound) {
		return store.Run{}, errRunNotFound
	}
	return out, err
}

// handleModels lists the models a run may choose.
func (rt *Runtime) handleModels(w http.ResponseWriter, r *http.Request) {
	if _, ok := principal(r); !ok {
		rt.fail(w, r, errUnauthenticated)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, struct {
		Models []ModelView `json:"models"`
	}{rt.Models()})
}
