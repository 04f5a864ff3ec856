package storetest

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/usherhq/usher/store"
)

// holdRecord returns the builder of the audit record of a legal hold's
// change of kind the tests append.
func holdRecord(kind string) store.LegalHoldAudit {
	return func(h store.LegalHold) (func(store.AuditHead) (store.AuditRecord, error), error) {
		return chained(store.AuditRecord{At: time.Now().Truncate(time.Microsecond), Kind: kind, Principal: h.Principal}), nil
	}
}

// testLegalHolds: a legal hold is placed (again, with a new reason, which
// keeps when and by whom it was placed),
// listed and lifted, each with its audit record in the same transaction;
// while it stands the person's deleted run keeps its attachments, which
// do not count toward the person's quota, and is not purged, and erasing the person is refused with nothing erased;
// another person's deleted run is purged all the same; once it is
// lifted, the purge erases the run with its attachments, and the erasure
// goes ahead. Bad holds and a failing record write nothing.
func testLegalHolds(t *testing.T, s store.Store) {
	ctx := t.Context()
	const bob = "issuer|tenant|bob"
	first := userMessage("the contract")
	mustOpenRun(t, s, "run-a", &first)
	if _, _, err := s.OpenRun(ctx, store.Run{ID: "run-bob", Owner: bob}, 5, nil); err != nil {
		t.Fatal(err)
	}
	data := []byte("the signed contract")
	if _, err := s.PutAttachment(ctx, store.Attachment{ID: "att-held", Owner: queueOwner, Tenant: "tenant", Name: "contract.txt", ContentType: "text/plain"}, data, 1<<10); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AttachToRun(ctx, "run-a", queueOwner, []string{"att-held"}); err != nil {
		t.Fatal(err)
	}

	for name, h := range map[string]store.LegalHold{
		"no principal":    {Reason: "matter 7", PlacedBy: "usher hold"},
		"no reason":       {Principal: queueOwner, PlacedBy: "usher hold"},
		"no placer":       {Principal: queueOwner, Reason: "matter 7"},
		"a NUL":           {Principal: queueOwner, Reason: "matter\x007", PlacedBy: "usher hold"},
		"a long reason":   {Principal: queueOwner, Reason: strings.Repeat("m", store.MaxLegalHoldReason+1), PlacedBy: "usher hold"},
		"invalid UTF-8":   {Principal: queueOwner, Reason: "matter \xff", PlacedBy: "usher hold"},
		"a bad principal": {Principal: "alice\x00", Reason: "matter 7", PlacedBy: "usher hold"},
	} {
		if _, err := s.PlaceLegalHold(ctx, h, holdRecord("legal_hold_placed")); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("PlaceLegalHold with %s = %v, want ErrInvalid", name, err)
		}
	}
	errAudit := errors.New("no record")
	if _, err := s.PlaceLegalHold(ctx, store.LegalHold{Principal: queueOwner, Reason: "matter 7", PlacedBy: "usher hold"},
		func(store.LegalHold) (func(store.AuditHead) (store.AuditRecord, error), error) { return nil, errAudit }); !errors.Is(err, errAudit) {
		t.Errorf("PlaceLegalHold with a failing record = %v, want its error", err)
	}
	if holds, err := s.LegalHolds(ctx); err != nil || len(holds) != 0 {
		t.Fatalf("LegalHolds after refused placements = %+v, %v; want none", holds, err)
	}

	placed, err := s.PlaceLegalHold(ctx, store.LegalHold{Principal: queueOwner, Reason: "matter 7", PlacedBy: "usher hold"}, holdRecord("legal_hold_placed"))
	if err != nil || placed.Principal != queueOwner || placed.Reason != "matter 7" || placed.PlacedBy != "usher hold" || placed.PlacedAt.IsZero() {
		t.Fatalf("PlaceLegalHold = %+v, %v", placed, err)
	}
	again, err := s.PlaceLegalHold(ctx, store.LegalHold{Principal: queueOwner, Reason: "matter 7 and 9", PlacedBy: "counsel"}, holdRecord("legal_hold_placed"))
	if want := (store.LegalHold{Principal: queueOwner, Reason: "matter 7 and 9", PlacedBy: "usher hold", PlacedAt: placed.PlacedAt}); err != nil || again != want {
		t.Fatalf("PlaceLegalHold again = %+v, %v; want %+v: the new reason, placed when and by whom it was", again, err, want)
	}
	if holds, err := s.LegalHolds(ctx); err != nil || len(holds) != 1 || holds[0] != again {
		t.Fatalf("LegalHolds = %+v, %v; want the one hold, as placed again", holds, err)
	}

	// Held: the sweep keeps the unsent attachment, the deletion the sent
	// one, the purge skips the run, the erasure is refused.
	if _, err := s.PutAttachment(ctx, store.Attachment{ID: "att-draft", Owner: queueOwner, Tenant: "tenant", Name: "draft.txt", ContentType: "text/plain"}, []byte("a draft"), 1<<10); err != nil {
		t.Fatal(err)
	}
	if n, err := s.DeleteUnsentAttachments(ctx, time.Now().Add(time.Hour)); err != nil || n != 0 {
		t.Errorf("DeleteUnsentAttachments under the hold = %d, %v; want none deleted", n, err)
	}
	for _, id := range []string{"run-a", "run-bob"} {
		if err := s.DeleteRun(ctx, id, nil, store.Withdrawal{}); err != nil {
			t.Fatalf("DeleteRun(%s) = %v", id, err)
		}
	}
	if _, c, err := s.AttachmentData(ctx, "att-held"); err != nil || !bytes.Equal(c, data) {
		t.Errorf("the held person's attachment after their run's deletion = %q, %v; want it kept", c, err)
	}
	// What the hold keeps is not the person's to use, and does not fill
	// their quota: a new upload fits beside the draft alone, and the kept
	// content uploaded again counts anew.
	draft := int64(len("a draft"))
	if n, err := s.AttachmentBytes(ctx, queueOwner); err != nil || n != draft {
		t.Errorf("AttachmentBytes under the hold after the deletion = %d, %v; want %d (the draft only)", n, err, draft)
	}
	if _, err := s.PutAttachment(ctx, store.Attachment{ID: "att-after", Owner: queueOwner, Tenant: "tenant", Name: "notes.txt", ContentType: "text/plain"}, []byte("notes"), draft+5); err != nil {
		t.Errorf("an upload within the quota beside what the hold keeps = %v", err)
	}
	if _, err := s.PutAttachment(ctx, store.Attachment{ID: "att-again", Owner: queueOwner, Tenant: "tenant", Name: "contract.txt", ContentType: "text/plain"}, data, draft+5+int64(len(data))-1); !errors.Is(err, store.ErrLimit) {
		t.Errorf("the kept content uploaded again one byte over the quota = %v, want ErrLimit", err)
	}
	runs, err := s.PurgeDeletedRuns(ctx, time.Now().Add(time.Hour), 10, erasedRecord)
	if ids := runIDs(runs); err != nil || len(ids) != 1 || ids[0] != "run-bob" {
		t.Fatalf("PurgeDeletedRuns under alice's hold = %v, %v; want bob's run only", ids, err)
	}
	if r, err := s.GetRun(ctx, "run-a"); err != nil || r.DeletedAt.IsZero() {
		t.Errorf("the held person's deleted run after the purge = %+v, %v; want it kept, deleted", r, err)
	}
	if _, err := s.ErasePrincipal(ctx, queueOwner, func(store.PrincipalErasure) (func(store.AuditHead) (store.AuditRecord, error), error) {
		t.Error("the erasure of a held person built its record")
		return nil, nil
	}); !errors.Is(err, store.ErrLegalHold) || !errors.Is(err, store.ErrConflict) {
		t.Errorf("ErasePrincipal under a legal hold = %v, want ErrLegalHold", err)
	}
	if _, c, err := s.AttachmentData(ctx, "att-held"); err != nil || !bytes.Equal(c, data) {
		t.Errorf("the held person's attachment after a refused erasure = %q, %v; want it kept", c, err)
	}
	var exported []string
	if err := s.ExportPrincipal(ctx, queueOwner, func(table string, row map[string]any) error {
		if table == "legal_holds" {
			exported = append(exported, row["reason"].(string))
		}
		return nil
	}); err != nil || len(exported) != 1 || exported[0] != "matter 7 and 9" {
		t.Errorf("the held person's export's legal holds = %v, %v; want their hold", exported, err)
	}

	// Lifted: the purge erases the run and its attachment, the erasure
	// goes ahead.
	lifted, err := s.LiftLegalHold(ctx, queueOwner, holdRecord("legal_hold_lifted"))
	if err != nil || lifted != again {
		t.Fatalf("LiftLegalHold = %+v, %v; want the hold as it stood", lifted, err)
	}
	if _, err := s.LiftLegalHold(ctx, queueOwner, holdRecord("legal_hold_lifted")); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("LiftLegalHold again = %v, want ErrNotFound", err)
	}
	if holds, err := s.LegalHolds(ctx); err != nil || len(holds) != 0 {
		t.Errorf("LegalHolds after the lift = %+v, %v; want none", holds, err)
	}
	runs, err = s.PurgeDeletedRuns(ctx, time.Now().Add(time.Hour), 10, erasedRecord)
	if ids := runIDs(runs); err != nil || len(ids) != 1 || ids[0] != "run-a" {
		t.Fatalf("PurgeDeletedRuns after the lift = %v, %v; want run-a", ids, err)
	}
	if _, _, err := s.AttachmentData(ctx, "att-held"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the attachment of the run purged after the lift = %v, want ErrNotFound", err)
	}
	if n, err := s.DeleteUnsentAttachments(ctx, time.Now().Add(time.Hour)); err != nil || n != 2 {
		t.Errorf("DeleteUnsentAttachments after the lift = %d, %v; want the draft and the notes deleted", n, err)
	}
	// Its content went with it: storing it again stores it anew.
	if _, err := s.PutAttachment(ctx, store.Attachment{ID: "att-new", Owner: queueOwner, Tenant: "tenant", Name: "contract.txt", ContentType: "text/plain"}, data, int64(len(data))); err != nil {
		t.Errorf("storing the purged content again within a quota of its size = %v", err)
	}
	if _, err := s.ErasePrincipal(ctx, queueOwner, nil); err != nil {
		t.Errorf("ErasePrincipal after the lift = %v", err)
	}

	var kinds []string
	recs, err := s.AuditRecords(ctx, 0, 100)
	for _, r := range recs {
		kinds = append(kinds, r.Kind)
	}
	if want := "legal_hold_placed legal_hold_placed run_erased legal_hold_lifted run_erased"; err != nil || strings.Join(kinds, " ") != want {
		t.Errorf("audit records = %v, %v; want %s", kinds, err, want)
	}
}
