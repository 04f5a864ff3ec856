package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// ErrNoOnlineBackup is Backup's error for a database that has its own
// tools for copies: PostgreSQL (pg_dump, or point-in-time recovery).
var ErrNoOnlineBackup = errors.New("store: the database is PostgreSQL: back it up with its own tools (pg_dump, or point-in-time recovery)")

// BackupInfo describes a copy Backup wrote.
type BackupInfo struct {
	// Path is the copy's absolute path.
	Path string
	// Bytes is its size.
	Bytes int64
	// Head is the audit log's head in the copy (zero when the log is
	// empty): an anchor to keep with it, which `usher audit verify
	// --anchor` checks a database restored from it against.
	Head AuditHead
}

// Backup writes a consistent copy of the SQLite database behind s to the
// new file path, while the database serves: the copy is one snapshot
// (SQLite's VACUUM INTO, a read transaction that writers in WAL mode do
// not wait for), with every commit before it and none after. A plain copy
// of the file would leave out what is still in its write-ahead log, or
// catch a page half-written.
//
// The copy is written beside path under a temporary name, checked
// (PRAGMA integrity_check), synced, and only then given its name, which
// must not exist yet: an interrupted or failed backup leaves no file at
// path, and an existing file is never replaced. It is readable by its
// owner only, like the database, which holds the sealed signing keys.
// The copy is a database as Usher migrates it: RestoreSQLite puts it in
// place of the database while no process has that open.
//
// On PostgreSQL it fails with ErrNoOnlineBackup.
func Backup(ctx context.Context, s Store, path string) (BackupInfo, error) {
	lite, ok := s.(*sqliteStore)
	if !ok {
		return BackupInfo{}, ErrNoOnlineBackup
	}
	return lite.backup(ctx, path)
}

func (s *sqliteStore) backup(ctx context.Context, path string) (BackupInfo, error) {
	dest, err := filepath.Abs(path)
	if err != nil {
		return BackupInfo{}, fmt.Errorf("store: backup: %w", err)
	}
	if s.path != "" && sameFileFamily(dest, s.path) {
		return BackupInfo{}, fmt.Errorf("store: backup: %s is the database itself (or one of its files): name a new file", dest)
	}
	if _, err := os.Lstat(dest); err == nil {
		return BackupInfo{}, fmt.Errorf("store: backup: %s exists: name a new file (a backup never replaces one)", dest)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return BackupInfo{}, fmt.Errorf("store: backup: %w", err)
	}
	// VACUUM INTO writes into a file that does not exist or is empty.
	tmp, err := os.CreateTemp(filepath.Dir(dest), "."+filepath.Base(dest)+".*.partial")
	if err != nil {
		return BackupInfo{}, fmt.Errorf("store: backup: %w", err)
	}
	partial := tmp.Name()
	tmp.Close()
	defer os.Remove(partial) // after the link below, only the second name
	if err := s.vacuumInto(ctx, partial); err != nil {
		return BackupInfo{}, err
	}
	head, err := checkCopy(ctx, partial)
	if err != nil {
		return BackupInfo{}, fmt.Errorf("store: backup: %w", err)
	}
	size, err := syncFile(partial)
	if err != nil {
		return BackupInfo{}, fmt.Errorf("store: backup: %w", err)
	}
	// A hard link gives the copy its name only when no file has it.
	if err := os.Link(partial, dest); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return BackupInfo{}, fmt.Errorf("store: backup: %s was made meanwhile: name a new file", dest)
		}
		return BackupInfo{}, fmt.Errorf("store: backup: %w", err)
	}
	if err := os.Remove(partial); err != nil {
		return BackupInfo{}, fmt.Errorf("store: backup: %w", err)
	}
	if err := syncDir(filepath.Dir(dest)); err != nil {
		return BackupInfo{}, fmt.Errorf("store: backup: %w", err)
	}
	return BackupInfo{Path: dest, Bytes: size, Head: head}, nil
}

// vacuumInto writes the snapshot into the empty file path, on a
// connection of its own: the read pool's are query-only, which VACUUM
// INTO counts as writing, and the writer must not wait for a copy. In WAL
// mode the copy's read transaction neither waits for writers nor holds
// them up.
func (s *sqliteStore) vacuumInto(ctx context.Context, path string) error {
	c, err := sqlite.NewConnector(s.path + "?" + url.Values{
		"_pragma": {fmt.Sprintf("busy_timeout(%d)", sqliteBusyTimeout.Milliseconds())},
	}.Encode())
	if err != nil {
		return fmt.Errorf("store: backup: %w", err)
	}
	db := sql.OpenDB(c)
	defer db.Close()
	if _, err := db.ExecContext(ctx, `VACUUM INTO ?`, path); err != nil {
		return fmt.Errorf("store: backup: copy the database: %w", s.fail(err))
	}
	return nil
}

// checkCopy opens the copy at path read-only, as a file nothing else
// writes, checks its integrity, and reads its audit log's head.
func checkCopy(ctx context.Context, path string) (AuditHead, error) {
	c, err := sqlite.NewConnector("file:" + (&url.URL{Path: path}).EscapedPath() + "?mode=ro&immutable=1")
	if err != nil {
		return AuditHead{}, fmt.Errorf("open the copy: %w", err)
	}
	db := sql.OpenDB(c)
	defer db.Close()
	var verdict string
	if err := db.QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&verdict); err != nil {
		return AuditHead{}, fmt.Errorf("check the copy: %w", err)
	}
	if verdict != "ok" {
		return AuditHead{}, fmt.Errorf("the copy failed its integrity check: %s", verdict)
	}
	copied := core{read: db, lite: true, translate: sqliteError}
	head, err := copied.AuditHead(ctx)
	if err != nil {
		return AuditHead{}, fmt.Errorf("read the copy's audit head (is it a copy of Usher's database?): %w", err)
	}
	return head, nil
}

