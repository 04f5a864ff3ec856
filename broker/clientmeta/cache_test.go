package clientmeta_test

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/usherhq/usher/broker/clientmeta"
	"github.com/usherhq/usher/internal/testenv"
)

// cachedFetcher returns a Fetcher of s on clk with a 1 min floor and a 1 h
// ceiling.
func cachedFetcher(t *testing.T, s *docServer, clk *testenv.Clock, edit func(*clientmeta.Options)) *clientmeta.Fetcher {
	return fetcher(t, s, func(o *clientmeta.Options) {
		o.Now = clk.Now
		o.MinTTL = time.Minute
		o.MaxTTL = time.Hour
		if edit != nil {
			edit(o)
		}
	})
}

// fetchN fetches id and checks that the server has then seen want requests.
func fetchN(t *testing.T, f *clientmeta.Fetcher, s *docServer, id string, want int64) *clientmeta.Document {
	t.Helper()
	doc, err := f.Fetch(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if n := s.hits.Load(); n != want {
		t.Fatalf("%d requests, want %d", n, want)
	}
	return doc
}

func TestCacheLifetime(t *testing.T) {
	cases := []struct {
		name         string
		cacheControl string
		fresh, stale time.Duration // still cached after fresh, fetched again after stale
	}{
		{"max-age honoured", "public, max-age=600", 599 * time.Second, 601 * time.Second},
		{"max-age raised to the floor", "max-age=1", 59 * time.Second, 61 * time.Second},
		{"max-age=0 raised to the floor", "max-age=0", 59 * time.Second, 61 * time.Second},
		{"no-cache raised to the floor", "no-cache", 59 * time.Second, 61 * time.Second},
		{"max-age lowered to the ceiling", "max-age=31536000", 59 * time.Minute, 61 * time.Minute},
		{"no Cache-Control: the floor", "", 59 * time.Second, 61 * time.Second},
		{"unparsable max-age: the floor", "max-age=soon", 59 * time.Second, 61 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newDocServer(t, false, nil)
			id := s.id("example.com", "/client.json")
			s.set(serveJSON(document(id, nil), "Cache-Control", c.cacheControl))
			clk := newClock()
			f := cachedFetcher(t, s, clk, nil)
			fetchN(t, f, s, id, 1)
			clk.Advance(c.fresh)
			fetchN(t, f, s, id, 1)
			clk.Advance(c.stale - c.fresh)
			fetchN(t, f, s, id, 2)
		})
	}
}

func TestCacheNoStoreIsNotCached(t *testing.T) {
	s := newDocServer(t, false, nil)
	id := s.id("example.com", "/client.json")
	s.set(serveJSON(document(id, nil), "Cache-Control", "no-store, max-age=600"))
	f := cachedFetcher(t, s, newClock(), nil)
	fetchN(t, f, s, id, 1)
	fetchN(t, f, s, id, 2)
	fetchN(t, f, s, id, 3)
}

func TestCacheDropsAnEntryServedNoStoreLater(t *testing.T) {
	s := newDocServer(t, false, nil)
	id := s.id("example.com", "/client.json")
	s.set(serveJSON(document(id, nil), "Cache-Control", "max-age=60"))
	clk := newClock()
	f := cachedFetcher(t, s, clk, nil)
	fetchN(t, f, s, id, 1)
	clk.Advance(61 * time.Second)
	s.set(serveJSON(document(id, nil), "Cache-Control", "no-store"))
	fetchN(t, f, s, id, 2)
	fetchN(t, f, s, id, 3)
}

func TestACallerDeadlineIsATimeout(t *testing.T) {
	s := newDocServer(t, false, nil)
	id := s.id("example.com", "/client.json")
	release := make(chan struct{})
	s.set(func(w http.ResponseWriter, r *http.Request) {
		<-release
		serveJSON(document(id, nil))(w, r)
	})
	f := cachedFetcher(t, s, newClock(), nil)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	_, err := f.Fetch(ctx, id)
	close(release)
	if got := reason(t, err); got != "fetching the client metadata document timed out" {
		t.Errorf("reason = %q", got)
	}
	waitFor(t, func() bool { _, err := f.Fetch(t.Context(), id); return err == nil })
}

