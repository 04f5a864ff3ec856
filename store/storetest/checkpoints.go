package storetest

import (
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/usherhq/usher/store"
)

func testAuditCheckpoints(t *testing.T, s store.Store) {
	ctx := t.Context()
	if head, err := s.AuditHead(ctx); err != nil || head != (store.AuditHead{}) {
		t.Errorf("AuditHead of an empty log = %+v, %v; want the zero head", head, err)
	}
	if _, err := s.LatestAuditCheckpoint(ctx); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("LatestAuditCheckpoint with none = %v, want ErrNotFound", err)
	}
	var last store.AuditRecord
	for i := range 3 {
		r, err := s.AppendAudit(ctx, chained(store.AuditRecord{At: time.Now().Truncate(time.Microsecond), Kind: fmt.Sprintf("k%d", i)}))
		if err != nil {
			t.Fatalf("AppendAudit: %v", err)
		}
		last = r
	}
	if head, err := s.AuditHead(ctx); err != nil || head != (store.AuditHead{Seq: 3, Hash: last.Hash}) {
		t.Errorf("AuditHead = %+v, %v; want record 3 and its hash", head, err)
	}

	at := time.Date(2031, 3, 4, 5, 6, 7, 891011999, time.UTC)
	var want []store.AuditCheckpoint
	for _, seq := range []int64{1, 3, 2} {
		cp := store.AuditCheckpoint{Seq: seq, Hash: fmt.Sprintf("hash-%d", seq), At: at.Add(time.Duration(seq) * time.Minute), Note: fmt.Sprintf("note %d\n\n— sig\n", seq)}
		if err := s.InsertAuditCheckpoint(ctx, cp); err != nil {
			t.Fatalf("InsertAuditCheckpoint(%d): %v", seq, err)
		}
		cp.At = cp.At.Truncate(time.Microsecond)
		want = append(want, cp)
	}
	want[1], want[2] = want[2], want[1] // in order of seq
	got, err := s.ListAuditCheckpoints(ctx, 0, 10)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("ListAuditCheckpoints(0, 10) = %+v, %v;\nwant %+v", got, err, want)
	}
	if got, err := s.ListAuditCheckpoints(ctx, 1, 1); err != nil || !reflect.DeepEqual(got, want[1:2]) {
		t.Errorf("ListAuditCheckpoints(1, 1) = %+v, %v; want %+v", got, err, want[1:2])
	}
	if latest, err := s.LatestAuditCheckpoint(ctx); err != nil || latest != want[2] {
		t.Errorf("LatestAuditCheckpoint = %+v, %v; want %+v", latest, err, want[2])
	}
	dup := store.AuditCheckpoint{Seq: 3, Hash: "other", At: at, Note: "other note"}
	if err := s.InsertAuditCheckpoint(ctx, dup); !errors.Is(err, store.ErrConflict) {
		t.Errorf("InsertAuditCheckpoint of a seq already checkpointed = %v, want ErrConflict", err)
	}
	for name, bad := range map[string]store.AuditCheckpoint{
		"no seq":      {Hash: "h", At: at, Note: "n"},
		"no hash":     {Seq: 9, At: at, Note: "n"},
		"no time":     {Seq: 9, Hash: "h", Note: "n"},
		"no note":     {Seq: 9, Hash: "h", At: at},
		"NUL in note": {Seq: 9, Hash: "h", At: at, Note: "n\x00"},
	} {
		if err := s.InsertAuditCheckpoint(ctx, bad); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("InsertAuditCheckpoint(%s) = %v, want ErrInvalid", name, err)
		}
	}
	if _, err := s.ListAuditCheckpoints(ctx, 0, 0); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("ListAuditCheckpoints with limit 0 = %v, want ErrInvalid", err)
	}
}

// testAuditCheckpointRace: replicas that sign one head at once store one
// checkpoint of it.
func testAuditCheckpointRace(t *testing.T, s store.Store) {
	ctx := t.Context()
	oneWins(t, 4, "stored a checkpoint of seq 7", func(i int) error {
		return s.InsertAuditCheckpoint(ctx, store.AuditCheckpoint{
			Seq: 7, Hash: "h7", At: time.Now(), Note: fmt.Sprintf("note of racer %d", i),
		})
	})
	if got, err := s.ListAuditCheckpoints(ctx, 0, 10); err != nil || len(got) != 1 {
		t.Errorf("ListAuditCheckpoints after the race = %+v, %v; want one checkpoint", got, err)
	}
}

// oneWins runs race(i) for racers goroutines started at once, of whom
// exactly one must succeed and every other fail with ErrConflict.
func oneWins(t *testing.T, racers int, what string, race func(i int) error) {
	t.Helper()
	start := make(chan struct{})
	errs := make([]error, racers)
	var wg sync.WaitGroup
	for i := range racers {
		wg.Go(func() {
			<-start
			errs[i] = race(i)
		})
	}
	close(start)
	wg.Wait()
	won := 0
	for i, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, store.ErrConflict):
			t.Errorf("racer %d: %v, want nil or ErrConflict", i, err)
		}
	}
	if won != 1 {
		t.Errorf("%d racers %s, want exactly 1", won, what)
	}
}
