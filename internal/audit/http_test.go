package audit_test

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/usherhq/usher/internal/audit"
	"github.com/usherhq/usher/store"
)

// get fetches url and returns the status, the Content-Type and the body.
func get(t *testing.T, url string) (int, string, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}

// TestKeyHandler: the published keys, one a line, newest first, verify the
// checkpoints; before any key exists, 404.
func TestKeyHandler(t *testing.T) {
	forEachEngine(t, func(t *testing.T, st store.Store, _ *sql.DB) {
		in := newInstallation(t, st, newSealKey(), newManualClock())
		srv := httptest.NewServer(audit.KeyHandler(in.keys, nil))
		defer srv.Close()
		if status, _, _ := get(t, srv.URL); status != http.StatusNotFound {
			t.Errorf("GET before any key = %d, want 404", status)
		}
		appendAll(t, st)
		in.checkpoint(t, 6)
		if err := in.keys.Rotate(t.Context()); err != nil {
			t.Fatal(err)
		}
		status, ctype, body := get(t, srv.URL)
		want, err := in.keys.VerifierKeys(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if status != http.StatusOK || !strings.HasPrefix(ctype, "text/plain") || body != strings.Join(want, "\n")+"\n" || len(want) != 2 {
			t.Fatalf("GET = %d %s %q, want 200 text/plain with the 2 keys %q", status, ctype, body, want)
		}
		keys, err := audit.ParseVerifierKeys(body)
		if err != nil {
			t.Fatal(err)
		}
		if rep := verifyCheckpoints(t, st, keys); !rep.Intact() || rep.Checkpoints != 1 {
			t.Errorf("VerifyWithCheckpoints with the served keys = %+v, want intact with one checkpoint", rep)
		}
	})
}

// TestCheckpointsHandler pages through every checkpoint exactly once.
func TestCheckpointsHandler(t *testing.T) {
	forEachEngine(t, func(t *testing.T, st store.Store, _ *sql.DB) {
		in := newInstallation(t, st, newSealKey(), newManualClock())
		for i := range 5 {
			appendAll(t, st)
			in.checkpoint(t, int64(6*(i+1)))
		}
		srv := httptest.NewServer(audit.CheckpointsHandler(st, nil))
		defer srv.Close()
		var seqs []int64
		after := "0"
		for pages := 0; after != ""; pages++ {
			if pages > 5 {
				t.Fatal("more pages than checkpoints")
			}
			status, _, body := get(t, srv.URL+"?limit=2&after="+after)
			var page struct {
				Checkpoints []struct {
					Seq  int64  `json:"seq"`
					Note string `json:"note"`
				} `json:"checkpoints"`
				Next *int64 `json:"next"`
			}
			if err := json.Unmarshal([]byte(body), &page); status != http.StatusOK || err != nil {
				t.Fatalf("GET after %s = %d %s (%v)", after, status, body, err)
			}
			for _, cp := range page.Checkpoints {
				if _, err := audit.OpenCheckpoint(cp.Note, in.trusted(t)); err != nil {
					t.Errorf("checkpoint %d: %v", cp.Seq, err)
				}
				seqs = append(seqs, cp.Seq)
			}
			after = ""
			if page.Next != nil {
				after = fmt.Sprint(*page.Next)
			}
		}
		if fmt.Sprint(seqs) != "[6 12 18 24 30]" {
			t.Errorf("the pages list checkpoints %v, want [6 12 18 24 30]", seqs)
		}
		for _, q := range []string{"?limit=0", "?limit=1001", "?after=-1", "?after=x"} {
			if status, _, _ := get(t, srv.URL+q); status != http.StatusBadRequest {
				t.Errorf("GET %s = %d, want 400", q, status)
			}
		}
	})
}
