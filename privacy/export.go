package privacy

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"time"

	"github.com/usherhq/usher/internal/audit"
)

// Exporter reads everything kept of a person (a store.Store does).
type Exporter interface {
	ExportPrincipal(ctx context.Context, principal string, row func(table string, columns map[string]any) error) error
}

// Export writes to w, as one JSON object, everything Usher keeps of the
// person principal: {"principal", "exportedAt", "tables": {table: [row,
// …]}}, each row its columns' values (store.ExportPrincipal), the audit
// log's records that name them included. The export is recorded in log
// first (principal_exported, with by in its details), so that no copy of
// a person's data is made unrecorded. It returns the rows written by
// table.
func Export(ctx context.Context, st Exporter, log *audit.Log, principal, by string, w io.Writer) (map[string]int, error) {
	details, err := json.Marshal(map[string]string{"by": by})
	if err != nil {
		return nil, err
	}
	if err := log.Append(ctx, audit.Entry{Kind: audit.KindPrincipalExported, Principal: principal, Details: details}); err != nil {
		return nil, err
	}
	bw := bufio.NewWriter(w)
	head, err := json.Marshal(map[string]string{"principal": principal, "exportedAt": time.Now().UTC().Format(time.RFC3339)})
	if err != nil {
		return nil, err
	}
	// The object's head without its closing brace, then the tables.
	bw.Write(head[:len(head)-1])
	bw.WriteString(`,"tables":{`)
	counts := map[string]int{}
	current := ""
	err = st.ExportPrincipal(ctx, principal, func(table string, columns map[string]any) error {
		row, err := json.Marshal(columns)
		if err != nil {
			return err
		}
		if table == current {
			bw.WriteString(",\n")
		} else {
			if current != "" {
				bw.WriteString("],\n")
			}
			name, _ := json.Marshal(table)
			bw.Write(name)
			bw.WriteString(":[\n")
			current = table
		}
		counts[table]++
		_, err = bw.Write(row)
		return err
	})
	if err != nil {
		return nil, err
	}
	if current != "" {
		bw.WriteString("]")
	}
	bw.WriteString("}}\n")
	return counts, bw.Flush()
}
