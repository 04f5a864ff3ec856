package main

import (
	"bytes"
	"context"
	"log/slog"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// TestDebugAddrServesProfilesOnLoopback starts usher serve with
// server.debug_addr on loopback and checks that the debug listener serves
// pprof's index, a profile and expvar, while the API's listener serves
// none of them.
func TestDebugAddrServesProfilesOnLoopback(t *testing.T) {
	s := startServer(t, map[string]string{"USHER_SERVER_DEBUG_ADDR": "127.0.0.1:0"})
	m := regexp.MustCompile(`msg="debug listener \(pprof, expvar\)" listen=(\S+)`).FindStringSubmatch(s.stderr.String())
	if m == nil {
		t.Fatalf("no debug listener in the log:\n%s", s.stderr)
	}
	debug := "http://" + m[1]
	if code, body := get(t, debug+"/debug/pprof/", ""); code != 200 || !strings.Contains(string(body), "goroutine") {
		t.Errorf("pprof index = %d %.200s", code, body)
	}
	if code, body := get(t, debug+"/debug/pprof/goroutine?debug=1", ""); code != 200 || !strings.Contains(string(body), "goroutine profile") {
		t.Errorf("goroutine profile = %d %.200s", code, body)
	}
	if code, body := get(t, debug+"/debug/vars", ""); code != 200 || !strings.Contains(string(body), `"memstats"`) {
		t.Errorf("expvar = %d %.200s", code, body)
	}
	for _, p := range []string{"/debug/pprof/", "/debug/vars"} {
		if code, _ := get(t, s.url+p, ""); code != 404 {
			t.Errorf("the API serves %s: %d, want 404", p, code)
		}
	}
}

// TestDebugAddrRefusedOffLoopback checks that usher serve refuses to start
// with a debug address off loopback, and that the listener itself checks
// the address it got.
func TestDebugAddrRefusedOffLoopback(t *testing.T) {
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"serve", "--addr", "127.0.0.1:0", "--data-dir", t.TempDir()},
		getenv(map[string]string{"USHER_SERVER_DEBUG_ADDR": "0.0.0.0:0"}), &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "server.debug_addr") || strings.Contains(out.String(), "running at") {
		t.Fatalf("serve with a debug address on every interface: %v, %q", err, out.String())
	}
	if d, err := startDebug(t.Context(), "0.0.0.0:0", slog.New(slog.DiscardHandler)); err == nil {
		d.stop()
		t.Fatal("startDebug listened on 0.0.0.0")
	}
}

// TestNoHeapSamplingWithoutDebugAddr checks that usher serve without
// server.debug_addr, where no heap profile can be read, turns the
// runtime's heap-profile sampling off.
func TestNoHeapSamplingWithoutDebugAddr(t *testing.T) {
	startServer(t, nil)
	if runtime.MemProfileRate != 0 {
		t.Errorf("runtime.MemProfileRate = %d after serve without server.debug_addr, want 0 (sampling off)", runtime.MemProfileRate)
	}
}
