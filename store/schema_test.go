package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/usherhq/usher/internal/testenv"
)

// The schema parity test: both engines' migrations must build the same
// logical schema, so that one implementation of every operation is right
// on both. It migrates a fresh database of each engine, reads back what
// the migrations built from each engine's catalog, and compares:
//
//   - the tables, but for the migration tool's (usher_migrations, and
//     goose's default goose_db_version);
//   - each table's columns: the same names, a SQLite declared type that
//     is the counterpart of the PostgreSQL type (pgToSQLiteType; any
//     other type is a difference), the same nullability, and whether a
//     default is declared (not the default's text: the engines spell
//     defaults differently, '{}'::jsonb against '{}');
//   - each table's indexes, primary keys and unique constraints included,
//     as a multiset of their definitions: primary or unique or neither,
//     the key list in order (a column's name, or an expression's text,
//     normalised; DESC marked), and the partial index's predicate,
//     normalised (schemaNormalSQL). Names are not compared: the engines
//     name the indexes behind constraints differently (runs_pkey against
//     sqlite_autoindex_runs_1), and no statement names an index; what a
//     statement relies on (ON CONFLICT's unique key, a plan's index) is
//     its definition. A unique constraint and a unique index on the same
//     keys count as the same: both give ON CONFLICT its arbiter;
//   - each table's foreign keys: columns, referenced table and columns,
//     and the ON DELETE and ON UPDATE actions;
//   - the migration files' names under migrations/postgres and
//     migrations/sqlite.
//
// CHECK constraints, column order, the text of defaults, collations and
// index methods are not compared: the engines express them differently,
// and the conformance suite (storetest) tests the behaviour they give.

// pgToSQLiteType is the SQLite declared type that stands for each
// PostgreSQL type (by udt_name) in the SQLite migrations: times are the
// store's fixed-width UTC text (sqliteTime), JSON is text checked with
// json_valid, booleans are integers. A PostgreSQL type missing here has no
// agreed SQLite form, and a column of it is a difference.
var pgToSQLiteType = map[string]string{
	"text":        "TEXT",
	"int8":        "INTEGER",
	"int4":        "INTEGER",
	"bool":        "INTEGER",
	"timestamptz": "TEXT",
	"json":        "TEXT",
	"jsonb":       "TEXT",
	"bytea":       "BLOB",
}

// schemaIgnoredTables are tables of the migration tool, not of the store.
var schemaIgnoredTables = map[string]bool{migrationTable: true, "goose_db_version": true}

// dbSchema is the logical schema an engine's catalog describes.
type dbSchema struct {
	tables map[string]*dbTable
}

// dbTable is one table of a dbSchema.
type dbTable struct {
	columns     map[string]dbColumn
	indexes     []dbIndex
	foreignKeys []string // each as fkDefinition writes it
}

// dbColumn is one column: its type as the engine names it (PostgreSQL's
// udt_name, SQLite's declared type in upper case).
type dbColumn struct {
	typ        string
	notNull    bool
	hasDefault bool
}

// dbIndex is one index, or the index behind a primary key or unique
// constraint.
type dbIndex struct {
	name    string // for messages only
	primary bool
	unique  bool
	keys    []string // normalised column names or expressions, " desc" appended for DESC
	where   string   // the normalised predicate of a partial index; "" for none
}

// definition is what parity compares of an index: everything but its name.
func (i dbIndex) definition() string {
	kind := "index"
	switch {
	case i.primary:
		kind = "primary key"
	case i.unique:
		kind = "unique index"
	}
	d := kind + " (" + strings.Join(i.keys, ", ") + ")"
	if i.where != "" {
		d += " where " + i.where
	}
	return d
}

// fkDefinition is what parity compares of a foreign key.
func fkDefinition(cols []string, refTable string, refCols []string, onDelete, onUpdate string) string {
	return fmt.Sprintf("(%s) references %s (%s) on delete %s on update %s",
		strings.Join(cols, ", "), refTable, strings.Join(refCols, ", "),
		strings.ToLower(onDelete), strings.ToLower(onUpdate))
}

func newDBSchema() dbSchema { return dbSchema{tables: map[string]*dbTable{}} }

func (s dbSchema) table(name string) *dbTable {
	t := s.tables[name]
	if t == nil {
		t = &dbTable{columns: map[string]dbColumn{}}
		s.tables[name] = t
	}
	return t
}

// diffSchemas returns every difference between the schema PostgreSQL's
// migrations built (pg) and the one SQLite's built (lite), one sentence
// each, in a stable order; none when they are the same logical schema.
func diffSchemas(pg, lite dbSchema) []string {
	var diffs []string
	for _, name := range schemaUnionKeys(pg.tables, lite.tables) {
		p, l := pg.tables[name], lite.tables[name]
		switch {
		case l == nil:
			diffs = append(diffs, fmt.Sprintf("table %s exists only on PostgreSQL", name))
		case p == nil:
			diffs = append(diffs, fmt.Sprintf("table %s exists only on SQLite", name))
		default:
			diffs = append(diffs, schemaDiffColumns(name, p.columns, l.columns)...)
			diffs = append(diffs, schemaDiffDefinitions(name, "index", schemaIndexDefinitions(p.indexes), schemaIndexDefinitions(l.indexes))...)
			diffs = append(diffs, schemaDiffDefinitions(name, "foreign key", p.foreignKeys, l.foreignKeys)...)
		}
	}
	return diffs
}

