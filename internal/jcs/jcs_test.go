package jcs

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestVectors canonicalizes every testdata/vectors/NAME.input.json and
// compares it with NAME.canonical.json. The rfc8785-* pairs are the examples
// of RFC 8785 §3.2.2 and §3.2.3; the others cover the remaining rules.
func TestVectors(t *testing.T) {
	inputs, err := filepath.Glob("testdata/vectors/*.input.json")
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no vectors: %v", err)
	}
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".input.json")
		t.Run(name, func(t *testing.T) {
			data := readFile(t, in)
			want := readFile(t, strings.TrimSuffix(in, ".input.json")+".canonical.json")
			got, err := Canonicalize(data)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("got  %s\nwant %s", got, want)
			}
		})
	}
}

// TestNumbers checks number serialisation against RFC 8785 Appendix B and
// against ECMAScript's JSON.stringify for a couple of thousand doubles.
func TestNumbers(t *testing.T) {
	for _, file := range []string{"testdata/rfc8785-numbers.txt", "testdata/numbers.txt"} {
		t.Run(filepath.Base(file), func(t *testing.T) {
			f, err := os.Open(file)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			n := 0
			for sc := bufio.NewScanner(f); sc.Scan(); {
				line := sc.Text()
				if line == "" || strings.HasPrefix(line, "#") {
					continue
				}
				bitsHex, want, ok := strings.Cut(line, " ")
				bits, err := strconv.ParseUint(bitsHex, 16, 64)
				if !ok || err != nil {
					t.Fatalf("bad line %q", line)
				}
				// Go's shortest round-trip text denotes exactly this double,
				// so canonicalizing it tests the serialisation alone.
				text := strconv.FormatFloat(math.Float64frombits(bits), 'g', -1, 64)
				got, err := Canonicalize([]byte(text))
				if err != nil {
					t.Errorf("%s (%s): %v", bitsHex, text, err)
				} else if string(got) != want {
					t.Errorf("%s (%s): got %s, want %s", bitsHex, text, got, want)
				}
				n++
			}
			if n == 0 {
				t.Fatal("no numbers read")
			}
		})
	}
}

func TestRejects(t *testing.T) {
	tests := []struct {
		name  string
		input string
	}{
		{"empty", ""},
		{"whitespace only", "  \n"},
		{"invalid UTF-8 in a string", "\"a\xffb\""},
		{"truncated UTF-8 in a string", "\"a\xe2\x82\""},
		{"UTF-8 encoded surrogate", "\"\xed\xa0\x80\""},
		{"lone high surrogate", `"\ud800"`},
		{"lone high surrogate before text", `"\ud800x"`},
		{"lone low surrogate", `"\udc00"`},
		{"high surrogate before a non-low escape", `"\ud800\u0041"`},
		{"reversed surrogate pair", `"\ude00\ud83d"`},
		{"duplicate key", `{"a":1,"a":2}`},
		{"duplicate key spelled with an escape", `{"a":1,"\u0061":2}`},
		{"duplicate key in a nested object", `[{"x":{"k":1,"k":1}}]`},
		{"too deep", strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1)},
		{"too deep, objects", strings.Repeat(`{"a":`, MaxDepth+1) + "1" + strings.Repeat("}", MaxDepth+1)},
		{"number out of range", `1e400`},
		{"NaN", `NaN`},
		{"Infinity", `[Infinity]`},
		{"leading zero", `01`},
		{"plus sign", `+1`},
		{"hex number", `0x10`},
		{"bare fraction", `.5`},
		{"trailing dot", `1.`},
		{"two values", `1 2`},
		{"trailing garbage", `{"a":1}x`},
		{"trailing comma", `[1,]`},
		{"missing value", `{"a":}`},
		{"single quotes", `{'a':1}`},
		{"comment", `{"a":1 /* c */}`},
		{"byte order mark", "\xef\xbb\xbf{}"},
		{"unterminated string", `"abc`},
		{"raw control character in a string", "\"a\tb\""},
		{"unknown escape", `"\x41"`},
		{"short unicode escape", `"\u41"`},
		{"unclosed array", `[1,2`},
		{"unclosed object", `{"a":1`},
		{"bad literal", `nul`},
		{"literal with interior space", `tr ue`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := Canonicalize([]byte(tt.input))
			if err == nil {
				t.Fatalf("accepted %q as %q", tt.input, out)
			}
			if out != nil {
				t.Errorf("returned output %q with the error", out)
			}
		})
	}
}

