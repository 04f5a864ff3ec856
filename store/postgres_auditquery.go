package store

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

func (s *postgresStore) QueryAudit(ctx context.Context, q AuditQuery) ([]AuditRecord, error) {
	return collectAudit(ctx, s, q)
}

// EachAudit runs the core's statement (auditQuerySQL) on the pgx pool
// itself rather than through database/sql, and reads each row's text
// columns as they arrive: a reviewer's page of up to
// MaxAuditQueryLimit records is otherwise dominated by database/sql's
// conversion of 20 columns a row.
func (s *postgresStore) EachAudit(ctx context.Context, q AuditQuery, fn func(AuditRecord) error) error {
	if err := q.validate(); err != nil {
		return err
	}
	st, args := auditQuerySQL(q)
	rows, err := s.pool.Query(ctx, st.pg, args...)
	if err != nil {
		return s.fail(err)
	}
	defer rows.Close()
	if n := len(rows.FieldDescriptions()); n != auditColumnCount {
		return fmt.Errorf("store: audit query returned %d columns, want %d", n, auditColumnCount)
	}
	sc := auditScanner{left: q.Limit}
	sc.init(rows.FieldDescriptions())
	for rows.Next() {
		r, err := sc.scan(rows)
		if err != nil {
			return s.fail(err)
		}
		if err := fn(r); err != nil {
			return err
		}
	}
	return s.fail(rows.Err())
}

// The positions of auditColumns' columns that auditScanner reads itself
// from the row's raw values; the others are pgx's to decode.
// (auditColumnCount is their number.)
const (
	auditPolicyIDs = 10 // json
	auditDetails   = 16 // json
)

// auditTextColumns are the text columns, in AuditRecord's field order.
var auditTextColumns = [...]int{2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 14, 17, 18, 19}

// auditScanner reads rows of auditColumns, as scanAudit does: pgx decodes
// the sequence number, the time and the latency into its fields; the text
// columns, whose value in either wire format is their UTF-8 text, are
// copied into a string that the record's fields share, with the policy
// ids, which plain names then share too. The records of a page share
// blocks of memory for their text, their policy ids and their details,
// rather than allocating each row's: a block is only ever appended to, so
// what a record holds of it does not change.
type auditScanner struct {
	seq, latency int64
	at           time.Time
	dst          [auditColumnCount]any // nil: a column pgx skips
	binary       bool                  // the numbers come in PostgreSQL's binary form
	left         int                   // the rows the page may still hold, this one included
	text         *strings.Builder      // the block the next row's text goes into
	names        []string              // the block the next policy ids go into
	details      []byte                // the block the next details go into
}

// The largest blocks that a page's records share: their text columns (in
// bytes), their policy ids (in names) and their details (in bytes). A
// block is no larger than the rest of the page needs if its rows are like
// the one that starts it (blockSize); a row larger than a block has one
// of its own.
const (
	textBlock    = 16 << 10
	namesBlock   = 256
	detailsBlock = 16 << 10
)

// namesReserve is the room for policy ids a row starts with in the names
// block; a row with more goes on in a larger copy of it.
const namesReserve = 8

// blockSize is the size of a new block for a row that needs need of it:
// what the rows left would need if each needed as much, at most largest,
// and at least need.
func (sc *auditScanner) blockSize(largest, need int) int {
	return max(need, min(largest, need*max(sc.left, 1)))
}

func (sc *auditScanner) init(fields []pgconn.FieldDescription) {
	sc.dst[0], sc.dst[1], sc.dst[15] = &sc.seq, &sc.at, &sc.latency
	sc.binary = fields[0].Format == pgx.BinaryFormatCode && fields[1].Format == pgx.BinaryFormatCode &&
		fields[15].Format == pgx.BinaryFormatCode && fields[0].DataTypeOID == pgtype.Int8OID &&
		fields[1].DataTypeOID == pgtype.TimestamptzOID && fields[15].DataTypeOID == pgtype.Int8OID
}

