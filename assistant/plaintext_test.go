package assistant

import "testing"

func TestPlainText(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"", ""},
		{"plain words", "plain words"},
		{"# Trip to **Lisbon**\n\n- flights\n- [x] hotel\n1. museum", "Trip to Lisbon flights hotel museum"},
		{"See [the plan](https://example.com/p) and ![map](m.png).", "See the plan and map."},
		{"Run `make test` then _relax_ ~~now~~", "Run make test then relax now"},
		{"```go\nfmt.Println(1)\n```", "fmt.Println(1)"},
		{"> quoted\n>> twice", "quoted twice"},
		{"snake_case_name and 2*3*4", "snake_case_name and 2*3*4"},
		{"  lots \t of \n\n space  ", "lots of space"},
	}
	for _, tt := range tests {
		if got := plainText(tt.in); got != tt.want {
			t.Errorf("plainText(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestTitleFrom(t *testing.T) {
	t.Parallel()
	long := ""
	for range 100 {
		long += "é"
	}
	tests := []struct{ in, want string }{
		{"  hello\nworld", "hello"},
		{"a   b\tc", "a b c"},
		{long, string([]rune(long)[:79]) + "…"},
		{"call notes_list ", "call notes_list"},
		{"Hello! What can you do?", "Hello! What can you do?"},
		{"\n\n## Plan the **offsite**\nmore", "Plan the offsite"},
		{"```\ncode first\n```\nthen text", "code first"},
		{"call notes_write {\"name\":\"s\"}", `call notes_write {"name":"s"}`},
		{"word a very long first line that goes on and on about the quarterly report and its many appendices",
			"word a very long first line that goes on and on about the quarterly report and…"},
		{"xabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghij",
			"xabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz…"},
	}
	for _, tt := range tests {
		if got := titleFrom(tt.in); got != tt.want {
			t.Errorf("titleFrom(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
