package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/usherhq/usher/assistant/model/modeltest"
	"github.com/usherhq/usher/internal/apitest"
	"github.com/usherhq/usher/internal/testenv"
	"github.com/usherhq/usher/store"
)

// TestRestartResumesItsTurnsAtOnce kills (SIGKILL) the embedded default
// while a turn waits for the model, and restarts it on the same data
// directory: the restarted process requeues the runs its earlier start
// leased and resumes the turn within a second, instead of waiting out
// its own (30 s) lease.
func TestRestartResumesItsTurnsAtOnce(t *testing.T) {
	t.Parallel()
	bin := testenv.Usher(t)
	ms := modeltest.NewServer(t)
	env := []string{"USHER_MODEL_PROVIDER=openai", "USHER_MODEL_BASE_URL=" + ms.URL(), "USHER_MODEL_NAME=scripted", "USHER_MODEL_API_KEY=k"}
	dataDir, addr := t.TempDir(), testenv.FreeAddr(t)
	a := startProcessIn(t, bin, env, addr, dataDir)
	cmd := exec.Command(bin, "token", "user", "--sub", "alice", "--data-dir", dataDir, "--addr", addr)
	cmd.Env = append(os.Environ(), env...)
	tokOut, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	alice := strings.TrimSpace(string(tokOut))

	ms.Reply("done")
	release := ms.Hold()
	defer release()
	id := createHeld(t, ms, a.url, alice, "hello")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-a.done
	if err := ms.WaitHeld(ctx, 0); err != nil {
		t.Fatal(err)
	}
	release()

	b := startProcessIn(t, bin, env, addr, dataDir)
	ready := time.Now()
	st, err := store.Open(t.Context(), filepath.Join(dataDir, "usher.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var ended time.Time
	deadline := ready.Add(10 * time.Second)
	for ended.IsZero() && time.Now().Before(deadline) {
		r, err := st.GetRun(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if r.HandledSeq > 0 {
			ended = time.Now()
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if ended.IsZero() {
		t.Fatalf("the restarted process did not finish the turn within 10 s of being ready (the lease is 30 s)")
	}
	t.Logf("the restarted process finished the turn %s after it was ready", ended.Sub(ready).Round(time.Millisecond))
	if d := ended.Sub(ready); d > time.Second {
		t.Errorf("the turn ended %s after the restart was ready, want within a second", d)
	}
	if code, body := apitest.Call(t, "GET", b.url+"/api/assistant/runs/"+id, alice, ""); code != 200 {
		t.Errorf("the run after the restart = %d %v", code, body)
	}
}
