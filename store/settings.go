package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Settings are a person's own settings, keyed by their principal id.
type Settings struct {
	Principal string
	// Instructions are appended to the system prompt of their new turns.
	Instructions string
	// DefaultModel is the model their new conversations start with; ""
	// is the deployment's default.
	DefaultModel string
	// Theme is "system", "light" or "dark".
	Theme string
	// SendKey is the key that sends a message: "enter" or "ctrl-enter".
	SendKey string
	// UpdatedAt is when they were last saved; zero when never.
	UpdatedAt time.Time
}

// The values Settings.Theme and Settings.SendKey take; the first of each
// is the default.
var (
	Themes   = []string{"system", "light", "dark"}
	SendKeys = []string{"enter", "ctrl-enter"}
)

// DefaultSettings are the settings of someone who never saved any.
func DefaultSettings(principal string) Settings {
	return Settings{Principal: principal, Theme: Themes[0], SendKey: SendKeys[0]}
}

const settingsColumns = `principal, instructions, default_model, theme, send_key, updated_at`

var (
	getSettings = sql1(`SELECT ` + settingsColumns + ` FROM user_settings WHERE principal = $1`)

	putSettings = sql1(`
INSERT INTO user_settings (` + settingsColumns + `) VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (principal) DO UPDATE SET instructions = excluded.instructions,
	default_model = excluded.default_model, theme = excluded.theme,
	send_key = excluded.send_key, updated_at = excluded.updated_at
RETURNING ` + settingsColumns)
)

// checkSettings validates the settings PutSettings writes.
func checkSettings(s Settings) error {
	var errs []error
	if s.Principal == "" {
		errs = append(errs, errors.New("settings principal is empty"))
	}
	if !slices.Contains(Themes, s.Theme) {
		errs = append(errs, fmt.Errorf("theme %q is none of %q", s.Theme, Themes))
	}
	if !slices.Contains(SendKeys, s.SendKey) {
		errs = append(errs, fmt.Errorf("send key %q is none of %q", s.SendKey, SendKeys))
	}
	errs = append(errs,
		checkText("settings principal", s.Principal),
		checkText("instructions", s.Instructions),
		checkText("default model", s.DefaultModel))
	return invalid(errs...)
}

func (c *core) GetSettings(ctx context.Context, principal string) (Settings, error) {
	s, err := scanSettings(c.reader().row(ctx, getSettings, principal))
	if errors.Is(err, sql.ErrNoRows) {
		return DefaultSettings(principal), nil
	}
	return s, c.fail(err)
}

func (c *core) PutSettings(ctx context.Context, s Settings) (Settings, error) {
	if err := checkSettings(s); err != nil {
		return Settings{}, err
	}
	var out Settings
	err := c.writeOne(ctx, func(x executor) (err error) {
		out, err = scanSettings(x.row(ctx, putSettings, s.Principal, s.Instructions, s.DefaultModel, s.Theme, s.SendKey, storedTime(c.now())))
		return err
	})
	return out, c.fail(err)
}

// scanSettings reads one row of settingsColumns.
func scanSettings(row rowScanner) (Settings, error) {
	var s Settings
	err := row.Scan(&s.Principal, &s.Instructions, &s.DefaultModel, &s.Theme, &s.SendKey, at(&s.UpdatedAt))
	return s, err
}