func TestCacheRevalidatesWithETag(t *testing.T) {
	s := newDocServer(t, false, nil)
	id := s.id("example.com", "/client.json")
	version := `"v1"`
	name := "First Name"
	var mu sync.Mutex
	var notModified int
	s.set(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("ETag", version)
		if r.Header.Get("If-None-Match") == version {
			notModified++
			w.WriteHeader(http.StatusNotModified)
			return
		}
		serveJSON(document(id, func(d map[string]any) { d["client_name"] = name }))(w, r)
	})
	clk := newClock()
	f := cachedFetcher(t, s, clk, nil)
	if doc := fetchN(t, f, s, id, 1); doc.ClientName != "First Name" {
		t.Fatalf("client_name = %q", doc.ClientName)
	}
	clk.Advance(61 * time.Second)
	if doc := fetchN(t, f, s, id, 2); doc.ClientName != "First Name" {
		t.Fatalf("after a 304, client_name = %q", doc.ClientName)
	}
	if notModified != 1 {
		t.Fatalf("%d 304 answers, want 1: the stale entry was not revalidated", notModified)
	}
	// The 304 renewed the entry's lifetime.
	clk.Advance(59 * time.Second)
	fetchN(t, f, s, id, 2)

	// A changed document replaces the entry.
	mu.Lock()
	version, name = `"v2"`, "Second Name"
	mu.Unlock()
	clk.Advance(2 * time.Second)
	if doc := fetchN(t, f, s, id, 3); doc.ClientName != "Second Name" {
		t.Fatalf("after a change, client_name = %q", doc.ClientName)
	}
	if notModified != 1 {
		t.Fatalf("%d 304 answers, want still 1", notModified)
	}
}

func TestCacheIsBoundedLRU(t *testing.T) {
	s := newDocServer(t, false, nil)
	ids := []string{s.id("example.com", "/a.json"), s.id("example.com", "/b.json"), s.id("example.com", "/c.json")}
	s.set(func(w http.ResponseWriter, r *http.Request) {
		serveJSON(document(s.id("example.com", r.URL.Path), nil))(w, r)
	})
	f := cachedFetcher(t, s, newClock(), func(o *clientmeta.Options) { o.CacheSize = 2 })
	fetchN(t, f, s, ids[0], 1)
	fetchN(t, f, s, ids[1], 2)
	fetchN(t, f, s, ids[0], 2) // a is now the most recently used
	fetchN(t, f, s, ids[2], 3) // evicts b
	fetchN(t, f, s, ids[0], 3)
	fetchN(t, f, s, ids[2], 3)
	fetchN(t, f, s, ids[1], 4)

	off := cachedFetcher(t, s, newClock(), func(o *clientmeta.Options) { o.CacheSize = -1 })
	fetchN(t, off, s, ids[0], 5)
	fetchN(t, off, s, ids[0], 6)
}

func TestCacheKeepsNoFailure(t *testing.T) {
	s := newDocServer(t, false, nil)
	id := s.id("example.com", "/client.json")
	s.set(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) })
	f := cachedFetcher(t, s, newClock(), nil)
	if _, err := f.Fetch(t.Context(), id); err == nil {
		t.Fatal("a 503 was accepted")
	}
	s.set(serveJSON(document(id, nil)))
	fetchN(t, f, s, id, 2)
}

func TestConcurrentFetchesShareOneRequest(t *testing.T) {
	for _, cacheControl := range []string{"max-age=600", "no-store"} {
		t.Run(cacheControl, func(t *testing.T) {
			s := newDocServer(t, false, nil)
			id := s.id("example.com", "/client.json")
			body, _ := json.Marshal(document(id, nil))
			release := make(chan struct{})
			s.set(func(w http.ResponseWriter, r *http.Request) {
				<-release
				serveBody("application/json", body, "Cache-Control", cacheControl)(w, r)
			})
			f := cachedFetcher(t, s, newClock(), nil)
			const callers = 20
			var started, done sync.WaitGroup
			errs := make(chan error, callers)
			for range callers {
				started.Add(1)
				done.Add(1)
				go func() {
					defer done.Done()
					started.Done()
					_, err := f.Fetch(context.Background(), id)
					errs <- err
				}()
			}
			started.Wait()
			waitFor(t, func() bool { return s.hits.Load() == 1 })
			time.Sleep(50 * time.Millisecond) // the callers reach the shared fetch
			close(release)
			done.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Error(err)
				}
			}
			if n := s.hits.Load(); n != 1 {
				t.Errorf("%d requests for %d concurrent callers, want 1", n, callers)
			}
		})
	}
}

func TestACancelledCallerLeavesTheSharedFetch(t *testing.T) {
	s := newDocServer(t, false, nil)
	id := s.id("example.com", "/client.json")
	release := make(chan struct{})
	s.set(func(w http.ResponseWriter, r *http.Request) {
		<-release
		serveJSON(document(id, nil), "Cache-Control", "max-age=600")(w, r)
	})
	f := cachedFetcher(t, s, newClock(), nil)
	ctx, cancel := context.WithCancel(t.Context())
	result := make(chan error, 1)
	go func() {
		_, err := f.Fetch(ctx, id)
		result <- err
	}()
	waitFor(t, func() bool { return s.hits.Load() == 1 })
	cancel()
	if got := reason(t, <-result); got != "fetching the client metadata document was cancelled" {
		t.Errorf("reason = %q", got)
	}
	// The fetch goes on for the others, and fills the cache.
	second := make(chan error, 1)
	go func() {
		_, err := f.Fetch(t.Context(), id)
		second <- err
	}()
	close(release)
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	fetchN(t, f, s, id, 1)
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 5 s")
		}
		time.Sleep(2 * time.Millisecond)
	}
}