// schemaDiffColumns compares the columns of table.
func schemaDiffColumns(table string, pg, lite map[string]dbColumn) []string {
	var diffs []string
	for _, name := range schemaUnionKeys(pg, lite) {
		p, inPG := pg[name]
		l, inLite := lite[name]
		switch {
		case !inLite:
			diffs = append(diffs, fmt.Sprintf("table %s: column %s exists only on PostgreSQL", table, name))
			continue
		case !inPG:
			diffs = append(diffs, fmt.Sprintf("table %s: column %s exists only on SQLite", table, name))
			continue
		}
		if want, ok := pgToSQLiteType[p.typ]; !ok {
			diffs = append(diffs, fmt.Sprintf("table %s, column %s: PostgreSQL type %s has no SQLite counterpart in the type table (SQLite type %s)", table, name, p.typ, l.typ))
		} else if want != l.typ {
			diffs = append(diffs, fmt.Sprintf("table %s, column %s: PostgreSQL type %s wants SQLite type %s, SQLite has %s", table, name, p.typ, want, l.typ))
		}
		if p.notNull != l.notNull {
			diffs = append(diffs, fmt.Sprintf("table %s, column %s: NOT NULL is %v on PostgreSQL, %v on SQLite", table, name, p.notNull, l.notNull))
		}
		if p.hasDefault != l.hasDefault {
			diffs = append(diffs, fmt.Sprintf("table %s, column %s: a default is declared %v on PostgreSQL, %v on SQLite", table, name, p.hasDefault, l.hasDefault))
		}
	}
	return diffs
}

// schemaIndexDefinitions returns each index's definition, with its name for the
// messages after a tab.
func schemaIndexDefinitions(indexes []dbIndex) []string {
	out := make([]string, len(indexes))
	for i, x := range indexes {
		out[i] = x.definition() + "\t" + x.name
	}
	return out
}

// schemaDiffDefinitions compares two multisets of definitions of table's
// objects; what follows a tab in a definition names it for the message and
// is not compared. An object pairs first with one of the same definition
// and name on the other engine, then with one of the same definition, so
// that of duplicates the one reported is the one without a namesake.
func schemaDiffDefinitions(table, what string, pg, lite []string) []string {
	def := func(s string) string { d, _, _ := strings.Cut(s, "\t"); return d }
	pg, lite = slices.Sorted(slices.Values(pg)), slices.Sorted(slices.Values(lite))
	pair := func(same func(a, b string) bool) {
		for i := 0; i < len(pg); i++ {
			if j := slices.IndexFunc(lite, func(l string) bool { return same(pg[i], l) }); j >= 0 {
				pg, lite = slices.Delete(pg, i, i+1), slices.Delete(lite, j, j+1)
				i--
			}
		}
	}
	pair(func(a, b string) bool { return a == b })
	pair(func(a, b string) bool { return def(a) == def(b) })
	var diffs []string
	report := func(defs []string, engine string) {
		for _, d := range defs {
			k, name, _ := strings.Cut(d, "\t")
			if name != "" {
				name = " (" + name + ")"
			}
			diffs = append(diffs, fmt.Sprintf("table %s: %s %s%s exists only on %s", table, what, k, name, engine))
		}
	}
	report(pg, "PostgreSQL")
	report(lite, "SQLite")
	return diffs
}

// schemaUnionKeys returns the keys of a and b, sorted.
func schemaUnionKeys[V any](a, b map[string]V) []string {
	var keys []string
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// schemaNormalSQL normalises an expression or predicate so that PostgreSQL's
// rendering of it (pg_get_expr, pg_get_indexdef) and the text the SQLite
// migration wrote compare equal: outside quoted literals it lower-cases,
// drops casts (::text), spells ~~ as LIKE and "= ANY (ARRAY[...])" as
// "IN (...)", and drops whitespace and parentheses, which PostgreSQL adds
// around every expression. Literals are kept as written. Dropping the
// parentheses means that two predicates differing only in how they group
// compare equal: a price of comparing text, not parse trees.
func schemaNormalSQL(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				b.WriteString(s[i:])
				i = len(s)
				continue
			}
			b.WriteString(s[i : i+j+2])
			i += j + 1
		case c == ':' && i+1 < len(s) && s[i+1] == ':':
			i = schemaCastEnd(s, i+2) - 1
		case c == '"':
			// A quoted identifier: PostgreSQL quotes the names it must.
		case 'A' <= c && c <= 'Z':
			b.WriteByte(c + 'a' - 'A')
		default:
			b.WriteByte(c)
		}
	}
	out := b.String()
	out = strings.ReplaceAll(out, "~~", " like ")
	out = schemaAnyArray.ReplaceAllString(out, " in (${1})")
	return schemaOutsideQuotes(out, func(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '(' || c == ')' })
}

