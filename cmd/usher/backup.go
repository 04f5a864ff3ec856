package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/usherhq/usher/internal/config"
	"github.com/usherhq/usher/store"
)

const (
	backupUsage  = "usage: usher backup FILE|DIRECTORY [flags]\n"
	restoreUsage = "usage: usher restore FILE [flags]\n"
)

// errPostgres is backup's and restore's answer on PostgreSQL.
var errPostgres = errors.New("this installation's database is PostgreSQL: back it up and restore it with pg_dump or " +
	"point-in-time recovery (docs/deploy.md, Backup and restore); usher backup and restore are for the embedded SQLite database")

// backupCmd runs `usher backup FILE`: a consistent copy of the embedded
// SQLite database, made while it serves (store.Backup), and what to keep
// with it — the audit head in the copy as an anchor, and the files the
// copy does not hold. It neither migrates the database nor opens its
// keys, so that the binary of an upgrade can back up before it migrates.
func (e *environment) backupCmd(ctx context.Context, args []string) error {
	var f installFlags
	fs := e.flagSet("backup")
	f.register(fs)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fmt.Fprint(e.stderr, backupUsage)
		return errUsage
	}
	cfg, log, err := e.loadConfig(&f)
	if err != nil {
		return err
	}
	if cfg.Database.URL != "" {
		return errPostgres
	}
	db, err := absoluteSQLitePath(cfg)
	if err != nil {
		return err
	}
	if _, err := os.Stat(db); errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("no database at %s (is --data-dir, or server.data_dir, the server's?)", db)
	}
	dest := backupFile(pos[0], time.Now())
	if dir, err := filepath.Abs(filepath.Dir(dest)); err != nil {
		return err
	} else if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("no directory %s to write the backup in", dir)
	}
	st, err := store.Open(ctx, db, &store.Options{Logger: log})
	if err != nil {
		return fmt.Errorf("open database: %w", err)
	}
	defer st.Close()
	info, err := store.Backup(ctx, st, dest)
	if err != nil {
		return err
	}
	e.printBackup(cfg, db, info)
	return nil
}

// backupFile is the file a backup to dest writes: dest itself, or in a
// directory a new file named by the time, as a timer or cron job backing
// up into one directory wants.
func backupFile(dest string, now time.Time) string {
	if fi, err := os.Stat(dest); err == nil && fi.IsDir() {
		return filepath.Join(dest, "usher-"+now.UTC().Format("20060102T150405Z")+".db")
	}
	return dest
}

// printBackup says what backupCmd wrote and what else to keep.
func (e *environment) printBackup(cfg config.Config, db string, info store.BackupInfo) {
	fmt.Fprintf(e.stdout, "backed up %s to %s (%d bytes): one consistent snapshot\n", db, info.Path, info.Bytes)
	if info.Head.Seq == 0 {
		fmt.Fprintln(e.stdout, "audit log: empty")
	} else {
		fmt.Fprintf(e.stdout, "audit head in the copy: %d:%s\n", info.Head.Seq, info.Head.Hash)
		fmt.Fprintf(e.stdout, "  keep it apart from the copy; after a restore, usher audit verify --anchor %d:%s\n", info.Head.Seq, info.Head.Hash)
		fmt.Fprintln(e.stdout, "  shows that nothing up to it was cut off or rewritten")
	}
	kek := "broker.key_encryption_key, as configured"
	if cfg.Broker.KeyEncryptionKey == "" {
		kek = filepath.Join(filepath.Dir(db), "broker.key")
	}
	fmt.Fprintf(e.stdout, "not in the copy, keep them too: the key-encryption key (%s), without which the copy's signing keys\n", kek)
	lock, err := filepath.Abs(cfg.Policy.LockFile)
	if err != nil {
		lock = cfg.Policy.LockFile
	}
	fmt.Fprintf(e.stdout, "  cannot be opened, and the tool lock (%s)\n", lock)
}

// restoreCmd runs `usher restore FILE`: the copy `usher backup` wrote put
// in place of the embedded SQLite database, which no process may have
// open (store.RestoreSQLite); the database it replaces is moved aside,
// not deleted.
func (e *environment) restoreCmd(ctx context.Context, args []string) error {
	var f installFlags
	fs := e.flagSet("restore")
	f.register(fs)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fmt.Fprint(e.stderr, restoreUsage)
		return errUsage
	}
	cfg, _, err := e.loadConfig(&f)
	if err != nil {
		return err
	}
	if cfg.Database.URL != "" {
		return errPostgres
	}
	if err := makeDataDir(cfg); err != nil {
		return err
	}
	db, err := absoluteSQLitePath(cfg)
	if err != nil {
		return err
	}
	info, err := store.RestoreSQLite(ctx, pos[0], db, time.Now())
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "restored %s from %s\n", db, pos[0])
	if info.Replaced != "" {
		fmt.Fprintf(e.stdout, "the database it replaced is at %s (remove it once the restore is checked)\n", info.Replaced)
	}
	if info.Head.Seq == 0 {
		fmt.Fprintln(e.stdout, "audit log: empty")
	} else {
		fmt.Fprintf(e.stdout, "audit head: %d:%s\n", info.Head.Seq, info.Head.Hash)
	}
	fmt.Fprintln(e.stdout, "next: start Usher with the key-encryption key of the backup, and run usher audit verify --anchor SEQ:HASH")
	fmt.Fprintln(e.stdout, "  with the anchor recorded at the backup (or the last one before it)")
	return nil
}

// sqlitePath is the embedded database's file: usher.db in the data
// directory.
func sqlitePath(cfg config.Config) string {
	return filepath.Join(cfg.Server.DataDir, "usher.db")
}

// absoluteSQLitePath is sqlitePath as an absolute path, which backup and
// restore print: the data directory is often relative (./data).
func absoluteSQLitePath(cfg config.Config) (string, error) {
	return filepath.Abs(sqlitePath(cfg))
}
