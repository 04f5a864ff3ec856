package store

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestCheckAuditRecord: a record that can be stored passes without
// allocating (every record of the log is checked on its way), and each
// field that cannot be stored is named in the error.
func TestCheckAuditRecord(t *testing.T) {
	head := AuditHead{Seq: 41, Hash: "prev"}
	good := AuditRecord{
		Seq: 42, At: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC), Kind: "decision", Principal: "alice",
		Tool: "up__echo", PolicyIDs: []string{"allow-echo", "forbid-delete"}, Details: []byte(`{"a":1}`),
		PrevHash: "prev", Hash: "hash",
	}
	if err := checkAuditRecord(good, head); err != nil {
		t.Fatalf("a good record: %v", err)
	}
	if n := testing.AllocsPerRun(100, func() { _ = checkAuditRecord(good, head) }); n != 0 {
		t.Errorf("checking a good record allocates %.0f times, want 0", n)
	}

	bad := good
	bad.Tool = "up\x00echo"
	bad.PolicyIDs = []string{"allow-echo", "bad\xff"}
	bad.Outcome = "\xfe"
	err := checkAuditRecord(bad, head)
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("a bad record: %v, want ErrInvalid", err)
	}
	for _, want := range []string{"audit record tool holds a NUL character", "audit record policy id #2 is not valid UTF-8",
		"audit record outcome is not valid UTF-8"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "#1") {
		t.Errorf("error %q names the good policy id", err)
	}
}

// TestInsertAuditRows checks the INSERT of a batch of records: one row of
// auditColumnCount placeholders per record, numbered in order, with as
// many values as auditArgs gives and as many columns as it names.
func TestInsertAuditRows(t *testing.T) {
	if n := len(strings.Split(auditColumns, ",")); n != auditColumnCount {
		t.Fatalf("auditColumns names %d columns, auditColumnCount is %d", n, auditColumnCount)
	}
	if n := len(auditArgs(AuditRecord{})); n != auditColumnCount {
		t.Fatalf("auditArgs gives %d values, auditColumnCount is %d", n, auditColumnCount)
	}
	for _, n := range []int{1, 2, 7, maxAuditBatch} {
		q := insertAuditRows(n)
		if got := strings.Count(q, "("); got != n+1 { // the column list and n rows
			t.Errorf("insertAuditRows(%d) has %d parentheses, want %d", n, got, n+1)
		}
		last := "$" + strconv.Itoa(n*auditColumnCount) + ")"
		if !strings.HasSuffix(q, last) || strings.Contains(q, "$"+strconv.Itoa(n*auditColumnCount+1)) {
			t.Errorf("insertAuditRows(%d) does not end with %s: %q", n, last, q[max(0, len(q)-40):])
		}
	}
}
