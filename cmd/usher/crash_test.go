package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/usherhq/usher/assistant/model"
	"github.com/usherhq/usher/assistant/model/modeltest"
	"github.com/usherhq/usher/internal/apitest"
	"github.com/usherhq/usher/internal/testenv"
	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// process is an `usher serve` child process.
type process struct {
	cmd     *exec.Cmd
	url     string
	dataDir string
	log     string        // the file its output goes to
	done    chan struct{} // closed when the process has exited
}

func startProcess(t testing.TB, bin string, env []string, addr string, args ...string) *process {
	t.Helper()
	return startProcessIn(t, bin, env, addr, t.TempDir(), args...)
}

// startProcessIn is startProcess on the data directory dataDir.
func startProcessIn(t testing.TB, bin string, env []string, addr, dataDir string, args ...string) *process {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"serve", "--addr", addr, "--data-dir", dataDir}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	logFile, err := os.Create(filepath.Join(t.TempDir(), "usher.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: cmd, url: "http://" + addr, dataDir: dataDir, log: logFile.Name(), done: make(chan struct{})}
	go func() {
		cmd.Wait() //nolint:errcheck // a killed process exits with an error
		close(p.done)
	}()
	t.Cleanup(func() {
		if t.Failed() {
			// A replica that holds up a test says where: SIGQUIT makes the
			// Go runtime write every goroutine's stack to the log, and exit.
			cmd.Process.Signal(syscall.SIGQUIT)
			select {
			case <-p.done:
			case <-time.After(5 * time.Second):
			}
		}
		cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			b, _ := os.ReadFile(logFile.Name())
			t.Logf("log of %s:\n%s", addr, b)
		}
	})
	testenv.WaitFor(t, 30*time.Second, func() bool {
		resp, err := http.Get(p.url + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	return p
}

// TestAssistantTurnSurvivesAKilledProcess kills (SIGKILL) the process that
// runs a turn while the model holds its reply; the other process takes the
// run over when the lease expires and finishes the turn, with no message
// lost or doubled and the tool run once.
func TestAssistantTurnSurvivesAKilledProcess(t *testing.T) {
	t.Parallel()
	dbURL := storetest.PostgresURL(t)
	bin := testenv.Usher(t)
	ms := modeltest.NewServer(t)
	lb := newBalancer(t)
	env := []string{
		"USHER_DATABASE_URL=" + dbURL,
		"USHER_BROKER_KEY_ENCRYPTION_KEY=q83vEjRWeJq83vEjRWeJq83vEjRWeJq83vEjRWeJq80=",
		"USHER_SERVER_PUBLIC_URL=" + lb.url,
		"USHER_MODEL_PROVIDER=openai", "USHER_MODEL_BASE_URL=" + ms.URL(), "USHER_MODEL_NAME=scripted", "USHER_MODEL_API_KEY=k",
		"USHER_ASSISTANT_LEASE=3s", "USHER_ASSISTANT_SWEEP_INTERVAL=1s",
	}
	addrA, addrB := testenv.FreeAddr(t), testenv.FreeAddr(t)
	a := startProcess(t, bin, env, addrA)
	lb.set(a.url)
	cmd := exec.Command(bin, "token", "user", "--sub", "alice", "--data-dir", t.TempDir())
	cmd.Env = append(os.Environ(), env...)
	tokOut, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	alice := strings.TrimSpace(string(tokOut))

	st, err := store.Open(t.Context(), dbURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()

	// The model asks for a write, which waits for an approval.
	ms.ReplyToolCalls(model.ToolCall{ID: "call-1", Name: "notes_write", Arguments: json.RawMessage(`{"name":"n","body":"written once"}`)})
	ms.Reply("done")
	code, run := apitest.Call(t, "POST", lb.url+"/api/assistant/runs", alice, `{"message":"write the note"}`)
	if code != 201 {
		t.Fatalf("create = %d %v", code, run)
	}
	id := run["runId"].(string)
	testenv.WaitFor(t, 30*time.Second, func() bool {
		r, err := st.GetRun(t.Context(), id)
		return err == nil && r.Status == store.RunAwaitingApproval
	})
	_, pending := apitest.Call(t, "GET", lb.url+"/api/approvals", alice, "")
	list, _ := pending["approvals"].([]any)
	if len(list) != 1 {
		t.Fatalf("pending approvals = %v", pending)
	}
	approvalID := list[0].(map[string]any)["id"].(string)

	// Hold the model's next reply, approve: A runs the write, records its
	// result and waits for the model.
	release := ms.Hold()
	defer release()
	if code, body := apitest.Call(t, "POST", lb.url+"/api/approvals/"+approvalID+"/decision", alice, `{"decision":"approve"}`); code != 200 {
		t.Fatalf("decision = %d %v", code, body)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := ms.WaitHeld(ctx, 1); err != nil {
		t.Fatal(err)
	}

	// B starts; A dies mid-turn.
	b := startProcess(t, bin, env, addrB)
	lb.set(b.url)
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-a.done
	if err := ms.WaitHeld(ctx, 0); err != nil {
		t.Fatal(err)
	}
	release()

	// B takes the run over when A's lease expires and finishes the turn.
	var events []store.Event
	testenv.WaitFor(t, 30*time.Second, func() bool {
		events, err = st.ListEvents(t.Context(), id, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(events, func(e store.Event) bool { return e.Type == "agent.turn.end" })
	})
	count := map[string]int{}
	var turnEnd store.Event
	for _, e := range events {
		count[e.Type]++
		if e.Type == "agent.turn.end" {
			turnEnd = e
		}
	}
	if count["message.user"] != 1 || count["agent.turn.start"] != 1 || count["agent.turn.end"] != 1 ||
		count["agent.turn.pause"] != 1 || count["message.assistant"] != 2 || count["message.tool"] != 2 {
		t.Errorf("event counts after the takeover = %v; want 1 user message, 1 turn start, pause and end, 2 assistant messages, 2 tool results (pending, then the result)", count)
	}
	var end struct{ Status string }
	json.Unmarshal(turnEnd.Payload, &end)
	if end.Status != "completed" {
		t.Errorf("turn end = %s, want completed", turnEnd.Payload)
	}
	// Two slices, each one step: the first paused for the approval; the
	// second, killed with A, was continued by B under the same sequence
	// (its second attempt), not recorded again.
	testenv.WaitFor(t, 30*time.Second, func() bool {
		steps, err := st.ListSteps(t.Context(), id, 0, 10)
		return err == nil && len(steps) == 2 && !steps[1].EndedAt.IsZero()
	})
	steps, err := st.ListSteps(t.Context(), id, 0, 10)
	if err != nil || len(steps) != 2 || steps[0].Outcome != store.StepPaused || steps[0].Attempts != 1 ||
		steps[1].Outcome != store.StepEnded || steps[1].Attempts != 2 || steps[1].Kind != store.StepResume {
		t.Errorf("steps after the takeover = %+v, %v; want 1 paused, then 2 ended on its second attempt", steps, err)
	}
	// The write ran once.
	recs, err := st.AuditRecords(t.Context(), 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	executed := 0
	for _, r := range recs {
		if r.Tool == "notes_write" && r.Kind == "executed" {
			executed++
		}
	}
	if executed != 1 {
		t.Errorf("notes_write executed %d times, want once", executed)
	}
	r, err := st.GetRun(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if note, err := st.GetNote(t.Context(), r.Owner, "n"); err != nil || note.Body != "written once" {
		t.Errorf("the note = %+v, %v", note, err)
	}
}