// schemaCastEnd returns where the type name of a cast that starts at i in s
// ends: an identifier, array brackets, and the further words of
// PostgreSQL's types of several words (timestamp with time zone).
func schemaCastEnd(s string, i int) int {
	for i < len(s) && isIdentByte(s[i]) {
		i++
	}
	for strings.HasPrefix(s[i:], "[]") {
		i += 2
	}
	for _, more := range []string{" with time zone", " without time zone", " varying", " precision"} {
		if len(s)-i >= len(more) && strings.EqualFold(s[i:i+len(more)], more) {
			return schemaCastEnd(s, i+len(more))
		}
	}
	return i
}

// schemaAnyArray matches PostgreSQL's rendering of "x IN (a, b)", lower-cased.
var schemaAnyArray = regexp.MustCompile(`=\s*any\s*\(\s*array\[([^\]]*)\]\s*\)`)

// schemaOutsideQuotes returns s without the bytes drop reports, outside quoted
// literals.
func schemaOutsideQuotes(s string, drop func(byte) bool) string {
	var b strings.Builder
	quoted := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\'' {
			quoted = !quoted
		}
		if quoted || c == '\'' || !drop(c) {
			b.WriteByte(c)
		}
	}
	return b.String()
}

// A PostgreSQL catalog, current_schema() only.
const (
	pgSchemaTables = `SELECT table_name FROM information_schema.tables
WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'`

	pgSchemaColumns = `SELECT c.table_name, c.column_name, c.udt_name, c.is_nullable = 'NO', c.column_default IS NOT NULL
FROM information_schema.columns c
JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name AND t.table_type = 'BASE TABLE'
WHERE c.table_schema = current_schema()`

	// pgSchemaIndexes returns each index's keys joined by a unit
	// separator: the column's name, or the expression's text (attnum 0),
	// then whether it sorts descending (indoption bit 0).
	pgSchemaIndexes = `SELECT t.relname, i.relname, x.indisprimary, x.indisunique,
  coalesce(pg_get_expr(x.indpred, x.indrelid), ''),
  (SELECT string_agg(pg_get_indexdef(x.indexrelid, k, false) ||
      CASE WHEN x.indoption[k - 1] & 1 = 1 THEN ' desc' ELSE '' END, chr(31) ORDER BY k)
   FROM generate_series(1, x.indnkeyatts) AS k)
FROM pg_index x
JOIN pg_class i ON i.oid = x.indexrelid
JOIN pg_class t ON t.oid = x.indrelid
JOIN pg_namespace n ON n.oid = t.relnamespace
WHERE n.nspname = current_schema()`

	pgSchemaForeignKeys = `SELECT t.relname, c.conname, r.relname,
  CASE c.confdeltype WHEN 'a' THEN 'no action' WHEN 'r' THEN 'restrict' WHEN 'c' THEN 'cascade' WHEN 'n' THEN 'set null' ELSE 'set default' END,
  CASE c.confupdtype WHEN 'a' THEN 'no action' WHEN 'r' THEN 'restrict' WHEN 'c' THEN 'cascade' WHEN 'n' THEN 'set null' ELSE 'set default' END,
  (SELECT string_agg(a.attname, chr(31) ORDER BY k.n) FROM unnest(c.conkey) WITH ORDINALITY AS k(att, n)
     JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.att),
  (SELECT string_agg(a.attname, chr(31) ORDER BY k.n) FROM unnest(c.confkey) WITH ORDINALITY AS k(att, n)
     JOIN pg_attribute a ON a.attrelid = c.confrelid AND a.attnum = k.att)
FROM pg_constraint c
JOIN pg_class t ON t.oid = c.conrelid
JOIN pg_class r ON r.oid = c.confrelid
JOIN pg_namespace n ON n.oid = t.relnamespace
WHERE c.contype = 'f' AND n.nspname = current_schema()`
)

// postgresSchema reads the schema of current_schema() through q.
func postgresSchema(ctx context.Context, q querier) (dbSchema, error) {
	s := newDBSchema()
	err := schemaEachRow(ctx, q, pgSchemaTables, nil, func(r rowScanner) error {
		var name string
		if err := r.Scan(&name); err != nil {
			return err
		}
		if !schemaIgnoredTables[name] {
			s.table(name)
		}
		return nil
	})
	if err != nil {
		return s, err
	}
	err = schemaEachRow(ctx, q, pgSchemaColumns, nil, func(r rowScanner) error {
		var table, name string
		var c dbColumn
		if err := r.Scan(&table, &name, &c.typ, &c.notNull, &c.hasDefault); err != nil {
			return err
		}
		if t := s.tables[table]; t != nil {
			t.columns[name] = c
		}
		return nil
	})
	if err != nil {
		return s, err
	}
	err = schemaEachRow(ctx, q, pgSchemaIndexes, nil, func(r rowScanner) error {
		var table, keys string
		var x dbIndex
		if err := r.Scan(&table, &x.name, &x.primary, &x.unique, &x.where, &keys); err != nil {
			return err
		}
		for _, k := range strings.Split(keys, "\x1f") {
			key, desc := strings.CutSuffix(k, " desc")
			key = schemaNormalSQL(key)
			if desc {
				key += " desc"
			}
			x.keys = append(x.keys, key)
		}
		x.where = schemaNormalSQL(x.where)
		if t := s.tables[table]; t != nil {
			t.indexes = append(t.indexes, x)
		}
		return nil
	})
	if err != nil {
		return s, err
	}
	err = schemaEachRow(ctx, q, pgSchemaForeignKeys, nil, func(r rowScanner) error {
		var table, name, ref, onDelete, onUpdate, cols, refCols string
		if err := r.Scan(&table, &name, &ref, &onDelete, &onUpdate, &cols, &refCols); err != nil {
			return err
		}
		if t := s.tables[table]; t != nil {
			t.foreignKeys = append(t.foreignKeys, fkDefinition(strings.Split(cols, "\x1f"), ref, strings.Split(refCols, "\x1f"), onDelete, onUpdate)+"\t"+name)
		}
		return nil
	})
	return s, err
}

