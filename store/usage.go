package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ModelUsage is what model requests used: one person's requests of one
// purpose to one model, on one day (UTC) when it is added, and over a
// range of days when it is read back.
type ModelUsage struct {
	Principal string
	// Day is the UTC date, YYYY-MM-DD, of the requests added; empty in
	// the sums ModelUsageBetween returns.
	Day     string
	Model   string
	Purpose string
	// Requests counts the requests; InputTokens and OutputTokens are what
	// the model server counted of them.
	Requests     int64
	InputTokens  int64
	OutputTokens int64
}

// ModelUsages keeps what the model requests used, by person.
type ModelUsages interface {
	// AddModelUsage adds u's counts to its day's row of its principal,
	// model and purpose, made at the first; ErrInvalid when a field is
	// empty, Day is not a date, or a count is negative.
	AddModelUsage(ctx context.Context, u ModelUsage) error
	// ModelUsageBetween sums the rows of the days from to to (dates,
	// inclusive) by principal, model and purpose, the most tokens first
	// (then by principal, model and purpose), at most limit of them; Day
	// is empty in each. ErrInvalid when a date is not one, to is before
	// from, or limit is not positive.
	ModelUsageBetween(ctx context.Context, from, to string, limit int) ([]ModelUsage, error)
	// ModelTokensOn is the tokens, input and output, of every request
	// of principal's added to day (a date), whatever the model and
	// purpose: 0 when none was. ErrInvalid when principal is empty or
	// day is not a date.
	ModelTokensOn(ctx context.Context, principal, day string) (int64, error)
}

// UsageDay is the day, as ModelUsage.Day holds it, of the instant t.
func UsageDay(t time.Time) string { return t.UTC().Format(time.DateOnly) }

var (
	addModelUsage = sql1(`INSERT INTO model_usage (principal, day, model, purpose, requests, input_tokens, output_tokens)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (principal, day, model, purpose) DO UPDATE SET
    requests = model_usage.requests + excluded.requests,
    input_tokens = model_usage.input_tokens + excluded.input_tokens,
    output_tokens = model_usage.output_tokens + excluded.output_tokens`)

	modelUsageBetween = sql1(`SELECT principal, model, purpose,
    CAST(sum(requests) AS BIGINT), CAST(sum(input_tokens) AS BIGINT), CAST(sum(output_tokens) AS BIGINT)
FROM model_usage WHERE day >= $1 AND day <= $2
GROUP BY principal, model, purpose
ORDER BY sum(input_tokens) + sum(output_tokens) DESC, principal, model, purpose
LIMIT $3`)

	// modelTokensOn reads one person's rows of one day by the primary
	// key's first two columns.
	modelTokensOn = sql1(`SELECT CAST(coalesce(sum(input_tokens + output_tokens), 0) AS BIGINT)
FROM model_usage WHERE principal = $1 AND day = $2`)
)

func (c *core) AddModelUsage(ctx context.Context, u ModelUsage) error {
	var errs []error
	for _, f := range []struct{ name, v string }{{"principal", u.Principal}, {"model", u.Model}, {"purpose", u.Purpose}} {
		if f.v == "" {
			errs = append(errs, errors.New("model usage: "+f.name+" is empty"))
		}
		errs = append(errs, checkText("model usage "+f.name, f.v))
	}
	errs = append(errs, checkUsageDay(u.Day))
	if u.Requests < 0 || u.InputTokens < 0 || u.OutputTokens < 0 {
		errs = append(errs, fmt.Errorf("model usage: counts %d, %d, %d, want none negative", u.Requests, u.InputTokens, u.OutputTokens))
	}
	if err := invalid(errs...); err != nil {
		return err
	}
	return c.fail(c.writeOne(ctx, func(x executor) error {
		_, err := x.exec(ctx, addModelUsage, u.Principal, u.Day, u.Model, u.Purpose, u.Requests, u.InputTokens, u.OutputTokens)
		return err
	}))
}

func (c *core) ModelUsageBetween(ctx context.Context, from, to string, limit int) ([]ModelUsage, error) {
	if err := invalid(checkUsageDay(from), checkUsageDay(to), checkListLimit(limit)); err != nil {
		return nil, err
	}
	if to < from {
		return nil, invalid(fmt.Errorf("model usage: the range ends on %s, before it begins on %s", to, from))
	}
	out, err := queryAll(ctx, c.reader(), modelUsageBetween, func(r rowScanner) (ModelUsage, error) {
		var u ModelUsage
		err := r.Scan(&u.Principal, &u.Model, &u.Purpose, &u.Requests, &u.InputTokens, &u.OutputTokens)
		return u, err
	}, from, to, limit)
	return out, c.fail(err)
}

func (c *core) ModelTokensOn(ctx context.Context, principal, day string) (int64, error) {
	var errs []error
	if principal == "" {
		errs = append(errs, errors.New("model usage: principal is empty"))
	}
	if err := invalid(append(errs, checkUsageDay(day))...); err != nil {
		return 0, err
	}
	var n int64
	err := c.reader().row(ctx, modelTokensOn, principal, day).Scan(&n)
	return n, c.fail(err)
}

// checkUsageDay checks that day is a date as UsageDay writes it.
func checkUsageDay(day string) error {
	if t, err := time.Parse(time.DateOnly, day); err != nil || t.Format(time.DateOnly) != day {
		return fmt.Errorf("model usage: day %q, want a date YYYY-MM-DD", day)
	}
	return nil
}
