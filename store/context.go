package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Context accounting: each run records the size of the model context of its
// latest model step, and the model's limit, in columns of its row. A turn
// records it with a write it makes anyway (its start, a reply, the end of
// its lease: appendLeased's $16 to $19), or on its own with RecordContext.

// ContextSource says where a RunContext's Tokens come from.
type ContextSource string

// The sources of a RunContext.
const (
	// ContextEstimated: the runtime estimated the context before it sent
	// it to the model.
	ContextEstimated ContextSource = "estimated"
	// ContextReported: the model provider reported the figure (its prompt
	// tokens) after the step.
	ContextReported ContextSource = "reported"
)

// RunContext is a run's latest context accounting. The zero value means
// that none was recorded.
type RunContext struct {
	// Tokens is the size of the context, in tokens.
	Tokens int64
	// Limit is the model's context limit, in tokens, when it was recorded.
	Limit int64
	// Source says whether Tokens was estimated or reported.
	Source ContextSource
	// Seq is the sequence of the last event the context held.
	Seq int64
	// At is when the figure was recorded; the store sets it.
	At time.Time
}

// MaxContextTokens bounds a RunContext's Tokens and Limit.
const MaxContextTokens = 1 << 40

// checkRunContext validates a context accounting passed to the store.
func checkRunContext(c RunContext) error {
	var errs []error
	if c.Tokens < 0 || c.Tokens > MaxContextTokens {
		errs = append(errs, fmt.Errorf("context tokens %d are out of range", c.Tokens))
	}
	if c.Limit < 1 || c.Limit > MaxContextTokens {
		errs = append(errs, fmt.Errorf("context limit %d is out of range", c.Limit))
	}
	if c.Source != ContextEstimated && c.Source != ContextReported {
		errs = append(errs, fmt.Errorf("context source %q is neither %q nor %q", c.Source, ContextEstimated, ContextReported))
	}
	if c.Seq < 0 {
		errs = append(errs, errors.New("context sequence is negative"))
	}
	return invalid(errs...)
}

func (c *core) RecordContext(ctx context.Context, l Lease, acct RunContext, events ...NewEvent) ([]Event, error) {
	if err := errors.Join(checkLease(l), checkRunContext(acct)); err != nil {
		return nil, err
	}
	var prepared []preparedEvent
	if len(events) > 0 {
		var err error
		if prepared, err = prepareEvents(events); err != nil {
			return nil, err
		}
	}
	out, _, err := c.appendLeased(ctx, l, prepared, nil, &acct)
	return out, err
}
