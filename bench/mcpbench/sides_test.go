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

// TestRoundOrder: over 2n rounds each Usher is first twice, and each
// follows every other as often as that one follows it (for three, each
// follows each other once), where a round's first is followed by the
// direct call and the proxy's.
func TestRoundOrder(t *testing.T) {
	for n := 1; n <= 4; n++ {
		orders := alternation(n)
		first := make([]int, n)
		after := make([][]int, n) // after[x][y]: y right after x
		for i := range after {
			after[i] = make([]int, n)
		}
		for round := range 2 * n {
			order := roundOrder(orders, n, round)
			first[order[0]]++
			for k := 2; k < n; k++ {
				after[order[k-1]][order[k]]++
			}
		}
		for x := range n {
			if first[x] != 2 {
				t.Errorf("n=%d: Usher %d is first in %d rounds of %d, want 2", n, x, first[x], 2*n)
			}
			for y := range n {
				if after[x][y] != after[y][x] || (n == 3 && x != y && after[x][y] != 1) {
					t.Errorf("n=%d: %d follows %d in %d rounds, %d follows %d in %d", n, y, x, after[x][y], x, y, after[y][x])
				}
			}
		}
	}
}
