package storetest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/usherhq/usher/store"
)

// testAttachments: an attachment is stored with its content's SHA-256
// and read back; one owner's same content is stored once and another
// owner's separately; bad values and an upload over the quota store
// nothing; binding to a run is the owner's, once per run; deleting the
// run deletes its attachments and the content no other attachment names;
// unsent attachments are swept.
func testAttachments(t *testing.T, s store.Store) {
	ctx := t.Context()
	for _, id := range []string{"run-a", "run-b"} {
		first := userMessage("hi")
		mustOpenRun(t, s, id, &first)
	}
	const quota = 1 << 10
	put := func(id, owner string, data []byte) store.Attachment {
		t.Helper()
		a, err := s.PutAttachment(ctx, store.Attachment{ID: id, Owner: owner, Tenant: "tenant", Name: id + ".txt", ContentType: "text/plain"}, data, quota)
		if err != nil {
			t.Fatalf("PutAttachment(%s): %v", id, err)
		}
		return a
	}
	data := []byte("hello, attachments")
	sum := sha256.Sum256(data)
	a1 := put("att-1", queueOwner, data)
	checkStoreTime(t, "CreatedAt", a1.CreatedAt)
	if a1.SHA256 != hex.EncodeToString(sum[:]) || a1.Size != int64(len(data)) || a1.RunID != "" || a1.Tenant != "tenant" {
		t.Errorf("PutAttachment = %+v", a1)
	}
	got, content, err := s.AttachmentData(ctx, "att-1")
	if err != nil || got != a1 || !bytes.Equal(content, data) {
		t.Errorf("AttachmentData = %+v, %q, %v; want %+v, %q", got, content, err, a1, data)
	}
	if g, err := s.GetAttachment(ctx, "att-1"); err != nil || g != a1 {
		t.Errorf("GetAttachment = %+v, %v", g, err)
	}
	if _, err := s.GetAttachment(ctx, "att-x"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetAttachment of a missing one = %v, want ErrNotFound", err)
	}
	if _, _, err := s.AttachmentData(ctx, "att-x"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("AttachmentData of a missing one = %v, want ErrNotFound", err)
	}
	// The same content again, and another owner's.
	a2 := put("att-2", queueOwner, data)
	put("att-bob", "issuer|tenant|bob", data)
	if a2.SHA256 != a1.SHA256 {
		t.Errorf("the same content has two hashes: %s, %s", a1.SHA256, a2.SHA256)
	}

	// Refusals store nothing.
	used := func(owner string) int64 {
		t.Helper()
		n, err := s.AttachmentBytes(ctx, owner)
		if err != nil {
			t.Fatalf("AttachmentBytes: %v", err)
		}
		return n
	}
	before := used(queueOwner)
	if before != int64(len(data)) {
		t.Errorf("AttachmentBytes of one content uploaded twice = %d, want %d (counted once)", before, len(data))
	}
	for name, tc := range map[string]struct {
		a    store.Attachment
		data []byte
		want error
	}{
		"empty":     {store.Attachment{ID: "att-e", Owner: queueOwner, Name: "e", ContentType: "text/plain"}, nil, store.ErrInvalid},
		"no name":   {store.Attachment{ID: "att-n", Owner: queueOwner, ContentType: "text/plain"}, data, store.ErrInvalid},
		"no owner":  {store.Attachment{ID: "att-o", Name: "o", ContentType: "text/plain"}, data, store.ErrInvalid},
		"NUL":       {store.Attachment{ID: "att-z", Owner: queueOwner, Name: "a\x00b", ContentType: "text/plain"}, data, store.ErrInvalid},
		"over":      {store.Attachment{ID: "att-q", Owner: queueOwner, Name: "q", ContentType: "text/plain"}, make([]byte, quota), store.ErrLimit},
		"duplicate": {store.Attachment{ID: "att-1", Owner: queueOwner, Name: "d", ContentType: "text/plain"}, []byte("other"), store.ErrConflict},
	} {
		if _, err := s.PutAttachment(ctx, tc.a, tc.data, quota); !errors.Is(err, tc.want) {
			t.Errorf("PutAttachment %s = %v, want %v", name, err, tc.want)
		}
	}
	if n := used(queueOwner); n != before {
		t.Errorf("after the refusals the owner holds %d bytes, want %d", n, before)
	}

	// Concurrent uploads within the quota: exactly those that fit.
	var wg sync.WaitGroup
	var mu sync.Mutex
	stored := 0
	chunk := make([]byte, 300)
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := append([]byte{byte(i)}, chunk...)
			_, err := s.PutAttachment(ctx, store.Attachment{ID: "att-c" + string(rune('0'+i)), Owner: "issuer|tenant|carol", Name: "c", ContentType: "text/plain"}, c, quota)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				stored++
			case !errors.Is(err, store.ErrLimit):
				t.Errorf("concurrent PutAttachment: %v", err)
			}
		}()
	}
	wg.Wait()
	if stored != 3 || used("issuer|tenant|carol") != 3*301 {
		t.Errorf("of four concurrent uploads of 301 bytes under a quota of %d, %d were stored (%d bytes), want 3", quota, stored, used("issuer|tenant|carol"))
	}

	// The quota counts a content once: dave, at his quota, may upload the
	// same bytes again, not other bytes.
	full := make([]byte, quota)
	put("att-d1", "issuer|tenant|dave", full)
	put("att-d2", "issuer|tenant|dave", full)
	if _, err := s.PutAttachment(ctx, store.Attachment{ID: "att-d3", Owner: "issuer|tenant|dave", Name: "d", ContentType: "text/plain"}, []byte("x"), quota); !errors.Is(err, store.ErrLimit) {
		t.Errorf("PutAttachment of new bytes at the quota = %v, want ErrLimit", err)
	}
	if n := used("issuer|tenant|dave"); n != quota {
		t.Errorf("dave holds %d bytes after two uploads of the same %d, want %d", n, quota, quota)
	}

	// Binding: the owner's, to one run.
	bound, err := s.AttachToRun(ctx, "run-a", queueOwner, []string{"att-2", "att-1"})
	if err != nil || len(bound) != 2 || bound[0].ID != "att-2" || bound[1].RunID != "run-a" {
		t.Fatalf("AttachToRun = %+v, %v", bound, err)
	}
	if _, err := s.AttachToRun(ctx, "run-a", queueOwner, []string{"att-1"}); err != nil {
		t.Errorf("AttachToRun again to the same run = %v", err)
	}
	for name, ids := range map[string][]string{"another run": {"att-1"}, "another owner": {"att-bob"}, "missing": {"att-x"}} {
		if _, err := s.AttachToRun(ctx, "run-b", queueOwner, ids); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("AttachToRun of %s = %v, want ErrNotFound", name, err)
		}
	}
	a3 := put("att-3", queueOwner, []byte("third"))
	if _, err := s.AttachToRun(ctx, "run-b", queueOwner, []string{"att-3", "att-bob"}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("AttachToRun with another owner's = %v, want ErrNotFound", err)
	}
	if g, _ := s.GetAttachment(ctx, "att-3"); g.RunID != "" {
		t.Errorf("a refused AttachToRun bound att-3 to %q", g.RunID)
	}

	// Deleting run-a deletes att-1 and att-2; bob's copy of the content
	// stays, and att-3.
	if err := s.DeleteRun(ctx, "run-a", nil, store.Withdrawal{}); err != nil {
		t.Fatalf("DeleteRun: %v", err)
	}
	for _, id := range []string{"att-1", "att-2"} {
		if _, _, err := s.AttachmentData(ctx, id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("after DeleteRun AttachmentData(%s) = %v, want ErrNotFound", id, err)
		}
	}
	if _, c, err := s.AttachmentData(ctx, "att-bob"); err != nil || !bytes.Equal(c, data) {
		t.Errorf("bob's attachment after alice's run was deleted = %q, %v", c, err)
	}
	if n := used(queueOwner); n != a3.Size {
		t.Errorf("after DeleteRun the owner holds %d bytes, want %d", n, a3.Size)
	}
	// The content is gone: storing it again stores it anew.
	again := put("att-4", queueOwner, data)
	if _, c, err := s.AttachmentData(ctx, again.ID); err != nil || !bytes.Equal(c, data) {
		t.Errorf("the content stored again = %q, %v", c, err)
	}

	// The unsent ones are swept; bound ones are not.
	if _, err := s.AttachToRun(ctx, "run-b", queueOwner, []string{"att-4"}); err != nil {
		t.Fatalf("AttachToRun: %v", err)
	}
	n, err := s.DeleteUnsentAttachments(ctx, time.Now().Add(time.Hour))
	if err != nil || n != 7 { // att-3, att-bob, carol's three and dave's two
		t.Errorf("DeleteUnsentAttachments = %d, %v; want 7", n, err)
	}
	if _, c, err := s.AttachmentData(ctx, "att-4"); err != nil || !bytes.Equal(c, data) {
		t.Errorf("the sent attachment after the sweep = %q, %v", c, err)
	}
	if n := used("issuer|tenant|bob"); n != 0 {
		t.Errorf("bob holds %d bytes after the sweep, want 0", n)
	}
}