func TestDepthLimit(t *testing.T) {
	ok := strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth)
	if _, err := Canonicalize([]byte(ok)); err != nil {
		t.Errorf("depth %d: %v", MaxDepth, err)
	}
	// Brackets inside strings are text, not nesting.
	inString := `["` + strings.Repeat("[", 10*MaxDepth) + `\"` + strings.Repeat("{", 10*MaxDepth) + `"]`
	if _, err := Canonicalize([]byte(inString)); err != nil {
		t.Errorf("brackets in a string: %v", err)
	}
	tooDeep := strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1)
	if _, err := Canonicalize([]byte(tooDeep)); !errors.Is(err, ErrTooDeep) {
		t.Errorf("depth %d: got %v, want ErrTooDeep", MaxDepth+1, err)
	}
}

// TestLarge canonicalizes a wide object whose members arrive out of order.
func TestLarge(t *testing.T) {
	var b strings.Builder
	b.WriteString("{")
	for i := range 20000 {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`"k` + strconv.Itoa(20000-i) + `":[` + strconv.Itoa(i) + `,"v"]`)
	}
	b.WriteString("}")
	out, err := Canonicalize([]byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(out, []byte(`{"k1":[19999,"v"],"k10":[19990,"v"],`)) {
		t.Errorf("unexpected start %q", out[:40])
	}
}

func TestMarshal(t *testing.T) {
	got, err := Marshal(map[string]any{
		"z": []any{1.0, "<&>", nil},
		"a": map[string]int{"b": 2, "a": 1},
		"é": json.RawMessage(`{ "y" : 1e3 , "x" : -0 }`),
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"a":{"a":1,"b":2},"z":[1,"<&>",null],"é":{"x":0,"y":1000}}`
	if string(got) != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if _, err := Marshal(math.NaN()); err == nil {
		t.Error("marshalled NaN")
	}
}

func ExampleCanonicalize() {
	out, err := Canonicalize([]byte(`{ "b": [1.50, 2e3, -0], "a": "caf\u00e9" }`))
	if err != nil {
		panic(err)
	}
	fmt.Println(string(out))
	// Output: {"a":"café","b":[1.5,2000,0]}
}

// FuzzCanonicalize checks, for any input Canonicalize accepts, that the
// input was valid JSON, that the output is its own canonical form, that it
// denotes the same value, and that it is valid UTF-8.
func FuzzCanonicalize(f *testing.F) {
	inputs, _ := filepath.Glob("testdata/vectors/*.input.json")
	for _, in := range inputs {
		data, err := os.ReadFile(in)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range []string{`{"a":1,"a":2}`, `"\ud800"`, `[1e400]`, "\"\xff\"", `{"\u0061":-0.0}`, `[[[[]]]]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := Canonicalize(data)
		if err != nil {
			return
		}
		if !json.Valid(data) {
			t.Fatalf("accepted invalid JSON %q", data)
		}
		if !utf8.Valid(out) {
			t.Fatalf("output is not UTF-8: %q", out)
		}
		again, err := Canonicalize(out)
		if err != nil {
			t.Fatalf("canonical form %q rejected: %v", out, err)
		}
		if !bytes.Equal(again, out) {
			t.Fatalf("not idempotent:\n%q\n%q", out, again)
		}
		var before, after any
		if err := json.Unmarshal(data, &before); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(out, &after); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(before, after) {
			t.Fatalf("value changed:\n%#v\n%#v", before, after)
		}
	})
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
