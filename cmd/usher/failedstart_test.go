package main

import (
	"cmp"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/usherhq/usher/internal/testenv"
)

// TestFailedStartLeavesNothing shows that a start refused for its
// configuration — an issuer that does not answer discovery, a database
// that cannot be reached — leaves no file and no table behind: the next
// start, with the mistake mended, begins from nothing as the first would
// have.
func TestFailedStartLeavesNothing(t *testing.T) {
	t.Parallel()
	issuer := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(issuer.Close)
	badIssuer := map[string]string{"USHER_IDENTITY_ISSUER": issuer.URL, "USHER_IDENTITY_AUDIENCES": "api://usher",
		"USHER_IDENTITY_REQUIRED_SCOPES": "access_as_user"}
	db := newFaultDB(t)
	withDB := func(env map[string]string, url string) map[string]string {
		out := map[string]string{"USHER_DATABASE_URL": url}
		for k, v := range env {
			out[k] = v
		}
		return out
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string // in the error
		db   string // the database that must stay empty
	}{
		{"an issuer without discovery, on SQLite", badIssuer, "identity: discovery for " + issuer.URL, ""},
		{"an issuer without discovery, on PostgreSQL", withDB(badIssuer, db.url), "identity: discovery for " + issuer.URL, db.url},
		{"the development sign-in on every address, in plain http", map[string]string{"USHER_SERVER_ADDR": "0.0.0.0:0"}, "must be https or http on a loopback host: set server.public_url", ""},
		{"an unreachable database", withDB(nil, "postgres://usher@"+testenv.FreeAddr(t)+"/usher?sslmode=disable&connect_timeout=5"), "database", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			var stderr testenv.Output
			addr := cmp.Or(tc.env["USHER_SERVER_ADDR"], "127.0.0.1:0")
			err := run(t.Context(), []string{"serve", "--addr", addr, "--data-dir", filepath.Join(dir, "data")},
				getenv(tc.env), io.Discard, &stderr)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("serve = %v, want an error about the %s\n%s", err, tc.want, &stderr)
			}
			if strings.Contains(err.Error(), "identity: identity") {
				t.Errorf("serve = %v, which says where it failed twice", err)
			}
			if left, _ := os.ReadDir(dir); len(left) != 0 {
				t.Errorf("the failed start left %v in its directory", left)
			}
			if tc.db != "" {
				if tables := tablesOf(t, tc.db); len(tables) != 0 {
					t.Errorf("the failed start left tables %v", tables)
				}
			}
		})
	}
}

// tablesOf lists the tables of the database at url, outside PostgreSQL's
// own schemas.
func tablesOf(t *testing.T, url string) []string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT table_schema || '.' || table_name FROM information_schema.tables
WHERE table_schema NOT IN ('pg_catalog', 'information_schema') ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return tables
}

// TestSecondReplicaWithoutTheKeyNamesIt shows that a replica started
// without the installation's key encryption key is refused with the
// setting to mend, not only the cryptography's complaint.
func TestSecondReplicaWithoutTheKeyNamesIt(t *testing.T) {
	t.Parallel()
	db := newFaultDB(t)
	first := startServer(t, map[string]string{"USHER_DATABASE_URL": db.url, "USHER_BROKER_KEY_ENCRYPTION_KEY": "q83vEjRWeJq83vEjRWeJq83vEjRWeJq83vEjRWeJq80="})
	if err := first.shutdown(); err != nil {
		t.Fatal(err)
	}
	for name, env := range map[string]map[string]string{
		"no key":      {"USHER_DATABASE_URL": db.url},
		"another key": {"USHER_DATABASE_URL": db.url, "USHER_BROKER_KEY_ENCRYPTION_KEY": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="},
	} {
		var stderr testenv.Output
		err := run(t.Context(), []string{"serve", "--addr", "127.0.0.1:0", "--data-dir", t.TempDir()}, getenv(env), io.Discard, &stderr)
		if err == nil || !strings.Contains(err.Error(), "USHER_BROKER_KEY_ENCRYPTION_KEY") {
			t.Errorf("%s: serve = %v, want it to name USHER_BROKER_KEY_ENCRYPTION_KEY", name, err)
		}
	}
}

// TestStartMakesTheDirectoriesItWrites shows that a start on PostgreSQL
// with a key encryption key, which keeps nothing else in the data
// directory, makes it for the first tool lock it writes there.
func TestStartMakesTheDirectoriesItWrites(t *testing.T) {
	t.Parallel()
	db := newFaultDB(t)
	dataDir := filepath.Join(t.TempDir(), "not", "yet")
	startServerIn(t, dataDir, map[string]string{"USHER_DATABASE_URL": db.url, "USHER_BROKER_KEY_ENCRYPTION_KEY": "q83vEjRWeJq83vEjRWeJq83vEjRWeJq83vEjRWeJq80="})
	if _, err := os.Stat(filepath.Join(dataDir, "tools.lock")); err != nil {
		t.Errorf("no tool lock in the data directory: %v", err)
	}
}