// sqliteSchema reads the schema of a SQLite database through q.
func sqliteSchema(ctx context.Context, q querier) (dbSchema, error) {
	s := newDBSchema()
	var tables []string
	err := schemaEachRow(ctx, q, `SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\_%' ESCAPE '\'`, nil, func(r rowScanner) error {
		var name string
		if err := r.Scan(&name); err != nil {
			return err
		}
		if !schemaIgnoredTables[name] {
			tables = append(tables, name)
		}
		return nil
	})
	if err != nil {
		return s, err
	}
	for _, name := range tables {
		if err := sqliteTable(ctx, q, name, s.table(name)); err != nil {
			return s, fmt.Errorf("table %s: %w", name, err)
		}
	}
	return s, nil
}

// sqliteTable reads one table's columns, primary key, indexes and foreign
// keys into t.
func sqliteTable(ctx context.Context, q querier, table string, t *dbTable) error {
	type pkCol struct {
		name string
		pos  int
		typ  string
	}
	var pk []pkCol
	err := schemaEachRow(ctx, q, `SELECT name, upper(type), "notnull", dflt_value IS NOT NULL, pk FROM pragma_table_info(?1)`, []any{table}, func(r rowScanner) error {
		var name string
		var c dbColumn
		var pos int
		if err := r.Scan(&name, &c.typ, &c.notNull, &c.hasDefault, &pos); err != nil {
			return err
		}
		t.columns[name] = c
		if pos > 0 {
			pk = append(pk, pkCol{name, pos, c.typ})
		}
		return nil
	})
	if err != nil {
		return err
	}
	if len(pk) > 0 {
		slices.SortFunc(pk, func(a, b pkCol) int { return a.pos - b.pos })
		x := dbIndex{name: "primary key", primary: true, unique: true}
		for _, c := range pk {
			x.keys = append(x.keys, c.name)
		}
		// A lone INTEGER PRIMARY KEY is the rowid, which is never NULL
		// (a NULL inserted is replaced by a new rowid), whatever the
		// pragma's notnull says; PostgreSQL makes every primary key
		// column NOT NULL.
		if len(pk) == 1 && pk[0].typ == "INTEGER" {
			c := t.columns[pk[0].name]
			c.notNull = true
			t.columns[pk[0].name] = c
		}
		t.indexes = append(t.indexes, x)
	}

	type listed struct {
		name            string
		unique, partial bool
		origin          string
		sql             string
	}
	var indexes []listed
	err = schemaEachRow(ctx, q, `SELECT l.name, l."unique", l.partial, l.origin, coalesce(m.sql, '')
FROM pragma_index_list(?1) l LEFT JOIN sqlite_master m ON m.type = 'index' AND m.name = l.name`, []any{table}, func(r rowScanner) error {
		var x listed
		if err := r.Scan(&x.name, &x.unique, &x.partial, &x.origin, &x.sql); err != nil {
			return err
		}
		indexes = append(indexes, x)
		return nil
	})
	if err != nil {
		return err
	}
	for _, l := range indexes {
		if l.origin == "pk" {
			continue // read from pragma_table_info above, rowid or not
		}
		x := dbIndex{name: l.name, unique: l.unique}
		var exprs []string
		if l.origin == "c" {
			exprs, x.where, err = splitCreateIndex(l.sql)
			if err != nil {
				return fmt.Errorf("index %s: %w", l.name, err)
			}
			x.where = schemaNormalSQL(x.where)
		}
		if l.partial != (x.where != "") {
			return fmt.Errorf("index %s: the pragma says partial %v, its SQL %q", l.name, l.partial, l.sql)
		}
		err := schemaEachRow(ctx, q, `SELECT seqno, cid, coalesce(name, ''), "desc" FROM pragma_index_xinfo(?1) WHERE key ORDER BY seqno`, []any{l.name}, func(r rowScanner) error {
			var seq, cid int
			var name string
			var desc bool
			if err := r.Scan(&seq, &cid, &name, &desc); err != nil {
				return err
			}
			key := name
			if cid == -2 { // an expression: only the SQL has its text
				if seq >= len(exprs) {
					return fmt.Errorf("index %s: key %d is an expression its SQL does not show", l.name, seq)
				}
				key = exprs[seq]
			}
			key = schemaNormalSQL(key)
			if desc {
				key += " desc"
			}
			x.keys = append(x.keys, key)
			return nil
		})
		if err != nil {
			return err
		}
		t.indexes = append(t.indexes, x)
	}

	type fkCol struct {
		id, seq       int
		ref, from, to string
		onUpdate      string
		onDelete      string
	}
	var fks []fkCol
	err = schemaEachRow(ctx, q, `SELECT id, seq, "table", "from", coalesce("to", ''), on_update, on_delete FROM pragma_foreign_key_list(?1) ORDER BY id, seq`, []any{table}, func(r rowScanner) error {
		var c fkCol
		if err := r.Scan(&c.id, &c.seq, &c.ref, &c.from, &c.to, &c.onUpdate, &c.onDelete); err != nil {
			return err
		}
		fks = append(fks, c)
		return nil
	})
	if err != nil {
		return err
	}
	for i := 0; i < len(fks); {
		j := i
		var from, to []string
		for ; j < len(fks) && fks[j].id == fks[i].id; j++ {
			from, to = append(from, fks[j].from), append(to, fks[j].to)
		}
		t.foreignKeys = append(t.foreignKeys, fkDefinition(from, fks[i].ref, to, fks[i].onDelete, fks[i].onUpdate))
		i = j
	}
	return nil
}

