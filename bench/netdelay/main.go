// Command netdelay is a TCP relay on loopback that adds a fixed time to
// every round trip between its clients and one server: the out-of-process
// benchmark (bench/mcpbench, -db-rtt) puts it between Usher and
// PostgreSQL, so that a run shows what a database in another rack or zone
// costs a call, as production's usually is, where loopback hides it.
//
// Each direction of a connection is delayed by half of -rtt. The delay is
// a latency, not a bandwidth: what is read at t is written at t + rtt/2,
// in order, however much was read before it, so that a pipelined batch of
// statements is delayed once, not once per message. It prints its
// address on the first line of its standard output and relays until
// SIGINT or SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address (loopback)")
	target := flag.String("target", "", "the server's address (host:port)")
	rtt := flag.Duration("rtt", time.Millisecond, "the time added to each round trip, half each way")
	flag.Parse()
	if err := run(*addr, *target, *rtt); err != nil {
		fmt.Fprintln(os.Stderr, "netdelay:", err)
		os.Exit(1)
	}
}

func run(addr, target string, rtt time.Duration) error {
	if target == "" || rtt < 0 {
		return errors.New("-target must be set and -rtt not negative")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	fmt.Printf("netdelay at %s\n", ln.Addr())
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	go func() {
		<-ctx.Done()
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
	}()
	for {
		client, err := ln.Accept()
		if err != nil {
			wg.Wait()
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		server, err := net.Dial("tcp", target)
		if err != nil {
			fmt.Fprintln(os.Stderr, "netdelay:", err)
			client.Close()
			continue
		}
		mu.Lock()
		conns[client], conns[server] = true, true
		mu.Unlock()
		wg.Go(func() {
			var pair sync.WaitGroup
			pair.Go(func() { relay(server, client, rtt/2) })
			pair.Go(func() { relay(client, server, rtt/2) })
			pair.Wait()
			mu.Lock()
			delete(conns, client)
			delete(conns, server)
			mu.Unlock()
		})
	}
}

// wait sleeps for d in nanosleep(2), which keeps to the microsecond
// where Go's own timers may wake a millisecond late: they wait in
// epoll_wait, whose timeout is in whole milliseconds. The thread blocks;
// Go's scheduler hands its processor to another while it does.
func wait(d time.Duration) {
	if d <= 0 {
		return
	}
	ts := syscall.NsecToTimespec(int64(d))
	for syscall.Nanosleep(&ts, &ts) == syscall.EINTR {
	}
}

// chunk is what one read returned, and when it is to be written.
type chunk struct {
	due  time.Time
	data []byte
}

// relay copies from src to dst, each read written delay after it was
// read, and closes both when either side ends.
func relay(dst, src net.Conn, delay time.Duration) {
	defer dst.Close()
	defer src.Close()
	chunks := make(chan chunk, 4096)
	go func() {
		defer close(chunks)
		for {
			buf := make([]byte, 64<<10)
			n, err := src.Read(buf)
			if n > 0 {
				chunks <- chunk{due: time.Now().Add(delay), data: buf[:n]}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range chunks {
		wait(time.Until(c.due))
		if _, err := dst.Write(c.data); err != nil {
			src.Close() // ends the reader
			for range chunks {
			}
			return
		}
	}
}