// sameFileFamily reports whether the absolute path is the SQLite
// database db or one of the files SQLite keeps beside it.
func sameFileFamily(path, db string) bool {
	abs, err := filepath.Abs(db)
	if err != nil {
		return false
	}
	for _, suffix := range []string{"", "-wal", "-shm", "-journal"} {
		if path == abs+suffix {
			return true
		}
	}
	return false
}

// syncFile flushes the file at path to stable storage and returns its
// size.
func syncFile(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return 0, err
	}
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

// syncDir flushes a directory's entries, so that a file given a name in
// it keeps that name after a crash.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// RestoreInfo describes what RestoreSQLite did.
type RestoreInfo struct {
	// Head is the audit log's head in the restored database (zero when
	// its log is empty).
	Head AuditHead
	// Replaced is where the database that was at the path was moved
	// ("" when there was none): nothing is deleted by a restore.
	Replaced string
}

// RestoreSQLite puts the copy at backup (as Backup wrote it) in place of
// the SQLite database at database, which no process may have open: it
// checks the copy's integrity and writes it beside the database under a
// temporary name, synced; takes the database's exclusive lock to make sure
// nothing uses it (a server still running fails the restore); gives the
// database a second name, database + ".replaced-" + a timestamp; and
// renames the copy over it. The path names a whole database throughout —
// the old one until the rename, the restored one after it — so that an
// interrupted restore leaves one or the other. The copy itself is left
// as it is.
func RestoreSQLite(ctx context.Context, backup, database string, now time.Time) (RestoreInfo, error) {
	if _, err := os.Stat(backup); err != nil {
		return RestoreInfo{}, fmt.Errorf("store: restore: %w", err)
	}
	head, err := checkCopy(ctx, backup)
	if err != nil {
		return RestoreInfo{}, fmt.Errorf("store: restore: %s: %w", backup, err)
	}
	tmp, err := copyBeside(backup, database)
	if err != nil {
		return RestoreInfo{}, fmt.Errorf("store: restore: %w", err)
	}
	defer os.Remove(tmp) // after the rename, a name no longer there
	info := RestoreInfo{Head: head}
	if _, err := os.Stat(database); err == nil {
		if err := checkUnused(ctx, database); err != nil {
			return RestoreInfo{}, err
		}
		info.Replaced = database + ".replaced-" + now.UTC().Format("20060102T150405Z")
		// The write-ahead log and its index go with the file they belong
		// to (closing the last connection removes them, so there are
		// none unless that failed): left beside the restored file,
		// SQLite would apply them to it.
		for _, suffix := range []string{"-wal", "-shm"} {
			if err := os.Rename(database+suffix, info.Replaced+suffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return RestoreInfo{}, fmt.Errorf("store: restore: move the database aside: %w", err)
			}
		}
		if err := os.Link(database, info.Replaced); err != nil {
			return RestoreInfo{}, fmt.Errorf("store: restore: keep the database: %w", err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return RestoreInfo{}, fmt.Errorf("store: restore: %w", err)
	}
	if err := os.Rename(tmp, database); err != nil {
		return RestoreInfo{}, fmt.Errorf("store: restore: %w", err)
	}
	if err := syncDir(filepath.Dir(database)); err != nil {
		return RestoreInfo{}, fmt.Errorf("store: restore: %w", err)
	}
	return info, nil
}

// checkUnused fails when another connection has the database at path
// open: in WAL mode every open connection holds a shared lock that the
// exclusive locking mode cannot take. Once it could, closing the last
// connection checkpoints the write-ahead log into the file and removes
// it, so that the file alone is the whole database.
func checkUnused(ctx context.Context, path string) error {
	c, err := sqlite.NewConnector(path + "?" + url.Values{"_pragma": {"busy_timeout(0)", "locking_mode(EXCLUSIVE)"}}.Encode())
	if err != nil {
		return fmt.Errorf("store: restore: %w", err)
	}
	db := sql.OpenDB(c)
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, `BEGIN EXCLUSIVE`); err != nil {
		if le := (*sqlite.Error)(nil); errors.As(err, &le) && le.Code()&0xff == sqlite3.SQLITE_BUSY {
			return fmt.Errorf("store: restore: %s is open in another process: stop every Usher that uses it first", path)
		}
		return fmt.Errorf("store: restore: %s: %w", path, err)
	}
	if _, err := db.ExecContext(ctx, `COMMIT`); err != nil {
		return fmt.Errorf("store: restore: %s: %w", path, err)
	}
	return nil
}

// copyBeside writes a copy of the file from beside the path to, under a
// temporary name it returns, synced.
func copyBeside(from, to string) (string, error) {
	src, err := os.Open(from)
	if err != nil {
		return "", err
	}
	defer src.Close()
	tmp, err := os.CreateTemp(filepath.Dir(to), "."+filepath.Base(to)+".*.partial")
	if err != nil {
		return "", err
	}
	_, err = io.Copy(tmp, src)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp.Name())
		return "", err
	}
	return tmp.Name(), nil
}
