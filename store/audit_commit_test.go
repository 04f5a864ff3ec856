package store_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// ackCutter is a TCP proxy in front of PostgreSQL. Once armed, it closes
// the connection on which the server next reports a transaction ended
// (ReadyForQuery, idle) instead of passing that report on: the
// transaction committed, and the client never learns it — a connection
// lost at the commit.
type ackCutter struct {
	ln     net.Listener
	target string
	armed  atomic.Bool
	cut    atomic.Int32
	// marker, when set before a connection is used, limits the cut to a
	// connection whose client has sent it (such as a record's kind), so
	// that another connection's commit, acknowledged at the same moment,
	// is not the one cut.
	marker atomic.Pointer[[]byte]

	mu    sync.Mutex
	conns []net.Conn
}

func newAckCutter(t *testing.T, target string) *ackCutter {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &ackCutter{ln: ln, target: target}
	go p.serve()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			c.Close()
		}
	})
	return p
}

// openBehindAckCutter opens the test database through an ackCutter.
func openBehindAckCutter(t *testing.T) (*ackCutter, store.Store) {
	t.Helper()
	u, err := url.Parse(storetest.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cutter := newAckCutter(t, u.Host)
	u.Host = cutter.ln.Addr().String()
	return cutter, openMigrated(t, u.String())
}

func (p *ackCutter) serve() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, client, server)
		p.mu.Unlock()
		var marked atomic.Bool
		go func() {
			p.copyMarking(server, client, &marked)
			server.Close()
		}()
		go p.relay(client, server, &marked)
	}
}

// copyMarking passes what the client sends to the server, and sets marked
// once it has sent the marker.
func (p *ackCutter) copyMarking(server, client net.Conn, marked *atomic.Bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := client.Read(buf)
		if n > 0 {
			if m := p.marker.Load(); m != nil && bytes.Contains(buf[:n], *m) {
				marked.Store(true)
			}
			if _, werr := server.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// relay passes the server's messages (a type byte, then a length that
// counts itself) to the client, one at a time, and cuts the connection
// while armed at an idle ReadyForQuery that ends statements run
// (CommandComplete): a commit, not the preparation of statements — on a
// connection that sent the marker, when there is one.
func (p *ackCutter) relay(client, server net.Conn, marked *atomic.Bool) {
	defer client.Close()
	defer server.Close()
	var header [5]byte
	executed := false
	for {
		if _, err := io.ReadFull(server, header[:]); err != nil {
			return
		}
		body := make([]byte, binary.BigEndian.Uint32(header[1:])-4)
		if _, err := io.ReadFull(server, body); err != nil {
			return
		}
		switch header[0] {
		case 'C':
			executed = true
		case 'Z':
			if executed && len(body) == 1 && body[0] == 'I' && (p.marker.Load() == nil || marked.Load()) && p.armed.CompareAndSwap(true, false) {
				p.cut.Add(1)
				return
			}
			executed = false
		}
		if _, err := client.Write(append(header[:], body...)); err != nil {
			return
		}
	}
}

// A transaction of several audit appends that commits but whose commit is
// never acknowledged (the connection lost at the commit) is not written
// again: each append gets the error, as its caller must read back what it
// wrote, and the log holds each record once. Written again, the execution
// an append had started would have been found already there and reported
// as another call's start — a tool call then never run, its execution
// left started — and every record of the batch written twice.
func TestPostgresAuditBatchCommitUnacknowledged(t *testing.T) {
	cutter, s := openBehindAckCutter(t)
	if _, err := s.AppendAudit(t.Context(), link("first")); err != nil {
		t.Fatalf("append: %v", err)
	}
	store.SetAuditLinger(s, time.Hour)

	const lazies = 3
	errs := make([]error, lazies)
	var wg sync.WaitGroup
	for i := range lazies {
		wg.Go(func() {
			_, errs[i] = store.AppendAuditAfter(context.Background(), s, "SELECT 1", nil, link("lazy"), true)
		})
		waitQueued(t, s, i+1)
	}
	cutter.armed.Store(true)
	e := store.Execution{IdempotencyKey: "run-1/call-1", Principal: "alice", Tool: "notes_write", ArgumentsHash: "args"}
	_, started, beginErr := s.BeginExecutionAudited(t.Context(), e, link("decision"))
	wg.Wait()
	if cutter.cut.Load() != 1 {
		t.Fatalf("the proxy cut %d acknowledgements, want 1: the fault was not injected", cutter.cut.Load())
	}
	if beginErr == nil && !started {
		t.Errorf("the begin reported its own committed start as another call's (started false, no error): its tool would never run")
	}
	if beginErr == nil {
		t.Errorf("the begin succeeded although its commit was never acknowledged; want the error, for its caller to read back")
	}
	for i, err := range errs {
		if err == nil {
			t.Errorf("lazy append %d succeeded although its commit was never acknowledged", i)
		}
	}
	got, err := s.GetExecution(t.Context(), e.IdempotencyKey)
	if err != nil || got.Status != store.ExecutionStarted {
		t.Errorf("execution = %+v, %v; want started (the commit went through)", got, err)
	}
	records := auditLog(t, s)
	checkChain(t, records, 1+lazies+1)
	if errors.Is(beginErr, store.ErrConflict) {
		t.Errorf("begin: %v", beginErr)
	}
}

// A caller that retries an audit append whose commit was never
// acknowledged (as the MCP server does with how a call ended) leaves one
// record of the event, not two: the retry carries the event's id, the log
// already holds it, and the retry is answered with that record. The chain
// goes on from it and verifies.
func TestPostgresAuditRetryAfterCommitUnacknowledged(t *testing.T) {
	cutter, s := openBehindAckCutter(t)
	log, err := audit.New(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := log.Append(ctx, audit.Entry{Kind: audit.KindDecision, Tool: "notes_write"}); err != nil {
		t.Fatalf("append: %v", err)
	}

	e := audit.Entry{EventID: audit.NewEventID(), Kind: audit.KindExecuted, Tool: "notes_write", Outcome: "succeeded", At: time.Now()}
	cutter.armed.Store(true)
	first := log.Append(ctx, e)
	if cutter.cut.Load() != 1 {
		t.Fatalf("the proxy cut %d acknowledgements, want 1: the fault was not injected", cutter.cut.Load())
	}
	if first == nil {
		t.Fatalf("the append succeeded although its commit was never acknowledged")
	}
	if err := log.Append(ctx, e); err != nil {
		t.Fatalf("the retry: %v; want success, the event being recorded", err)
	}
	if err := log.Append(ctx, audit.Entry{Kind: audit.KindDecision, Tool: "notes_read"}); err != nil {
		t.Fatalf("append after the retry: %v", err)
	}

	records := auditLog(t, s)
	var of int
	for _, r := range records {
		if r.EventID == e.EventID {
			of++
		}
	}
	if of != 1 {
		t.Errorf("the log holds %d records of the retried event, want 1", of)
	}
	checkChain(t, records, 3)
	if rep, err := audit.Verify(ctx, s); err != nil || !rep.Intact() || rep.Records != 3 {
		t.Errorf("audit.Verify = %+v, %v; want 3 records, intact", rep, err)
	}
}
