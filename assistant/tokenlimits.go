package assistant

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/usherhq/usher/internal/httpx"
	"github.com/usherhq/usher/store"
)

// TokenLimits bound the model tokens, input and output together, that
// one person's requests may use in a day (UTC): every request of theirs,
// in any conversation, on any replica, counted in the store's model usage
// (GET /api/admin/usage). The zero value sets no limit.
//
// A limit is checked before each model request: a person who has reached
// theirs cannot send, edit or regenerate a message, or continue a
// conversation in a new one (429 token_limit_reached), and a turn that
// reaches it stops before its next step. The request in flight when the
// limit is reached completes, so a day's use can pass the limit by what
// one request of each of the person's turns uses.
type TokenLimits struct {
	// Daily is every person's limit; 0: none.
	Daily int64
	// Groups are the limits, instead of Daily, of the people in these
	// groups or app roles: a person in several gets the largest, and 0
	// is none.
	Groups map[string]int64
}

// For is the daily limit of a person in groups and roles; 0: none.
func (l TokenLimits) For(groups, roles []string) int64 {
	limit, listed := int64(0), false
	for g, n := range l.Groups {
		if g == "" || !slices.Contains(groups, g) && !slices.Contains(roles, g) {
			continue
		}
		if n == 0 {
			return 0
		}
		limit, listed = max(limit, n), true
	}
	if listed {
		return limit
	}
	return l.Daily
}

// TokenUsage is the body of GET /api/assistant/usage: the model tokens
// the caller's requests used today (UTC), and their limit.
type TokenUsage struct {
	// Day is today, UTC (YYYY-MM-DD).
	Day string `json:"day"`
	// Tokens are today's, input and output, in every conversation.
	Tokens int64 `json:"tokens"`
	// DailyLimit is the caller's limit; 0: none.
	DailyLimit int64 `json:"dailyLimit"`
	// ResetsAt is when the next day begins.
	ResetsAt time.Time `json:"resetsAt"`
}

// tokenUsage reads owner's tokens of today, whose limit is limit.
func (rt *Runtime) tokenUsage(ctx context.Context, owner string, limit int64) (TokenUsage, error) {
	now := rt.o.Now().UTC()
	u := TokenUsage{
		Day:        store.UsageDay(now),
		DailyLimit: limit,
		ResetsAt:   time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, time.UTC),
	}
	var err error
	u.Tokens, err = rt.st.ModelTokensOn(ctx, owner, u.Day)
	return u, err
}

// Where a limit refused a model request (usher_assistant_token_limit_refusals_total).
const (
	limitedRequest = iota // a request of the API that would have started one
	limitedTurn           // a turn, before its next step
)

// checkTokens fails when owner, as sender, has used their day's limit:
// the API's refusal (429 token_limit_reached, Retry-After the day's end)
// for a request that would ask the model (at limitedRequest), a turn's
// failure before its next step (at limitedTurn). Without a limit it reads
// nothing. A request whose idempotency key already stored what it writes
// (stored, when not nil, reads that, and only at the limit) passes: it is
// a retry of one sent before the limit was reached, answered with what
// its first attempt stored.
func (rt *Runtime) checkTokens(ctx context.Context, owner string, sender Sender, at int, stored func(context.Context) (bool, error)) error {
	limit := rt.o.TokenLimits.For(sender.Groups, sender.Roles)
	if limit == 0 {
		return nil
	}
	u, err := rt.tokenUsage(ctx, owner, limit)
	if err != nil || u.Tokens < u.DailyLimit {
		return err
	}
	if stored != nil {
		if retry, err := stored(ctx); err != nil || retry {
			return err
		}
	}
	rt.tokenLimited[at].Add(1)
	used := digits(limit)
	if at == limitedTurn {
		return &turnFailure{message: fmt.Sprintf("You have used today's %s model tokens, your daily limit. More are available at 00:00 UTC.", used)}
	}
	wait := u.ResetsAt.Sub(rt.o.Now())
	e := httpx.Errorf(http.StatusTooManyRequests, "token_limit_reached", fmt.Sprintf(
		"You cannot ask the assistant more today: you have used today's %s model tokens, your daily limit. More are available at 00:00 UTC, in %s.",
		used, untilReset(wait)))
	e.RetryAfter = max(1, int((wait+time.Second-1)/time.Second))
	return e
}

// runKeyUsed reads, for checkTokens, whether owner's run creation with
// key was stored; nil (nothing to read) without a key.
func (rt *Runtime) runKeyUsed(owner, key string) func(context.Context) (bool, error) {
	if key == "" {
		return nil
	}
	return func(ctx context.Context) (bool, error) { return rt.st.RunKeyUsed(ctx, owner, key) }
}

// messageKeyUsed reads, for checkTokens, whether the run's message (a
// post, an edit or a regeneration) with key was stored; nil without a key.
func (rt *Runtime) messageKeyUsed(runID, key string) func(context.Context) (bool, error) {
	if key == "" {
		return nil
	}
	return func(ctx context.Context) (bool, error) { return rt.st.MessageKeyUsed(ctx, runID, key) }
}

// digits writes n with its thousands grouped by commas: 500,000.
func digits(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// untilReset says d, at most a day, in hours and minutes: "3 h 12 min".
func untilReset(d time.Duration) string {
	m := int((d + time.Minute - 1) / time.Minute)
	switch {
	case m < 60:
		return fmt.Sprintf("%d min", max(m, 1))
	case m%60 == 0:
		return fmt.Sprintf("%d h", m/60)
	}
	return fmt.Sprintf("%d h %d min", m/60, m%60)
}

// handleUsage answers GET /api/assistant/usage.
func (rt *Runtime) handleUsage(w http.ResponseWriter, r *http.Request) {
	owner, ok := principal(r)
	if !ok {
		rt.fail(w, r, errUnauthenticated)
		return
	}
	s := senderOf(r)
	u, err := rt.tokenUsage(r.Context(), owner, rt.o.TokenLimits.For(s.Groups, s.Roles))
	if err != nil {
		rt.fail(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, u)
}
