package main

import (
	"slices"
	"testing"
)

// TestAlternation: for two Ushers the order is A B B A B A A B; for any
// number each runs 2n phases, in each position of a block of n as often
// as in any other.
func TestAlternation(t *testing.T) {
	if got, want := alternation(2), []int{0, 1, 1, 0, 1, 0, 0, 1}; !slices.Equal(got, want) {
		t.Errorf("alternation(2) = %v, want %v", got, want)
	}
	for n := 1; n <= 4; n++ {
		order := alternation(n)
		if len(order) != 2*n*n {
			t.Fatalf("alternation(%d) has %d phases, want %d", n, len(order), 2*n*n)
		}
		at := make([][]int, n) // at[usher][position in its block]
		for i := range at {
			at[i] = make([]int, n)
		}
		for i, u := range order {
			at[u][i%n]++
		}
		for u := range n {
			for pos := range n {
				if at[u][pos] != 2 {
					t.Errorf("alternation(%d): Usher %d is at position %d of a block %d times, want 2: %v", n, u, pos, at[u][pos], order)
				}
			}
		}
	}
}
