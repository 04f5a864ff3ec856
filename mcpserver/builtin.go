package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/usherhq/usher/store"
)

// Runs reads runs and their events for the built-in session tools;
// store.Store implements it.
type Runs interface {
	ListRuns(ctx context.Context, owner string) ([]store.Run, error)
	GetRun(ctx context.Context, id string) (store.Run, error)
	ListEvents(ctx context.Context, runID string, after int64, limit int) ([]store.Event, error)
}

// ApprovalLister lists a principal's approvals for approvals_list;
// store.Store implements it.
type ApprovalLister interface {
	ListApprovals(ctx context.Context, principal string, status ...store.ApprovalStatus) ([]store.Approval, error)
}

// builtinSpec is a built-in tool before it is hashed.
type builtinSpec struct {
	def      ToolDefinition
	validate func(json.RawMessage) error
	call     func(context.Context, json.RawMessage) (*mcp.CallToolResult, error)
}

// input is the arguments of a built-in tool: decoded strictly, then
// checked against the same bounds as its input schema.
type input interface {
	check() error
}

// builtin makes a built-in tool whose handler takes In and returns Out, as
// structured content and as its JSON text. run returns a toolError for a
// failure the caller should read (a missing note, say); any other error is
// logged and reported generically.
func builtin[In input, Out any](def ToolDefinition, run func(context.Context, Caller, In) (Out, error)) builtinSpec {
	validate := func(args json.RawMessage) error {
		var in In
		return decodeArguments(args, &in)
	}
	call := func(ctx context.Context, args json.RawMessage) (*mcp.CallToolResult, error) {
		var in In
		if err := decodeArguments(args, &in); err != nil {
			return errorResult("The arguments are not valid: " + argumentProblem(err)), nil
		}
		c, ok := CallerFromContext(ctx)
		if !ok {
			return nil, errors.New("no caller in the context")
		}
		out, err := run(ctx, c, in)
		var te toolError
		if errors.As(err, &te) {
			return errorResult(string(te)), nil
		}
		if err != nil {
			return nil, err
		}
		text, err := json.Marshal(out)
		if err != nil {
			return nil, err
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(text)}}, StructuredContent: out}, nil
	}
	return builtinSpec{def: def, validate: validate, call: call}
}

// toolError is a failure of a built-in tool that its caller may read.
type toolError string

func (e toolError) Error() string { return string(e) }

// argumentError is a problem with arguments that the caller may read.
type argumentError struct{ msg string }

func (e argumentError) Error() string { return e.msg }

// argumentErrorf returns an argumentError.
func argumentErrorf(format string, args ...any) error {
	return argumentError{fmt.Sprintf(format, args...)}
}

// decodeArguments decodes canonical arguments into in, refusing unknown
// members and values of the wrong type, then checks in. Names are matched
// exactly, as the policy reads them (encoding/json v2 semantics):
// encoding/json would take "NAME" or "ſtatus" (U+017F) for a field
// "name" or "status".
func decodeArguments[In input](args json.RawMessage, in *In) error {
	if err := jsonv2.Unmarshal(args, in, jsonv2.RejectUnknownMembers(true)); err != nil {
		var se *jsonv2.SemanticError
		switch {
		case errors.As(err, &se) && errors.Is(se.Err, jsonv2.ErrUnknownName):
			return argumentErrorf("there is no argument %.64q.", memberName(se.JSONPointer))
		case errors.As(err, &se) && se.GoType != nil:
			return argumentErrorf("%q has the wrong type.", memberName(se.JSONPointer))
		}
		return argumentErrorf("they do not decode.")
	}
	return (*in).check()
}

// memberName is the name of the top-level argument a JSON pointer is in.
func memberName(p jsontext.Pointer) string {
	for name := range p.Tokens() {
		return name
	}
	return ""
}

// checkLength checks a string's length in characters, as JSON Schema's
// minLength and maxLength count.
func checkLength(name, s string, min, max int) error {
	if n := utf8.RuneCountInString(s); n < min || n > max {
		if min == max {
			return argumentErrorf("%q must have %d characters.", name, min)
		}
		return argumentErrorf("%q must have %d to %d characters.", name, min, max)
	}
	return nil
}

