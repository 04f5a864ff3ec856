package audit

import "testing"

// TestEventSet checks that each event id is held once, whether it is
// well-formed (held as its bits) or not, and that records without one are
// never repeats of each other.
func TestEventSet(t *testing.T) {
	const id = "0123456789abcdef0123456789abcdef"
	steps := []struct {
		id        string
		seq       int64
		wantFirst int64
		wantNew   bool
	}{
		{"", 1, 0, true},
		{"", 2, 0, true}, // no id: never a repeat
		{id, 3, 0, true},
		{"0123456789ABCDEF0123456789ABCDEF", 4, 0, true}, // not the same string, not well-formed
		{"not an id", 5, 0, true},
		{id, 6, 3, false},
		{"not an id", 7, 5, false},
		{"0123456789ABCDEF0123456789ABCDEF", 8, 4, false},
		{"0123456789abcdef0123456789abcdee", 9, 0, true},
	}
	var s eventSet
	for _, st := range steps {
		first, isNew := s.add(st.id, st.seq)
		if first != st.wantFirst || isNew != st.wantNew {
			t.Errorf("add(%q, %d) = %d, %v; want %d, %v", st.id, st.seq, first, isNew, st.wantFirst, st.wantNew)
		}
	}
}
