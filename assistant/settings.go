package assistant

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/usherhq/usher/internal/httpx"
	"github.com/usherhq/usher/store"
)

// maxInstructions is the most characters of a person's custom
// instructions: they ride on every model request of their turns.
const maxInstructions = 4000

// SettingsView is the body of GET and PUT /api/assistant/settings: the
// caller's own settings.
type SettingsView struct {
	// Instructions are appended to the system prompt of the caller's new
	// turns.
	Instructions string `json:"instructions"`
	// DefaultModel is the model new conversations start with ("" for the
	// deployment's default); one of GET /api/assistant/models.
	DefaultModel string `json:"defaultModel"`
	// Theme is "system", "light" or "dark"; SendKey "enter" or
	// "ctrl-enter", the key that sends a message.
	Theme   string `json:"theme"`
	SendKey string `json:"sendKey"`
	// UpdatedAt is when they were last saved; absent when never.
	UpdatedAt *time.Time `json:"updatedAt,omitempty"`
}

func viewSettings(s store.Settings) SettingsView {
	v := SettingsView{Instructions: s.Instructions, DefaultModel: s.DefaultModel, Theme: s.Theme, SendKey: s.SendKey}
	if !s.UpdatedAt.IsZero() {
		v.UpdatedAt = &s.UpdatedAt
	}
	return v
}

// handleGetSettings answers GET /api/assistant/settings with the
// caller's settings.
func (rt *Runtime) handleGetSettings(w http.ResponseWriter, r *http.Request) {
	owner, ok := principal(r)
	if !ok {
		rt.fail(w, r, errUnauthenticated)
		return
	}
	s, err := rt.st.GetSettings(r.Context(), owner)
	if err != nil {
		rt.fail(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, viewSettings(s))
}

// handlePutSettings replaces the caller's settings (PUT
// /api/assistant/settings): a field left out of the body keeps its value.
func (rt *Runtime) handlePutSettings(w http.ResponseWriter, r *http.Request) {
	owner, ok := principal(r)
	if !ok {
		rt.fail(w, r, errUnauthenticated)
		return
	}
	var body struct {
		Instructions *string `json:"instructions"`
		DefaultModel *string `json:"defaultModel"`
		Theme        *string `json:"theme"`
		SendKey      *string `json:"sendKey"`
	}
	if err := decode(r, &body); err != nil {
		rt.fail(w, r, err)
		return
	}
	s, err := rt.st.GetSettings(r.Context(), owner)
	if err != nil {
		rt.fail(w, r, err)
		return
	}
	for _, f := range []struct {
		from *string
		to   *string
	}{{body.Instructions, &s.Instructions}, {body.DefaultModel, &s.DefaultModel}, {body.Theme, &s.Theme}, {body.SendKey, &s.SendKey}} {
		if f.from != nil {
			*f.to = *f.from
		}
	}
	if err := rt.checkSettings(s); err != nil {
		rt.fail(w, r, err)
		return
	}
	if s, err = rt.st.PutSettings(r.Context(), s); err != nil {
		rt.fail(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, viewSettings(s))
}

// checkSettings refuses settings the store must not keep, each with its
// own error code, before anything is written.
func (rt *Runtime) checkSettings(s store.Settings) error {
	switch {
	case !utf8.ValidString(s.Instructions) || strings.ContainsFunc(s.Instructions, isControlInText):
		return httpx.Errorf(http.StatusBadRequest, "invalid_instructions", "The instructions must be text without control characters (line breaks and tabs are fine).")
	case utf8.RuneCountInString(s.Instructions) > maxInstructions:
		return httpx.Errorf(http.StatusBadRequest, "invalid_instructions", fmt.Sprintf("The instructions are longer than %d characters.", maxInstructions))
	case !slices.Contains(store.Themes, s.Theme):
		return httpx.Errorf(http.StatusBadRequest, "invalid_theme", `The theme must be "system", "light" or "dark".`)
	case !slices.Contains(store.SendKeys, s.SendKey):
		return httpx.Errorf(http.StatusBadRequest, "invalid_send_key", `The send key must be "enter" or "ctrl-enter".`)
	case s.DefaultModel != "":
		return rt.checkModel(s.DefaultModel)
	}
	return nil
}

// isControlInText is isControl but for line breaks and tabs.
func isControlInText(r rune) bool { return isControl(r) && r != '\n' && r != '\r' && r != '\t' }
