package store_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/usherhq/usher/store"
	"github.com/usherhq/usher/store/storetest"
)

// TestBackupWhileWriting copies a SQLite database while another
// goroutine keeps appending to its audit log: the copy opens, passes its
// integrity check, and holds a prefix of the log that ends at the head
// Backup reported, with everything appended before the backup began.
func TestBackupWhileWriting(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	s := openMigrated(t, filepath.Join(dir, "usher.db"))
	for range 50 {
		if _, err := s.AppendAudit(ctx, link("before")); err != nil {
			t.Fatal(err)
		}
	}
	stop, writing := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	var appendErr error
	wg.Go(func() {
		defer close(writing) // also when appending fails
		for n := 1; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := s.AppendAudit(ctx, link("during")); err != nil {
				appendErr = err
				return
			}
			if n == 10 {
				writing <- struct{}{}
			}
		}
	})
	<-writing // the backup begins while records are being appended
	dest := filepath.Join(dir, "backups", "usher-1.db")
	if err := os.Mkdir(filepath.Dir(dest), 0o700); err != nil {
		t.Fatal(err)
	}
	info, err := store.Backup(ctx, s, dest)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatalf("Backup: %v", err)
	}
	if appendErr != nil {
		t.Fatalf("appending while the backup ran: %v", appendErr)
	}
	if info.Path != dest || info.Head.Seq < 60 || info.Head.Hash == "" {
		t.Fatalf("Backup = %+v, want %s with a head at 60 or later", info, dest)
	}
	st, err := os.Stat(dest)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() != info.Bytes || st.Mode().Perm() != 0o600 {
		t.Errorf("the copy: %d bytes, mode %v; Backup said %d bytes, want mode 0600", st.Size(), st.Mode().Perm(), info.Bytes)
	}
	if leftovers := partials(t, filepath.Dir(dest)); len(leftovers) > 0 {
		t.Errorf("temporary files left beside the copy: %v", leftovers)
	}

	copied, err := store.Open(ctx, dest, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer copied.Close()
	if err := copied.Ready(ctx); err != nil {
		t.Fatalf("the copy is not a database at the newest migration: %v", err)
	}
	got := allAudit(t, copied)
	live := allAudit(t, s)
	if int64(len(got)) != info.Head.Seq || got[len(got)-1].Hash != info.Head.Hash {
		t.Fatalf("the copy holds %d records, want %d ending at the reported head %s", len(got), info.Head.Seq, info.Head.Hash)
	}
	for i, r := range got {
		if r.Seq != live[i].Seq || r.Hash != live[i].Hash || r.PrevHash != live[i].PrevHash {
			t.Fatalf("record %d of the copy differs from the database's: %+v against %+v", i+1, r, live[i])
		}
	}
	t.Logf("copied %d of %d records (%d bytes) while appending", len(got), len(live), info.Bytes)
}

// TestBackupRefuses checks what Backup will not do, and that each
// refusal leaves the files as they were.
func TestBackupRefuses(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	db := filepath.Join(dir, "usher.db")
	s := openMigrated(t, db)
	if _, err := s.AppendAudit(ctx, link("kept")); err != nil {
		t.Fatal(err)
	}
	existing := filepath.Join(dir, "earlier.db")
	if err := os.WriteFile(existing, []byte("an earlier backup"), 0o600); err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	for _, tc := range []struct {
		name, dest, want string
		ctx              context.Context
	}{
		{"the database itself", db, "is the database itself", ctx},
		{"its write-ahead log", db + "-wal", "is the database itself", ctx},
		{"the database by a relative path", relative(t, db), "is the database itself", ctx},
		{"an existing file", existing, "exists", ctx},
		{"a missing directory", filepath.Join(dir, "missing", "copy.db"), "no such file or directory", ctx},
		{"a cancelled context", filepath.Join(dir, "cancelled.db"), "context canceled", cancelled},
	} {
		_, err := store.Backup(tc.ctx, s, tc.dest)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Backup = %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
	if b, err := os.ReadFile(existing); err != nil || string(b) != "an earlier backup" {
		t.Errorf("the existing file after a refused backup: %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "cancelled.db")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a cancelled backup left its file: %v", err)
	}
	if leftovers := partials(t, dir); len(leftovers) > 0 {
		t.Errorf("temporary files left after refused backups: %v", leftovers)
	}
	if recs := allAudit(t, s); len(recs) != 1 {
		t.Errorf("the database holds %d records after the refusals, want 1", len(recs))
	}
}

// TestBackupOfPostgres checks that PostgreSQL's store points to its own
// tools.
func TestBackupOfPostgres(t *testing.T) {
	t.Parallel()
	s := storetest.NewPostgres(t)
	if _, err := store.Backup(t.Context(), s, filepath.Join(t.TempDir(), "copy.db")); !errors.Is(err, store.ErrNoOnlineBackup) {
		t.Fatalf("Backup on PostgreSQL = %v, want ErrNoOnlineBackup", err)
	}
}

// allAudit is every record of s's audit log, in order.
func allAudit(t *testing.T, s store.Store) []store.AuditRecord {
	t.Helper()
	var out []store.AuditRecord
	for {
		page, err := s.AuditRecords(t.Context(), int64(len(out)), 1000)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			return out
		}
		out = append(out, page...)
	}
}