// builtinTools are the built-in tools over the caller's own data.
func builtinTools(o CatalogOptions) []builtinSpec {
	return []builtinSpec{
		builtin(ToolDefinition{
			Name:         "sessions_list",
			Title:        "List my sessions",
			Description:  "Lists the caller's own sessions (conversations with the assistant), newest first: id, title, status, message count and a preview. Use session_read to read one.",
			InputSchema:  json.RawMessage(sessionsListInputSchema),
			OutputSchema: json.RawMessage(sessionsListOutputSchema),
			Annotations:  json.RawMessage(readOnlyAnnotations),
		}, func(ctx context.Context, c Caller, in sessionsListInput) (sessionsListOutput, error) {
			runs, err := o.Runs.ListRuns(ctx, c.Subject)
			if err != nil {
				return sessionsListOutput{}, err
			}
			limit := defaultSessions
			if in.Limit != nil {
				limit = *in.Limit
			}
			out := sessionsListOutput{Sessions: []sessionSummary{}}
			for _, r := range runs[:min(limit, len(runs))] {
				out.Sessions = append(out.Sessions, summarize(r))
			}
			return out, nil
		}),
		builtin(ToolDefinition{
			Name:         "session_read",
			Title:        "Read one of my sessions",
			Description:  "Reads one of the caller's own sessions: its summary and its events (messages, tool calls and results) in order, a page at a time. Pass nextAfter back as after to read the next page.",
			InputSchema:  json.RawMessage(sessionReadInputSchema),
			OutputSchema: json.RawMessage(sessionReadOutputSchema),
			Annotations:  json.RawMessage(readOnlyAnnotations),
		}, func(ctx context.Context, c Caller, in sessionReadInput) (sessionReadOutput, error) {
			r, err := o.Runs.GetRun(ctx, in.ID)
			// Another owner's run is answered exactly like a missing
			// one: its existence is not the caller's business.
			if errors.Is(err, store.ErrNotFound) || (err == nil && (r.Owner != c.Subject || !r.DeletedAt.IsZero())) {
				return sessionReadOutput{}, toolError("There is no session with this id.")
			}
			if err != nil {
				return sessionReadOutput{}, err
			}
			var after int64
			if in.After != nil {
				after = *in.After
			}
			limit := defaultEvents
			if in.Limit != nil {
				limit = *in.Limit
			}
			events, err := o.Runs.ListEvents(ctx, r.ID, after, limit+1)
			if err != nil {
				return sessionReadOutput{}, err
			}
			out := sessionReadOutput{Session: summarize(r), Events: []sessionEvent{}}
			if len(events) > limit {
				events = events[:limit]
				next := events[limit-1].Seq
				out.NextAfter = &next
			}
			for _, e := range events {
				out.Events = append(out.Events, sessionEvent{Seq: e.Seq, Type: e.Type, CreatedAt: e.CreatedAt, Payload: e.Payload})
			}
			return out, nil
		}),
		builtin(ToolDefinition{
			Name:         "approvals_list",
			Title:        "List my pending approvals",
			Description:  "Lists the caller's tool calls that wait for a person's approval and have not expired: id, tool, reason and arguments. A call runs once it is approved and retried unchanged.",
			InputSchema:  json.RawMessage(emptyInputSchema),
			OutputSchema: json.RawMessage(approvalsListOutputSchema),
			Annotations:  json.RawMessage(readOnlyAnnotations),
		}, func(ctx context.Context, c Caller, _ noInput) (approvalsListOutput, error) {
			list, err := o.Approvals.ListApprovals(ctx, c.Subject, store.ApprovalPending)
			if err != nil {
				return approvalsListOutput{}, err
			}
			now := o.Now()
			out := approvalsListOutput{Approvals: []approvalSummary{}}
			for _, a := range list {
				if a.Binding.Principal != c.Subject || !a.ExpiresAt.After(now) {
					continue
				}
				out.Approvals = append(out.Approvals, approvalSummary{
					ID: a.ID, Tool: a.Binding.Tool, Status: string(a.Status), Reason: a.Reason,
					PolicyIDs: nonNil(a.PolicyIDs), Arguments: objectOr(a.Arguments), CreatedAt: a.CreatedAt, ExpiresAt: a.ExpiresAt,
				})
			}
			return out, nil
		}),
	}
}

// Page sizes of the session tools.
const (
	defaultSessions = 20
	defaultEvents   = 50
)

type noInput struct{}

func (noInput) check() error { return nil }

type sessionsListInput struct {
	Limit *int `json:"limit"`
}

func (in sessionsListInput) check() error {
	if in.Limit != nil && (*in.Limit < 1 || *in.Limit > 100) {
		return argumentErrorf(`"limit" must be between 1 and 100.`)
	}
	return nil
}

type sessionReadInput struct {
	ID    string `json:"id"`
	After *int64 `json:"after"`
	Limit *int   `json:"limit"`
}

func (in sessionReadInput) check() error {
	if err := checkLength("id", in.ID, 1, 128); err != nil {
		return err
	}
	if in.After != nil && *in.After < 0 {
		return argumentErrorf(`"after" must not be negative.`)
	}
	if in.Limit != nil && (*in.Limit < 1 || *in.Limit > 200) {
		return argumentErrorf(`"limit" must be between 1 and 200.`)
	}
	return nil
}

type sessionSummary struct {
	ID           string    `json:"id"`
	Title        string    `json:"title"`
	Status       string    `json:"status"`
	MessageCount int       `json:"messageCount"`
	Preview      string    `json:"preview"`
	CreatedAt    time.Time `json:"createdAt"`
	UpdatedAt    time.Time `json:"updatedAt"`
}

