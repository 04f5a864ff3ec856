package main

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/usherhq/usher/store/storetest"
)

// TestCommandsActOnAnInstallationOnly: the commands that read or change an
// installation's data refuse a data directory or database that holds
// none, and make nothing: no data directory, no SQLite file, no seal key,
// no schema. Only serve and migrate set one up (and the catalog's review,
// tools lock and diff, which runs before the first start).
func TestCommandsActOnAnInstallationOnly(t *testing.T) {
	t.Parallel()
	commands := [][]string{
		{"status"}, {"usage"}, {"hold", "list"}, {"hold", "place", "alice", "--reason", "matter 7"},
		{"hold", "lift", "alice"}, {"erase", "alice", "--yes"}, {"export", "alice"}, {"audit", "verify"},
		{"audit", "export"}, {"audit", "rotate-key"}, {"clients", "list"}, {"keys", "reseal"},
		{"token", "mcp", "--sub", "alice"},
	}
	cmd := func(args ...string) (string, error) {
		t.Helper()
		var out, errOut bytes.Buffer
		err := run(context.Background(), args, getenv(nil), &out, &errOut)
		return out.String() + errOut.String(), err
	}

	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		data := filepath.Join(t.TempDir(), "dta")
		for _, c := range commands {
			out, err := cmd(append(c, "--data-dir", data)...)
			if err == nil || !strings.Contains(err.Error(), "no database at "+data+"/usher.db") {
				t.Errorf("usher %s on a directory with no installation = %v (%q), want no database", strings.Join(c, " "), err, out)
			}
			if _, err := os.Stat(data); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("usher %s made the data directory (%v)", strings.Join(c, " "), err)
			}
		}
	})

	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		dbURL := storetest.PostgresURL(t)
		elsewhere := filepath.Join(t.TempDir(), "elsewhere")
		tables := func() int {
			t.Helper()
			conn, err := pgx.Connect(t.Context(), dbURL)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(t.Context())
			var n int
			if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		for _, c := range commands {
			out, err := cmd(append(c, "--database-url", dbURL, "--data-dir", elsewhere)...)
			if err == nil || !strings.Contains(err.Error(), `migrations pending (1 to `) || !strings.Contains(err.Error(), `run "usher migrate"`) {
				t.Errorf("usher %s on a database with no schema = %v (%q), want the migrations pending", strings.Join(c, " "), err, out)
			}
		}
		if n := tables(); n != 0 {
			t.Errorf("the commands made %d tables", n)
		}
		if _, err := os.Stat(elsewhere); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("the commands made a data directory (%v)", err)
		}

		// Migrated, elsewhere: a command without the servers' seal key
		// reads what needs none, and one that needs it says which.
		servers := filepath.Join(t.TempDir(), "servers")
		if _, err := cmd("migrate", "--database-url", dbURL, "--data-dir", servers); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(servers, "broker.key")); err != nil {
			t.Fatalf("migrate made no seal key: %v", err)
		}
		for _, c := range [][]string{{"status", "-json"}, {"audit", "verify"}, {"hold", "list"}, {"clients", "list"}} {
			out, err := cmd(append(c, "--database-url", dbURL, "--data-dir", elsewhere)...)
			if err != nil && !errors.Is(err, errFailed) { // status exits 1: no replica alive
				t.Errorf("usher %s without the seal key = %v (%q)", strings.Join(c, " "), err, out)
			}
		}
		for _, c := range [][]string{{"token", "mcp", "--sub", "alice"}, {"audit", "rotate-key"}, {"keys", "reseal"}} {
			out, err := cmd(append(c, "--database-url", dbURL, "--data-dir", elsewhere)...)
			if err == nil || !strings.Contains(err.Error(), "no key encryption key: broker.key_encryption_key is not set and there is no "+elsewhere+"/broker.key") {
				t.Errorf("usher %s without the seal key = %v (%q), want no key encryption key", strings.Join(c, " "), err, out)
			}
		}
		if _, err := os.Stat(elsewhere); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("the commands made a data directory (%v)", err)
		}
	})
}
