package main

import (
	"context"
	"errors"
	"expvar"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime"
	"sync"
	"time"
)

// stopHeapSampling turns the runtime's heap-profile sampling off, for a
// server without server.debug_addr: its heap profile cannot be read, and
// the sampling costs 2-3 % of the CPU of a tools/call (the MCP SDK's
// 32 KiB decoder buffers reach the 512 KiB sampling interval about once a
// call). Once per process: the rate is the runtime's,
// and is set before the server serves.
var stopHeapSampling = sync.OnceFunc(func() { runtime.MemProfileRate = 0 })

// debugServer serves the Go runtime's profiles (net/http/pprof) and expvar
// on a listener of its own, apart from the API, for server.debug_addr. It
// has no authentication: the configuration admits only loopback addresses,
// and startDebug checks the address it listens on again.
type debugServer struct {
	srv  *http.Server
	addr string
	done chan error
}

// startDebug listens on addr and serves the debug handlers until stop.
func startDebug(ctx context.Context, addr string, log *slog.Logger) (*debugServer, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("server.debug_addr: listen: %w", err)
	}
	// A host name such as localhost resolves when listening: what matters
	// is the address it resolved to.
	if tcp, ok := ln.Addr().(*net.TCPAddr); !ok || !tcp.IP.IsLoopback() {
		ln.Close()
		return nil, fmt.Errorf("server.debug_addr: %s is not a loopback address", ln.Addr())
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.Handle("/debug/vars", expvar.Handler())
	d := &debugServer{
		srv: &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: 10 * time.Second,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		},
		addr: ln.Addr().String(),
		done: make(chan error, 1),
	}
	go func() { d.done <- d.srv.Serve(ln) }()
	log.Info("debug listener (pprof, expvar)", "listen", d.addr)
	return d, nil
}

// stop closes the listener and its connections: a profile being taken is
// cut short.
func (d *debugServer) stop() error {
	err := d.srv.Close()
	if serveErr := <-d.done; !errors.Is(serveErr, http.ErrServerClosed) {
		err = errors.Join(err, serveErr)
	}
	return err
}