// splitCreateIndex returns the key list (each key's text, a trailing ASC
// or DESC cut) and the WHERE predicate of a CREATE INDEX statement.
func splitCreateIndex(q string) (keys []string, where string, err error) {
	open := strings.IndexByte(q, '(')
	if open < 0 {
		return nil, "", fmt.Errorf("no key list in %q", q)
	}
	depth, start := 0, open+1
	for i := open; i < len(q); i++ {
		switch q[i] {
		case '\'':
			j := strings.IndexByte(q[i+1:], '\'')
			if j < 0 {
				return nil, "", fmt.Errorf("unterminated literal in %q", q)
			}
			i += j + 1
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				keys = append(keys, schemaCutOrder(q[start:i]))
				rest := strings.TrimSpace(q[i+1:])
				if len(rest) >= 5 && strings.EqualFold(rest[:5], "where") {
					where = strings.TrimSpace(rest[5:])
				} else if rest != "" {
					return nil, "", fmt.Errorf("unexpected %q after the key list", rest)
				}
				return keys, where, nil
			}
		case ',':
			if depth == 1 {
				keys = append(keys, schemaCutOrder(q[start:i]))
				start = i + 1
			}
		}
	}
	return nil, "", fmt.Errorf("unbalanced key list in %q", q)
}

// schemaCutOrder trims a key and cuts its ASC or DESC, which the pragma reports.
func schemaCutOrder(key string) string {
	key = strings.TrimSpace(key)
	for _, suffix := range []string{" ASC", " DESC", " asc", " desc"} {
		if k, ok := strings.CutSuffix(key, suffix); ok {
			return strings.TrimSpace(k)
		}
	}
	return key
}

// schemaEachRow runs query on q and calls fn for each row.
func schemaEachRow(ctx context.Context, q querier, query string, args []any, fn func(rowScanner) error) error {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := fn(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// ownSchemaPostgresURL does what storetest.PostgresURL does, which this
// package's internal tests cannot import (storetest imports store): it
// creates a schema of the test's own on the server TEST_DATABASE_URL
// names, drops it when the test ends, and returns a URL whose connections
// use it. Without TEST_DATABASE_URL the test is skipped, or fails under
// CI (testenv.DatabaseURL).
func ownSchemaPostgresURL(t testing.TB) string {
	t.Helper()
	base := testenv.DatabaseURL(t)
	u, _ := url.Parse(base)
	var b [8]byte
	rand.Read(b[:])
	schema := "usher_test_" + hex.EncodeToString(b[:])
	ident := pgx.Identifier{schema}.Sanitize()
	run := func(q string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, q)
		return err
	}
	if err := run("CREATE SCHEMA " + ident); err != nil {
		t.Fatalf("create test schema: %v", err)
	}
	t.Cleanup(func() {
		if err := run("DROP SCHEMA " + ident + " CASCADE"); err != nil {
			t.Errorf("drop test schema %s: %v", schema, err)
		}
	})
	v := u.Query()
	v.Set("search_path", schema)
	u.RawQuery = v.Encode()
	return u.String()
}

// parityStore opens dsn with store.Open, migrates it and closes it
// when the test ends.
func parityStore(t testing.TB, dsn string) Store {
	t.Helper()
	s, err := Open(t.Context(), dsn, nil)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
	})
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return s
}

// parityCore returns the engine-neutral half of a store Open returned.
func parityCore(t testing.TB, s Store) *core {
	t.Helper()
	switch s := s.(type) {
	case *postgresStore:
		return &s.core
	case *sqliteStore:
		return &s.core
	}
	t.Fatalf("a store of type %T has no core", s)
	return nil
}

