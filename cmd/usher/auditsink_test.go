package main

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/internal/testenv"
	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// TestAuditSinkSurvivesAKilledProcess kills (SIGKILL) an `usher serve`
// while its webhook sink's receiver holds a batch; the process started
// after it, once the lease has lapsed, delivers that batch again and the
// records written since: none is missing, and every batch is signed.
func TestAuditSinkSurvivesAKilledProcess(t *testing.T) {
	t.Parallel()
	dbURL := storetest.PostgresURL(t)
	st, err := store.Open(t.Context(), dbURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	log, err := audit.New(st, nil)
	if err != nil {
		t.Fatal(err)
	}
	appendN := func(n int) {
		for i := range n {
			if err := log.Append(t.Context(), audit.Entry{Kind: audit.KindDecision, Principal: "alice", Tool: fmt.Sprintf("tool-%d", i), Decision: "allow"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	appendN(40)

	secret := strings.Repeat("s", 40)
	var mu sync.Mutex
	got := map[int64]int{}
	held := make(chan struct{})    // the first batch of records has arrived
	release := make(chan struct{}) // the receiver may answer it
	var first sync.Once
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write(body)
		if r.Header.Get("Authorization") != "Bearer "+secret || r.Header.Get("Usher-Signature") != "sha256="+hex.EncodeToString(mac.Sum(nil)) {
			t.Errorf("a batch not authorized or signed with the secret")
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		sc := bufio.NewScanner(bytes.NewReader(body))
		records := 0
		mu.Lock()
		for sc.Scan() {
			var line struct {
				Seq  int64
				Kind string
			}
			if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
				t.Errorf("a line that is not JSON: %q", sc.Bytes())
			}
			// Checkpoints come with a cursor of their own, in batches of
			// their own, and carry the sequence number of the record
			// they sign: they are not records.
			if line.Kind != audit.KindCheckpoint {
				got[line.Seq]++
				records++
			}
		}
		mu.Unlock()
		if records > 0 {
			first.Do(func() {
				close(held)
				<-release
			})
		}
	}))
	defer rc.Close()

	dir := t.TempDir()
	secretFile := filepath.Join(dir, "siem-secret")
	cfg := filepath.Join(dir, "usher.yaml")
	if err := os.WriteFile(secretFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, []byte("audit:\n  sinks:\n    - name: siem\n      webhook:\n        url: "+rc.URL+"\n        secret_file: "+secretFile+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := testenv.Usher(t)
	env := []string{"USHER_DATABASE_URL=" + dbURL, "USHER_BROKER_KEY_ENCRYPTION_KEY=q83vEjRWeJq83vEjRWeJq83vEjRWeJq83vEjRWeJq80="}
	a := startProcess(t, bin, env, testenv.FreeAddr(t), "--config", cfg)
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("no batch arrived")
	}
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-a.done
	close(release)
	if s, err := st.AuditSink(t.Context(), "siem"); err != nil || s.DeliveredSeq != 0 || s.LeaseOwner == "" {
		t.Fatalf("after the kill: %+v, %v; want the cursor at 0 and the lease still held", s, err)
	}
	appendN(25)

	b := startProcess(t, bin, env, testenv.FreeAddr(t), "--config", cfg)
	testenv.WaitFor(t, 90*time.Second, func() bool {
		s, err := st.AuditSink(t.Context(), "siem")
		return err == nil && s.DeliveredSeq == 65
	})
	// Its lag, on /metrics, comes down to nothing.
	testenv.WaitFor(t, 10*time.Second, func() bool {
		resp, err := http.Get(b.url + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		m, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(m), "usher_audit_sink_lag_records{sink=\"siem\"} 0\n") &&
			strings.Contains(string(m), "usher_audit_sink_lag_seconds{sink=\"siem\"} 0\n")
	})
	mu.Lock()
	defer mu.Unlock()
	for seq := int64(1); seq <= 65; seq++ {
		if got[seq] == 0 {
			t.Errorf("record %d never arrived", seq)
		}
	}
	if got[1] < 2 {
		t.Errorf("record 1 arrived %d times, want it again after the kill", got[1])
	}
}
