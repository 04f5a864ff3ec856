package store

import "testing"

func TestSQLiteDialect(t *testing.T) {
	tests := []struct{ name, pg, lite string }{
		{"placeholders", `SELECT a FROM t WHERE a = $1 AND b = $12`, `SELECT a FROM t WHERE a = ?1 AND b = ?12`},
		{"casts", `SELECT CASE WHEN $1::bigint < 0 THEN $2::timestamptz END, $3::text[]`, `SELECT CASE WHEN ?1 < 0 THEN ?2 END, ?3`},
		{"row locks", "SELECT id FROM t\n\tFOR UPDATE SKIP LOCKED)", "SELECT id FROM t)"},
		{"row lock", "SELECT id FROM t WHERE id = $1 FOR UPDATE", "SELECT id FROM t WHERE id = ?1"},
		{"quoted text kept", `SELECT '$1::x', "a$2" FROM t WHERE a = $1`, `SELECT '$1::x', "a$2" FROM t WHERE a = ?1`},
		{"dollar without digit", `SELECT '$' || $1`, `SELECT '$' || ?1`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := sqliteDialect(tt.pg); got != tt.lite {
				t.Errorf("sqliteDialect(%q) = %q, want %q", tt.pg, got, tt.lite)
			}
		})
	}
}