// TestSchemaMigrationFiles checks that each engine has a migration of
// every name the other has: a migration added for one engine only fails
// here even before the schemas are compared.
func TestSchemaMigrationFiles(t *testing.T) {
	names := func(fsys fs.FS, dir string) []string {
		entries, err := fs.ReadDir(fsys, dir)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range entries {
			out = append(out, e.Name())
		}
		return out
	}
	pg := names(postgresMigrations, "migrations/postgres")
	lite := names(sqliteMigrations, "migrations/sqlite")
	if len(pg) == 0 {
		t.Fatal("no PostgreSQL migrations embedded")
	}
	if !slices.Equal(pg, lite) {
		t.Errorf("the migrations differ:\nPostgreSQL: %v\nSQLite:     %v", pg, lite)
	}
	// The embedded files are the directory's: a file added to one
	// directory without a matching embed pattern is caught too.
	for _, dir := range []string{"migrations/postgres", "migrations/sqlite"} {
		got := names(os.DirFS("."), dir)
		if !slices.Equal(got, pg) {
			t.Errorf("%s holds %v, want %v", dir, got, pg)
		}
	}
}

// engineOwn are the differences the engines are meant to have: the index
// of message search (migration 00014), which each engine builds its own
// way — a GIN index of the events' words on PostgreSQL, an FTS5 table (and
// the tables FTS5 keeps behind it) filled by a trigger on SQLite. The
// storetest suite tests that both search alike.
var engineOwn = map[string]bool{
	"table run_events: index index (to_tsvector'simple',payload->>'content') where typein'message.user','message.assistant' (run_events_search) exists only on PostgreSQL": true,
	"table run_search exists only on SQLite":         true,
	"table run_search_config exists only on SQLite":  true,
	"table run_search_content exists only on SQLite": true,
	"table run_search_data exists only on SQLite":    true,
	"table run_search_docsize exists only on SQLite": true,
	"table run_search_idx exists only on SQLite":     true,
}

