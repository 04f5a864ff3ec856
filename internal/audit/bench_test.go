package audit

import (
	"context"
	"testing"
	"time"

	"github.com/usherhq/usher/store"
)

// BenchmarkBuilder makes the record of an allowed tool call, as the MCP
// server's execution start does: Builder, then the built function.
func BenchmarkBuilder(b *testing.B) {
	l, err := New(nopAppender{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	e := Entry{
		Kind: "mcp_tool_call", At: time.Now(), Principal: "user:alice", ClientID: "client-1", TokenJTI: "5f0c6f0e-1b7e-4d7a-9a57-3a3f2c1d0e9b",
		Tool: "up__echo", DefinitionHash: "sha256:0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0",
		ArgumentsHash: "sha256:a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90", Decision: "allow",
		PolicyIDs: []string{"allow-echo"}, PolicyHash: "sha256:1234567890abcdef1234567890abcdef1234567890abcdef1234567890abcdef",
		Details: []byte(`{"idempotency_key":"[\"client\",\"user:alice\",\"client-1\",\"8c1d2f6e-4b1a-4e0c-9a3b-2f6d1c0e9b8a\"]","reasons":["allow-echo"],"server":"up"}`),
	}
	head := store.AuditHead{Seq: 41, Hash: "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0"}
	b.ReportAllocs()
	for b.Loop() {
		build, err := l.Builder(e)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := build(head); err != nil {
			b.Fatal(err)
		}
	}
}

// nopAppender is an Appender that appends nothing.
type nopAppender struct{}

func (nopAppender) AppendAudit(context.Context, func(store.AuditHead) (store.AuditRecord, error)) (store.AuditRecord, error) {
	return store.AuditRecord{}, nil
}