// pgEpoch is the zero of PostgreSQL's binary timestamps, which count
// microseconds from it.
var pgEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// numbers reads the sequence number, the time and the latency of a row
// from their binary form, as pgx would (8 bytes each, big-endian; the
// time in microseconds since pgEpoch), and says no to anything else (a
// text form, an infinite time), which rows.Scan then reads.
func (sc *auditScanner) numbers(raw [][]byte) bool {
	if !sc.binary || len(raw[0]) != 8 || len(raw[1]) != 8 || len(raw[15]) != 8 {
		return false
	}
	us := int64(binary.BigEndian.Uint64(raw[1]))
	if us == math.MaxInt64 || us == math.MinInt64 {
		return false
	}
	sc.seq = int64(binary.BigEndian.Uint64(raw[0]))
	sc.at = pgEpoch.Add(time.Duration(us) * time.Microsecond)
	sc.latency = int64(binary.BigEndian.Uint64(raw[15]))
	return true
}

func (sc *auditScanner) scan(rows pgx.Rows) (AuditRecord, error) {
	raw := rows.RawValues()
	if !sc.numbers(raw) {
		if err := rows.Scan(sc.dst[:]...); err != nil {
			return AuditRecord{}, err
		}
	}
	r := AuditRecord{Seq: sc.seq, At: sc.at.UTC(), Latency: time.Duration(sc.latency) * time.Microsecond}

	ids := raw[auditPolicyIDs]
	n := len(ids)
	for _, i := range auditTextColumns {
		n += len(raw[i])
	}
	if sc.text == nil || sc.text.Cap()-sc.text.Len() < n {
		sc.text = new(strings.Builder)
		sc.text.Grow(sc.blockSize(textBlock, n))
	}
	start := sc.text.Len()
	for _, i := range auditTextColumns {
		sc.text.Write(raw[i])
	}
	sc.text.Write(ids)
	text := sc.text.String()[start:]
	fields := [...]*string{&r.Kind, &r.Principal, &r.ClientID, &r.TokenJTI, &r.Tool, &r.DefinitionHash,
		&r.ArgumentsHash, &r.Decision, &r.PolicyHash, &r.ApprovalID, &r.RunID, &r.Outcome,
		&r.PrevHash, &r.Hash, &r.EventID}
	off := 0
	for k, i := range auditTextColumns {
		*fields[k] = text[off : off+len(raw[i])]
		off += len(raw[i])
	}

	if string(ids) != "[]" {
		if cap(sc.names)-len(sc.names) < namesReserve {
			sc.names = make([]string, 0, sc.blockSize(namesBlock, namesReserve))
		}
		first := len(sc.names)
		if names, ok := plainNames(sc.names, text[off:]); ok {
			sc.names = names
			r.PolicyIDs = names[first:len(names):len(names)]
		} else {
			var err error
			if r.PolicyIDs, err = decodeNames("audit_log.policy_ids", ids); err != nil {
				return AuditRecord{}, err
			}
		}
	}
	// RawValues are the connection's buffer until the next row: a copy,
	// into the page's current block.
	if d := raw[auditDetails]; len(d) > 0 {
		if cap(sc.details)-len(sc.details) < len(d) {
			sc.details = make([]byte, 0, sc.blockSize(detailsBlock, len(d)))
		}
		start := len(sc.details)
		sc.details = append(sc.details, d...)
		r.Details = sc.details[start:len(sc.details):len(sc.details)]
	}
	sc.left--
	return r, nil
}

// plainNames reads a JSON array of names as encodeNames writes it, when
// every name is plain: no whitespace between them, and no escape, control
// character or invalid UTF-8 in them, so that each name's text is its
// bytes; it appends them to names. It says no to anything else, which
// decodeNames then reads.
func plainNames(names []string, b string) ([]string, bool) {
	if len(b) < 4 || b[0] != '[' || b[len(b)-1] != ']' {
		return nil, false
	}
	for i := 1; ; {
		if b[i] != '"' {
			return nil, false
		}
		j := i + 1
		for j < len(b) && b[j] != '"' {
			if b[j] < 0x20 || b[j] == '\\' {
				return nil, false
			}
			j++
		}
		if j >= len(b)-1 || !utf8.ValidString(b[i+1:j]) {
			return nil, false
		}
		names = append(names, b[i+1:j])
		switch i = j + 1; {
		case i == len(b)-1:
			return names, true
		case b[i] == ',':
			i++
		default:
			return nil, false
		}
	}
}