// TestSchemaParity migrates a fresh database of each engine and checks
// that diffSchemas finds no difference, then that it finds each kind of
// difference a migration applied to one engine only would make.
func TestSchemaParity(t *testing.T) {
	ctx := t.Context()
	pgCore := parityCore(t, parityStore(t, ownSchemaPostgresURL(t)))
	liteCore := parityCore(t, parityStore(t, filepath.Join(t.TempDir(), "usher.db")))
	pg, err := postgresSchema(ctx, pgCore.write)
	if err != nil {
		t.Fatalf("read PostgreSQL's schema: %v", err)
	}
	lite, err := sqliteSchema(ctx, liteCore.write)
	if err != nil {
		t.Fatalf("read SQLite's schema: %v", err)
	}
	checkSchemaRead(t, "PostgreSQL", pg)
	checkSchemaRead(t, "SQLite", lite)
	baseline := diffSchemas(pg, lite)
	seen := map[string]bool{}
	for _, d := range baseline {
		if engineOwn[d] {
			seen[d] = true
			continue
		}
		t.Error(d)
	}
	for d := range engineOwn {
		if !seen[d] {
			t.Errorf("the engines' own structure is gone: %s", d)
		}
	}

	// Each change is made in a transaction on one engine's migrated
	// database, read back there and rolled back: DDL is transactional on
	// both engines.
	changes := []struct {
		name   string
		engine string // "PostgreSQL" or "SQLite"
		ddl    []string
		want   string // a part of the difference it must report
		// replaces: the change redefines an index, so that each engine's
		// definition is reported as missing on the other.
		replaces bool
	}{
		{"table", "PostgreSQL", []string{`CREATE TABLE parity_extra (id text PRIMARY KEY)`}, "table parity_extra exists only on PostgreSQL", false},
		{"table", "SQLite", []string{`CREATE TABLE parity_extra (id TEXT NOT NULL PRIMARY KEY) STRICT`}, "table parity_extra exists only on SQLite", false},
		{"column", "PostgreSQL", []string{`ALTER TABLE notes ADD COLUMN extra text`}, "table notes: column extra exists only on PostgreSQL", false},
		{"column", "SQLite", []string{`ALTER TABLE notes ADD COLUMN extra TEXT`}, "table notes: column extra exists only on SQLite", false},
		{"index", "PostgreSQL", []string{`CREATE INDEX notes_body_idx ON notes (body)`}, "table notes: index index (body) (notes_body_idx) exists only on PostgreSQL", false},
		{"index", "SQLite", []string{`CREATE INDEX notes_body_idx ON notes (body)`}, "table notes: index index (body) (notes_body_idx) exists only on SQLite", false},
		{"unique index", "PostgreSQL", []string{`CREATE UNIQUE INDEX notes_body_key ON notes (owner, body)`}, "unique index (owner, body)", false},
		{"unique index", "SQLite", []string{`CREATE UNIQUE INDEX notes_body_key ON notes (owner, body)`}, "unique index (owner, body)", false},
		{"descending", "SQLite", []string{`DROP INDEX runs_status_idx`, `CREATE INDEX runs_status_idx ON runs (status DESC)`}, "index (status desc) (runs_status_idx) exists only on SQLite", true},
		{"predicate", "PostgreSQL", []string{`DROP INDEX runs_queued_idx`, `CREATE INDEX runs_queued_idx ON runs (queued_at)`}, "index (queued_at) (runs_queued_idx) exists only on PostgreSQL", true},
		{"predicate", "SQLite", []string{`DROP INDEX approvals_open_tool_idx`, `CREATE INDEX approvals_open_tool_idx ON approvals (tool) WHERE status IN ('pending', 'expired')`},
			"index (tool) where statusin'pending','expired' (approvals_open_tool_idx) exists only on SQLite", true},
		{"expression", "PostgreSQL", []string{`DROP INDEX approvals_pending_binding_key`,
			`CREATE UNIQUE INDEX approvals_pending_binding_key ON approvals (principal, tool, server, definition_hash, arguments_hash, policy_hash, coalesce(run_id, '-'), client_id) WHERE status = 'pending'`},
			"coalescerun_id,'-', client_id) where status='pending' (approvals_pending_binding_key) exists only on PostgreSQL", true},
		{"not null", "PostgreSQL", []string{`ALTER TABLE notes ALTER COLUMN body DROP NOT NULL`}, "table notes, column body: NOT NULL is false on PostgreSQL, true on SQLite", false},
		{"default", "PostgreSQL", []string{`ALTER TABLE notes ALTER COLUMN body DROP DEFAULT`}, "table notes, column body: a default is declared false on PostgreSQL, true on SQLite", false},
		{"type without counterpart", "PostgreSQL", []string{`ALTER TABLE notes ALTER COLUMN body TYPE varchar(100)`},
			"table notes, column body: PostgreSQL type varchar has no SQLite counterpart in the type table (SQLite type TEXT)", false},
		{"type", "PostgreSQL", []string{`ALTER TABLE run_message_keys ALTER COLUMN seq TYPE text`},
			"table run_message_keys, column seq: PostgreSQL type text wants SQLite type TEXT, SQLite has INTEGER", false},
		{"time without zone", "PostgreSQL", []string{`ALTER TABLE run_message_keys ALTER COLUMN created_at TYPE timestamp`},
			"table run_message_keys, column created_at: PostgreSQL type timestamp has no SQLite counterpart", false},
		{"foreign key", "PostgreSQL", []string{`ALTER TABLE tool_executions ADD FOREIGN KEY (run_id) REFERENCES runs (id)`},
			"table tool_executions: foreign key (run_id) references runs (id) on delete no action on update no action (tool_executions_run_id_fkey) exists only on PostgreSQL", false},
	}
	for _, ch := range changes {
		t.Run("detects/"+ch.engine+"/"+ch.name, func(t *testing.T) {
			c, read := pgCore, postgresSchema
			if ch.engine == "SQLite" {
				c, read = liteCore, sqliteSchema
			}
			tx, err := c.write.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			for _, q := range ch.ddl {
				if _, err := tx.ExecContext(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			changed, err := read(ctx, tx)
			if err != nil {
				t.Fatal(err)
			}
			var diffs []string
			if ch.engine == "SQLite" {
				diffs = diffSchemas(pg, changed)
			} else {
				diffs = diffSchemas(changed, lite)
			}
			// Only what the change adds counts: a difference of the
			// migrations themselves is reported above.
			for _, d := range baseline {
				if i := slices.Index(diffs, d); i >= 0 {
					diffs = slices.Delete(diffs, i, i+1)
				}
			}
			n := 1
			if ch.replaces {
				n = 2
			}
			found := slices.ContainsFunc(diffs, func(d string) bool { return strings.Contains(d, ch.want) })
			if len(diffs) != n || !found {
				t.Errorf("after %s on %s the differences are\n%s\nwant %d, one containing %q", strings.Join(ch.ddl, "; "), ch.engine, strings.Join(diffs, "\n"), n, ch.want)
			}
		})
	}
}

// checkSchemaRead guards against a parity that holds because nothing was
// read: the tables and kinds of index the migrations are known to create
// must have been found.
func checkSchemaRead(t *testing.T, engine string, s dbSchema) {
	t.Helper()
	for _, name := range []string{"runs", "run_events", "approvals", "audit_log", "signing_keys", "tool_executions", "notes", "run_message_keys", "browser_sessions", "context_snapshots"} {
		if s.tables[name] == nil || len(s.tables[name].columns) == 0 {
			t.Errorf("%s: table %s not read", engine, name)
		}
	}
	if a := s.tables["approvals"]; a != nil {
		want := "unique index (principal, tool, server, definition_hash, arguments_hash, policy_hash, coalescerun_id,'', client_id) where status='pending'"
		if !slices.ContainsFunc(a.indexes, func(x dbIndex) bool { return x.definition() == want }) {
			t.Errorf("%s: approvals' indexes %v lack %s", engine, a.indexes, want)
		}
	}
	if r := s.tables["runs"]; r != nil {
		for _, want := range []string{"primary key (id)", "unique index (owner, idempotency_key)", "index (owner, created_at desc, id desc)"} {
			if !slices.ContainsFunc(r.indexes, func(x dbIndex) bool { return x.definition() == want }) {
				t.Errorf("%s: runs' indexes %v lack %s", engine, r.indexes, want)
			}
		}
		if len(r.foreignKeys) != 1 || !strings.HasPrefix(r.foreignKeys[0], "(parent_run_id) references runs (id) on delete set null") {
			t.Errorf("%s: runs has foreign keys %v, want the one of parent_run_id", engine, r.foreignKeys)
		}
	}
	if e := s.tables["run_events"]; e != nil && !slices.ContainsFunc(e.foreignKeys, func(fk string) bool {
		return strings.HasPrefix(fk, "(run_id) references runs (id) on delete cascade")
	}) {
		t.Errorf("%s: run_events' foreign keys %v lack the one to runs", engine, e.foreignKeys)
	}
	if a := s.tables["audit_log"]; a != nil && !a.columns["seq"].notNull {
		t.Errorf("%s: audit_log.seq reads as nullable", engine)
	}
}

// TestSchemaDiff checks diffSchemas' own reports on schemas built by hand.
func TestSchemaDiff(t *testing.T) {
	build := func(typ string, notNull bool, indexes ...dbIndex) dbSchema {
		s := newDBSchema()
		tb := s.table("t")
		tb.columns["c"] = dbColumn{typ: typ, notNull: notNull}
		tb.indexes = indexes
		return s
	}
	ix := func(name string, unique bool, where string, keys ...string) dbIndex {
		return dbIndex{name: name, unique: unique, where: where, keys: keys}
	}
	tests := []struct {
		name     string
		pg, lite dbSchema
		want     []string
	}{
		{"same", build("timestamptz", true, ix("a", false, "", "c")), build("TEXT", true, ix("b", false, "", "c")), nil},
		{"boolean", build("bool", true), build("INTEGER", true), nil},
		{"type", build("int8", true), build("TEXT", true), []string{"table t, column c: PostgreSQL type int8 wants SQLite type INTEGER, SQLite has TEXT"}},
		{"unknown type", build("numeric", true), build("REAL", true), []string{"table t, column c: PostgreSQL type numeric has no SQLite counterpart in the type table (SQLite type REAL)"}},
		{"nullability", build("text", false), build("TEXT", true), []string{"table t, column c: NOT NULL is false on PostgreSQL, true on SQLite"}},
		{"unique", build("text", true, ix("a", true, "", "c")), build("TEXT", true, ix("a", false, "", "c")),
			[]string{"table t: index unique index (c) (a) exists only on PostgreSQL", "table t: index index (c) (a) exists only on SQLite"}},
		{"duplicate", build("text", true, ix("a", false, "", "c"), ix("b", false, "", "c")), build("TEXT", true, ix("a", false, "", "c")),
			[]string{"table t: index index (c) (b) exists only on PostgreSQL"}},
		{"predicate", build("text", true, ix("a", false, "c=1", "c")), build("TEXT", true, ix("a", false, "", "c")),
			[]string{"table t: index index (c) where c=1 (a) exists only on PostgreSQL", "table t: index index (c) (a) exists only on SQLite"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := diffSchemas(tt.pg, tt.lite); !slices.Equal(got, tt.want) {
				t.Errorf("diffSchemas =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

// TestSchemaNormalSQL checks that PostgreSQL's rendering of the
// migrations' predicates and expressions normalises to what SQLite's text
// does, and that literals keep their case.
func TestSchemaNormalSQL(t *testing.T) {
	same := []struct{ pg, lite string }{
		{`(status = 'pending'::text)`, `status = 'pending'`},
		{`(status = ANY (ARRAY['pending'::text, 'approved'::text]))`, `status IN ('pending', 'approved')`},
		{`(type ~~ 'message.%'::text)`, `type LIKE 'message.%'`},
		{`(queued_at IS NOT NULL)`, `queued_at IS NOT NULL`},
		{`COALESCE(run_id, ''::text)`, `coalesce(run_id, '')`},
		{`(at > '2020-01-01 00:00:00+00'::timestamp with time zone)`, `at > '2020-01-01 00:00:00+00'`},
		{`"order"`, `order`},
	}
	for _, tt := range same {
		if p, l := schemaNormalSQL(tt.pg), schemaNormalSQL(tt.lite); p != l {
			t.Errorf("schemaNormalSQL(%q) = %q, schemaNormalSQL(%q) = %q; want them equal", tt.pg, p, tt.lite, l)
		}
	}
	differ := []struct{ a, b string }{
		{`status = 'Pending'`, `status = 'pending'`},
		{`status = 'a b'`, `status = 'ab'`},
		{`status <> 'pending'`, `status = 'pending'`},
		{`status IN ('pending')`, `status IN ('pending', 'approved')`},
	}
	for _, tt := range differ {
		if a, b := schemaNormalSQL(tt.a), schemaNormalSQL(tt.b); a == b {
			t.Errorf("schemaNormalSQL(%q) = schemaNormalSQL(%q) = %q; want them to differ", tt.a, tt.b, a)
		}
	}
}
