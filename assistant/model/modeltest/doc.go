// Package modeltest owns a scripted OpenAI-compatible model server for
// tests: a real HTTP server on loopback that speaks the Chat Completions API
// (streamed as server-sent events, or as one JSON object), answers from a
// script, and records every request it receives for assertions.
//
// It is a real implementation of the wire protocol, not a mock: any
// OpenAI-compatible client, the assistant runtime's included, talks to it
// as it would to a model server. Like OpenAI it refuses (400) a
// conversation whose tool messages do not answer the tool calls of the
// assistant message before them, so a test sees the runtime's history
// mistakes the way production would.
//
//	srv := modeltest.NewServer(t)
//	srv.ReplyToolCalls(model.ToolCall{ID: "call_1", Name: "notes_list", Arguments: json.RawMessage(`{}`)})
//	srv.Reply("You have two notes.")
//	p, _ := model.NewOpenAI(&model.OpenAIOptions{BaseURL: srv.URL(), Model: "test"})
//	// ... run a turn against p, then inspect srv.Requests().
package modeltest