func summarize(r store.Run) sessionSummary {
	return sessionSummary{ID: r.ID, Title: r.Title, Status: string(r.Status), MessageCount: r.MessageCount,
		Preview: r.Preview, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
}

type sessionsListOutput struct {
	Sessions []sessionSummary `json:"sessions"`
}

type sessionEvent struct {
	Seq       int64           `json:"seq"`
	Type      string          `json:"type"`
	CreatedAt time.Time       `json:"createdAt"`
	Payload   json.RawMessage `json:"payload"`
}

type sessionReadOutput struct {
	Session   sessionSummary `json:"session"`
	Events    []sessionEvent `json:"events"`
	NextAfter *int64         `json:"nextAfter,omitempty"`
}

type approvalSummary struct {
	ID        string          `json:"id"`
	Tool      string          `json:"tool"`
	Status    string          `json:"status"`
	Reason    string          `json:"reason"`
	PolicyIDs []string        `json:"policyIds"`
	Arguments json.RawMessage `json:"arguments"`
	CreatedAt time.Time       `json:"createdAt"`
	ExpiresAt time.Time       `json:"expiresAt"`
}

type approvalsListOutput struct {
	Approvals []approvalSummary `json:"approvals"`
}

// nonNil returns s, or an empty slice for nil, so that it encodes as [].
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// objectOr returns a JSON object, or {} for none.
func objectOr(v json.RawMessage) json.RawMessage {
	if len(v) == 0 {
		return json.RawMessage(`{}`)
	}
	return v
}

// The annotations of tools that only read the caller's own data. They are
// hints to clients; the policy never reads them.
const readOnlyAnnotations = `{"readOnlyHint":true,"destructiveHint":false,"idempotentHint":true,"openWorldHint":false}`

const emptyInputSchema = `{"type":"object","properties":{},"additionalProperties":false}`

const sessionsListInputSchema = `{
	"type": "object",
	"properties": {
		"limit": {"type": "integer", "minimum": 1, "maximum": 100, "description": "How many sessions to return, newest first. Default 20."}
	},
	"additionalProperties": false
}`

const sessionSummarySchema = `{
	"type": "object",
	"properties": {
		"id": {"type": "string"},
		"title": {"type": "string"},
		"status": {"type": "string", "enum": ["InProgress", "AwaitingApproval", "Idle", "Completed", "Failed", "Cancelled"]},
		"messageCount": {"type": "integer", "minimum": 0},
		"preview": {"type": "string"},
		"createdAt": {"type": "string", "format": "date-time"},
		"updatedAt": {"type": "string", "format": "date-time"}
	},
	"required": ["id", "title", "status", "messageCount", "preview", "createdAt", "updatedAt"],
	"additionalProperties": false
}`

const sessionsListOutputSchema = `{
	"type": "object",
	"properties": {
		"sessions": {"type": "array", "items": ` + sessionSummarySchema + `}
	},
	"required": ["sessions"],
	"additionalProperties": false
}`

const sessionReadInputSchema = `{
	"type": "object",
	"properties": {
		"id": {"type": "string", "minLength": 1, "maxLength": 128, "description": "The session's id, from sessions_list."},
		"after": {"type": "integer", "minimum": 0, "description": "Return events after this sequence number (nextAfter of the previous page). Default 0."},
		"limit": {"type": "integer", "minimum": 1, "maximum": 200, "description": "How many events to return. Default 50."}
	},
	"required": ["id"],
	"additionalProperties": false
}`

const sessionReadOutputSchema = `{
	"type": "object",
	"properties": {
		"session": ` + sessionSummarySchema + `,
		"events": {
			"type": "array",
			"items": {
				"type": "object",
				"properties": {
					"seq": {"type": "integer", "minimum": 1},
					"type": {"type": "string"},
					"createdAt": {"type": "string", "format": "date-time"},
					"payload": {}
				},
				"required": ["seq", "type", "createdAt", "payload"],
				"additionalProperties": false
			}
		},
		"nextAfter": {"type": "integer", "minimum": 1, "description": "Present when there are more events: pass it as after."}
	},
	"required": ["session", "events"],
	"additionalProperties": false
}`

const approvalsListOutputSchema = `{
	"type": "object",
	"properties": {
		"approvals": {
			"type": "array",
			"items": {
				"type": "object",
				"properties": {
					"id": {"type": "string"},
					"tool": {"type": "string"},
					"status": {"type": "string", "enum": ["pending"]},
					"reason": {"type": "string"},
					"policyIds": {"type": "array", "items": {"type": "string"}},
					"arguments": {"type": "object"},
					"createdAt": {"type": "string", "format": "date-time"},
					"expiresAt": {"type": "string", "format": "date-time"}
				},
				"required": ["id", "tool", "status", "reason", "policyIds", "arguments", "createdAt", "expiresAt"],
				"additionalProperties": false
			}
		}
	},
	"required": ["approvals"],
	"additionalProperties": false
}`
