package storetest

import (
	"errors"
	"reflect"
	"sync"
	"testing"

	"github.com/usherhq/usher/store"
)

func testModelUsage(t *testing.T, s store.Store) {
	ctx := t.Context()
	add := func(u store.ModelUsage) {
		t.Helper()
		if err := s.AddModelUsage(ctx, u); err != nil {
			t.Fatalf("AddModelUsage(%+v): %v", u, err)
		}
	}
	alice, bob := "iss|t|alice", "iss|t|bob"
	// alice, two days of one model's turns, one of them added twice at
	// once from several writers; a compaction; another model; bob, less.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if err := s.AddModelUsage(ctx, store.ModelUsage{Principal: alice, Day: "2026-12-01", Model: "m", Purpose: "turn", Requests: 1, InputTokens: 100, OutputTokens: 10}); err != nil {
				t.Errorf("AddModelUsage at once: %v", err)
			}
		})
	}
	wg.Wait()
	add(store.ModelUsage{Principal: alice, Day: "2026-12-02", Model: "m", Purpose: "turn", Requests: 2, InputTokens: 200, OutputTokens: 20})
	add(store.ModelUsage{Principal: alice, Day: "2026-12-02", Model: "m", Purpose: "compaction", Requests: 1, InputTokens: 5000, OutputTokens: 300})
	add(store.ModelUsage{Principal: alice, Day: "2026-12-03", Model: "big", Purpose: "turn", Requests: 1, InputTokens: 50})
	add(store.ModelUsage{Principal: bob, Day: "2026-12-02", Model: "m", Purpose: "turn", Requests: 1, InputTokens: 30, OutputTokens: 3})
	add(store.ModelUsage{Principal: bob, Day: "2026-11-30", Model: "m", Purpose: "turn", Requests: 9, InputTokens: 9000, OutputTokens: 900})

	got, err := s.ModelUsageBetween(ctx, "2026-12-01", "2026-12-03", 10)
	if err != nil {
		t.Fatal(err)
	}
	want := []store.ModelUsage{
		{Principal: alice, Model: "m", Purpose: "compaction", Requests: 1, InputTokens: 5000, OutputTokens: 300},
		{Principal: alice, Model: "m", Purpose: "turn", Requests: 10, InputTokens: 1000, OutputTokens: 100},
		{Principal: alice, Model: "big", Purpose: "turn", Requests: 1, InputTokens: 50},
		{Principal: bob, Model: "m", Purpose: "turn", Requests: 1, InputTokens: 30, OutputTokens: 3},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ModelUsageBetween(12-01, 12-03) =\n%+v\nwant, the most tokens first, bob's day before left out:\n%+v", got, want)
	}
	if got, err := s.ModelUsageBetween(ctx, "2026-12-02", "2026-12-02", 2); err != nil || len(got) != 2 || got[0].Purpose != "compaction" || got[1].Requests != 2 {
		t.Errorf("ModelUsageBetween(12-02, 12-02, limit 2) = %+v, %v; want alice's compaction and her day's turns", got, err)
	}
	if got, err := s.ModelUsageBetween(ctx, "2027-01-01", "2027-01-31", 10); err != nil || len(got) != 0 {
		t.Errorf("ModelUsageBetween of days with none = %+v, %v; want none", got, err)
	}

	// One person's day, every model and purpose: alice's 2026-12-02 is
	// 220 of turns and 5,300 of a compaction; bob's day is his alone.
	for _, c := range []struct {
		principal, day string
		want           int64
	}{{alice, "2026-12-02", 5520}, {alice, "2026-12-01", 880}, {bob, "2026-12-02", 33}, {bob, "2026-12-01", 0}, {"iss|t|carol", "2026-12-02", 0}} {
		if got, err := s.ModelTokensOn(ctx, c.principal, c.day); err != nil || got != c.want {
			t.Errorf("ModelTokensOn(%s, %s) = %d, %v; want %d", c.principal, c.day, got, err, c.want)
		}
	}
	for _, c := range [][2]string{{"", "2026-12-02"}, {alice, "2026-12-2"}, {alice, ""}} {
		if _, err := s.ModelTokensOn(ctx, c[0], c[1]); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("ModelTokensOn(%q, %q) = %v, want ErrInvalid", c[0], c[1], err)
		}
	}

	for _, bad := range []store.ModelUsage{
		{Day: "2026-12-01", Model: "m", Purpose: "turn"},
		{Principal: alice, Day: "2026-12-1", Model: "m", Purpose: "turn"},
		{Principal: alice, Day: "2026-02-30", Model: "m", Purpose: "turn"},
		{Principal: alice, Day: "2026-12-01", Purpose: "turn"},
		{Principal: alice, Day: "2026-12-01", Model: "m", Purpose: "turn", InputTokens: -1},
		{Principal: "a\x00b", Day: "2026-12-01", Model: "m", Purpose: "turn"},
	} {
		if err := s.AddModelUsage(ctx, bad); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("AddModelUsage(%+v) = %v, want ErrInvalid", bad, err)
		}
	}
	for _, r := range [][2]string{{"2026-12-03", "2026-12-01"}, {"yesterday", "2026-12-01"}, {"2026-12-01", ""}} {
		if _, err := s.ModelUsageBetween(ctx, r[0], r[1], 10); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("ModelUsageBetween(%q, %q) = %v, want ErrInvalid", r[0], r[1], err)
		}
	}
	if _, err := s.ModelUsageBetween(ctx, "2026-12-01", "2026-12-03", 0); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("ModelUsageBetween with limit 0 = %v, want ErrInvalid", err)
	}
}