// partials lists the temporary files of interrupted backups in dir.
func partials(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".partial") {
			out = append(out, e.Name())
		}
	}
	return slices.Clip(out)
}

// relative is path relative to the working directory.
func relative(t *testing.T, path string) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(wd, path)
	if err != nil {
		t.Fatal(err)
	}
	return rel
}

// TestRestore puts a backup in place of a database that moved on since,
// as a crashed server left it (its write-ahead log holding records not yet
// in the file): the database is the backup's afterwards, with none of the
// old one's files beside it for SQLite to apply, and the old one, moved
// aside, still holds every record it had.
func TestRestore(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	s := openMigrated(t, filepath.Join(dir, "usher.db"))
	for range 20 {
		if _, err := s.AppendAudit(ctx, link("backed-up")); err != nil {
			t.Fatal(err)
		}
	}
	backup := filepath.Join(dir, "backup.db")
	info, err := store.Backup(ctx, s, backup)
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, err := s.AppendAudit(ctx, link("after")); err != nil {
			t.Fatal(err)
		}
	}
	// The files of the open database, as a server killed now leaves them.
	crashed := filepath.Join(t.TempDir(), "usher.db")
	for _, suffix := range []string{"", "-wal", "-shm"} {
		b, err := os.ReadFile(filepath.Join(dir, "usher.db") + suffix)
		if err != nil {
			t.Fatalf("the open database's files: %v", err)
		}
		if err := os.WriteFile(crashed+suffix, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	backupBytes, err := os.ReadFile(backup)
	if err != nil {
		t.Fatal(err)
	}

	now := time.Date(2026, 12, 7, 13, 0, 0, 0, time.UTC)
	got, err := store.RestoreSQLite(ctx, backup, crashed, now)
	if err != nil {
		t.Fatalf("RestoreSQLite: %v", err)
	}
	if want := crashed + ".replaced-20261207T130000Z"; got.Replaced != want || got.Head != info.Head {
		t.Fatalf("RestoreSQLite = %+v, want the old database at %s and the backup's head %+v", got, want, info.Head)
	}
	for _, suffix := range []string{"-wal", "-shm"} {
		if _, err := os.Stat(crashed + suffix); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s beside the restored database: %v", suffix, err)
		}
	}
	if leftovers := partials(t, filepath.Dir(crashed)); len(leftovers) > 0 {
		t.Errorf("temporary files left by the restore: %v", leftovers)
	}
	if b, err := os.ReadFile(backup); err != nil || !bytes.Equal(b, backupBytes) {
		t.Errorf("the backup changed in the restore (%v)", err)
	}
	restored := openMigrated(t, crashed)
	if recs := allAudit(t, restored); len(recs) != 20 || recs[19].Hash != info.Head.Hash {
		t.Errorf("the restored database holds %d records, want the backup's 20", len(recs))
	}
	old := openMigrated(t, got.Replaced)
	if recs := allAudit(t, old); len(recs) != 25 {
		t.Errorf("the database moved aside holds %d records, want the 25 it had", len(recs))
	}
}

// TestRestoreRefuses checks that a restore leaves the database as it is
// when it is open, and when the backup is not a sound copy of one.
func TestRestoreRefuses(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	db := filepath.Join(dir, "usher.db")
	s := openMigrated(t, db)
	if _, err := s.AppendAudit(ctx, link("kept")); err != nil {
		t.Fatal(err)
	}
	backup := filepath.Join(dir, "backup.db")
	if _, err := store.Backup(ctx, s, backup); err != nil {
		t.Fatal(err)
	}
	notADatabase := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(notADatabase, bytes.Repeat([]byte("not a database\n"), 400), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, backup, want string }{
		{"the database open", backup, "open in another process"},
		{"a file that is not a database", notADatabase, "file is not a database"},
		{"a missing backup", filepath.Join(dir, "missing.db"), "no such file"},
	} {
		if _, err := store.RestoreSQLite(ctx, tc.backup, db, time.Now()); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: RestoreSQLite = %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.Contains(e.Name(), ".replaced-") || strings.HasSuffix(e.Name(), ".partial") {
			t.Errorf("a refused restore left %s", e.Name())
		}
	}
	if recs := allAudit(t, s); len(recs) != 1 {
		t.Errorf("the database holds %d records after the refusals, want 1", len(recs))
	}
}

// TestRestoreOntoNothing restores onto a machine with no database yet.
func TestRestoreOntoNothing(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := openMigrated(t, filepath.Join(t.TempDir(), "usher.db"))
	if _, err := s.AppendAudit(ctx, link("kept")); err != nil {
		t.Fatal(err)
	}
	backup := filepath.Join(t.TempDir(), "backup.db")
	if _, err := store.Backup(ctx, s, backup); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(t.TempDir(), "usher.db")
	got, err := store.RestoreSQLite(ctx, backup, db, time.Now())
	if err != nil || got.Replaced != "" || got.Head.Seq != 1 {
		t.Fatalf("RestoreSQLite = %+v, %v; want the backup's head and nothing replaced", got, err)
	}
	if recs := allAudit(t, openMigrated(t, db)); len(recs) != 1 {
		t.Errorf("the restored database holds %d records, want 1", len(recs))
	}
}
