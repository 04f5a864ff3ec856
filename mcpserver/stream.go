package mcpserver

import (
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// An upstream answers a tools/call over HTTP on a response stream (SSE) of
// its own, which it may close before the answer. With event ids on it the
// stream is resumable: the SDK reconnects with Last-Event-ID and the
// answer comes on the resumed stream (SSE polling, SEP-1699). Without them
// nothing can bring the answer back: the upstream took the request and may
// have run it, so the call's outcome is unknown, and its record says why.
// sseTap watches each response stream of a call for this (see ended).

// errStreamEnded marks a call whose upstream closed its response stream
// without answering and without an event id to resume it from.
var errStreamEnded = fmt.Errorf("%w: the upstream closed its response stream without answering, and the stream cannot be resumed (it carried no event id)", errOutcomeUnknown)

// streamEndedReason is the reason an outcome_unknown record of such a call
// gives.
const streamEndedReason = "the upstream server closed its response stream without answering, and the stream cannot be resumed (it carried no event id): the call reached the upstream and may or may not have run"

// streamEndedText is what the caller of such a call is told.
const streamEndedText = "The upstream server closed its response stream without answering, and the stream could not be resumed: " +
	"the call reached it and may or may not have taken effect, so its outcome is unknown. It will not be run again automatically; check before calling again."

// outcomeUnknownText is what the caller of a call whose outcome is unknown
// is told, and the reason its record gives (empty for a lost connection,
// the general case, which needs none).
func outcomeUnknownText(err error) (text, reason string) {
	if errors.Is(err, errStreamEnded) {
		return streamEndedText, streamEndedReason
	}
	return "The call's outcome is unknown: it may or may not have taken effect, and it will not be run again automatically. Check before calling again.", ""
}

// streamState is what the response streams of one call to an upstream
// showed, written by the sseTaps of those streams.
type streamState struct {
	// ended: a stream of the call ended without its answer and without
	// an event id.
	ended atomic.Bool
}

// defaultRetry is the reconnection delay Usher asks its caller for when
// an upstream closes a resumable stream without naming one.
const defaultRetry = 500 * time.Millisecond

// maxRetry bounds the reconnection delay Usher passes on.
const maxRetry = 10 * time.Second

// streamEnd is called by an sseTap when the response stream it reads ends
// (the upstream closed it) before the call's answer. A stream with event
// ids is resumed by the SDK: Usher then closes its own response stream to
// the caller, with a retry field, so that the caller too reconnects and
// polls (see downstream.pause). A stream without them is the call's end.
func (f *inflight) streamEnd(resumable bool, retry time.Duration) {
	if !resumable {
		f.stream.ended.Store(true)
		return
	}
	if retry <= 0 {
		retry = defaultRetry
	}
	f.pause(min(retry, maxRetry))
}

// pause closes the caller's response stream of the call with a retry
// field, when the caller can resume it: a stateful endpoint (whose event
// store replays what the stream missed) and protocol 2025-11-25 up to
// 2026-07-28 exclusive, whose streams begin with a priming event, so that
// the caller holds an event id to resume from. Otherwise the stream stays
// open until the answer: closing it would lose the answer.
func (d downstream) pause(retry time.Duration) {
	if d.closeStream == nil || d.protocol < "2025-11-25" || d.protocol >= sessionlessVersion {
		return
	}
	d.closeStream(mcp.CloseSSEStreamArgs{RetryAfter: retry})
}

// parseRetry reads an SSE retry field's value, in milliseconds.
func parseRetry(v []byte) (time.Duration, bool) {
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	return time.Duration(n) * time.Millisecond, true
}
