package jcs

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestFoldCollision(t *testing.T) {
	cases := []struct {
		name, data    string
		first, second string
	}{
		{"none", `{"a":1,"b":{"c":[{"d":1},{"d":2}]}}`, "", ""},
		{"long s", `{"sql":"SELECT 1","ſql":"DROP TABLE users"}`, "sql", "ſql"},
		{"ascii case", `{"Name":1,"name":2}`, "Name", "name"},
		{"kelvin sign", `{"k":1,"K":2}`, "k", "K"},
		{"nested object", `{"a":{"sql":1,"SQL":2}}`, "sql", "SQL"},
		{"object in array", `{"a":[1,{"x":{"id":1,"ID":2}}]}`, "id", "ID"},
		{"top-level array", `[{"a":1},{"A":1,"a":2}]`, "A", "a"},
		{"same name in sibling objects", `{"a":{"n":1},"b":{"N":1}}`, "", ""},
		{"a value equal to a name", `{"n":"N","m":["n","N"]}`, "", ""},
		{"different lengths", `{"ss":1,"ß":2}`, "", ""}, // EqualFold folds rune by rune
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			first, second, found, err := FoldCollision([]byte(c.data))
			if err != nil {
				t.Fatal(err)
			}
			if want := c.first != ""; found != want || first != c.first || second != c.second {
				t.Errorf("FoldCollision(%s) = %q, %q, %v; want %q, %q, %v", c.data, first, second, found, c.first, c.second, want)
			}
		})
	}
	if _, _, _, err := FoldCollision([]byte(`{"a":`)); err == nil {
		t.Error("FoldCollision of a truncated text did not fail")
	}
}

// FuzzFoldCollision checks FoldCollision against strings.EqualFold over
// every pair of names of a flat object.
func FuzzFoldCollision(f *testing.F) {
	for _, seed := range [][2]string{{"sql", "ſql"}, {"k", "K"}, {"a", "b"}, {"ss", "ß"}, {"Σ", "ς"}} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		if a == b {
			return
		}
		data, err := json.Marshal(map[string]int{a: 1, b: 2})
		if err != nil {
			return
		}
		_, _, found, err := FoldCollision(data)
		if err != nil {
			return // names that encode alike are duplicates, not JSON
		}
		if want := strings.EqualFold(a, b); found != want {
			t.Errorf("FoldCollision(%s) found %v, strings.EqualFold(%q, %q) = %v", data, found, a, b, want)
		}
	})
}
