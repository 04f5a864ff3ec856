package store

import (
	"math/rand/v2"
	"testing"
)

// turnState is the part of a run's row that appending events moves.
type turnState struct{ turn, handled int64 }

// oneByOne applies events one after the other, as the schema's columns
// move for a single event: the reference planAppend must agree with.
func oneByOne(s turnState, events []preparedEvent) turnState {
	for _, e := range events {
		switch {
		case e.StartsTurn > 0:
			s.turn = e.StartsTurn
		case e.EndsTurn:
			s.handled, s.turn = s.turn, 0
		}
	}
	return s
}

// applyPlan applies p as the engines' statements do.
func applyPlan(s turnState, p appendPlan) turnState {
	out := s
	switch p.handled {
	case handledFromTurn:
		out.handled = s.turn
	case handledSet:
		out.handled = p.handledSeq
	}
	if p.turn >= 0 {
		out.turn = p.turn
	}
	return out
}

func TestPlanAppend(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 5000 {
		var events []preparedEvent
		messages, preview := 0, ""
		for i := range 1 + rng.IntN(6) {
			var e preparedEvent
			switch rng.IntN(4) {
			case 0:
				e.StartsTurn = int64(1 + rng.IntN(50))
			case 1:
				e.EndsTurn = true
			case 2:
				e.message = true
				messages++
			}
			if rng.IntN(2) == 0 {
				e.Preview = string(rune('a' + i))
				preview = e.Preview
			}
			events = append(events, e)
		}
		start := turnState{turn: int64(rng.IntN(3) * 7), handled: int64(rng.IntN(5))}
		p := planAppend(events)
		if got, want := applyPlan(start, p), oneByOne(start, events); got != want {
			t.Fatalf("from %+v, events %+v: plan %+v gives %+v, one by one %+v", start, events, p, got, want)
		}
		if p.messages != messages || p.preview != preview {
			t.Fatalf("events %+v: plan counts %d messages, preview %q; want %d, %q", events, p.messages, p.preview, messages, preview)
		}
	}
}
