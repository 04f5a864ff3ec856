package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/usherhq/usher/store"
)

// testConsentAnswers checks that a consent form is answered once: a
// second answer, the same or the other, is refused with the first, and
// of racing answers exactly one is recorded; expired answers are swept.
func testConsentAnswers(t *testing.T, s store.Store) {
	ctx := t.Context()
	now := oauthNow()
	answer := func(hash, decision string) store.ConsentAnswer {
		return store.ConsentAnswer{RequestHash: hash, Decision: decision, AnsweredAt: now, ExpiresAt: now.Add(10 * time.Minute)}
	}
	first, err := s.AnswerConsentForm(ctx, answer("form-1", store.ConsentDeny))
	if err != nil || first != answer("form-1", store.ConsentDeny) {
		t.Fatalf("AnswerConsentForm = %+v, %v", first, err)
	}
	for _, decision := range []string{store.ConsentApprove, store.ConsentDeny} {
		later := answer("form-1", decision)
		later.AnsweredAt = now.Add(time.Second)
		prev, err := s.AnswerConsentForm(ctx, later)
		if !errors.Is(err, store.ErrConflict) || prev != first {
			t.Errorf("answering %s again = %+v, %v; want ErrConflict and the first answer", decision, prev, err)
		}
	}
	if _, err := s.AnswerConsentForm(ctx, answer("form-2", store.ConsentApprove)); err != nil {
		t.Errorf("another form: %v", err)
	}

	// Racing answers (a double click, a form posted in two tabs, across
	// replicas): exactly one is recorded.
	oneWins(t, 8, "answered one form", func(i int) error {
		_, err := s.AnswerConsentForm(ctx, answer("form-race", []string{store.ConsentApprove, store.ConsentDeny}[i%2]))
		return err
	})

	for name, a := range map[string]store.ConsentAnswer{
		"no request hash":   answer("", store.ConsentApprove),
		"another decision":  answer("form-3", "maybe"),
		"expired at answer": {RequestHash: "form-3", Decision: store.ConsentDeny, AnsweredAt: now, ExpiresAt: now},
	} {
		if _, err := s.AnswerConsentForm(ctx, a); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}

	// The sweep deletes the answers expired at its time, and only those.
	old := answer("form-old", store.ConsentApprove)
	old.AnsweredAt, old.ExpiresAt = now.Add(-time.Hour), now.Add(-time.Minute)
	if _, err := s.AnswerConsentForm(ctx, old); err != nil {
		t.Fatal(err)
	}
	if n, err := s.DeleteExpiredOAuth(ctx, now); err != nil || n != 1 {
		t.Errorf("DeleteExpiredOAuth = %d, %v; want the one expired answer", n, err)
	}
	for hash, kept := range map[string]bool{"form-old": false, "form-1": true, "form-race": true} {
		_, err := s.AnswerConsentForm(ctx, answer(hash, store.ConsentApprove))
		if got := errors.Is(err, store.ErrConflict); got != kept {
			t.Errorf("%s after the sweep: %v, want kept %v", hash, err, kept)
		}
	}
}
