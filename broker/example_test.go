package broker_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/usherhq/usher/broker"
	"github.com/usherhq/usher/internal/jwks"
	"github.com/usherhq/usher/store"
)

// A broker mints a token for one user, one run and one MCP server; the MCP
// server verifies it.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "usher-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	st, err := store.Open(ctx, filepath.Join(dir, "usher.db"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	if err := st.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	seal, err := broker.LoadOrCreateSealKey(filepath.Join(dir, "broker.key"))
	if err != nil {
		log.Fatal(err)
	}
	keys, err := broker.NewKeyring(st, "broker", seal, nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := keys.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer keys.Stop()

	b, err := broker.New(keys, &broker.Options{Issuer: "https://usher.example.com"})
	if err != nil {
		log.Fatal(err)
	}
	tok, err := b.Mint(ctx, broker.Grant{Subject: "alice", Audience: "https://usher.example.com/mcp", RunID: "run-1"})
	if err != nil {
		log.Fatal(err)
	}

	v, err := broker.NewVerifier(keys, &broker.VerifierOptions{
		Issuer:   "https://usher.example.com",
		Audience: "https://usher.example.com/mcp",
	})
	if err != nil {
		log.Fatal(err)
	}
	c, err := v.Verify(ctx, tok.Raw)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(c.Subject, c.Audience, c.Scopes, c.RunID, c.Actor)
	// Output: alice https://usher.example.com/mcp [mcp:invoke] run-1 usher-assistant
}

// An MCP server in another process verifies bearer tokens against the
// broker's published key set, and tells 401, 403 and 503 apart. The error
// details go to the log, never to the client.
func ExampleVerifier_Verify() {
	keys, err := jwks.NewRemote("https://usher.example.com/.well-known/jwks.json", nil)
	if err != nil {
		log.Fatal(err)
	}
	v, err := broker.NewVerifier(keys, &broker.VerifierOptions{
		Issuer:   "https://usher.example.com",
		Audience: "https://usher.example.com/mcp",
	})
	if err != nil {
		log.Fatal(err)
	}
	http.HandleFunc("/mcp", func(w http.ResponseWriter, r *http.Request) {
		raw, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		c, err := v.Verify(r.Context(), raw)
		switch {
		case !ok || errors.Is(err, broker.ErrInvalidToken):
			log.Printf("mcp: %v", err)
			w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
			w.WriteHeader(http.StatusUnauthorized)
		case errors.Is(err, broker.ErrInsufficientScope):
			log.Printf("mcp: %v", err)
			w.Header().Set("WWW-Authenticate", `Bearer error="insufficient_scope", scope="mcp:invoke"`)
			w.WriteHeader(http.StatusForbidden)
		case err != nil:
			log.Printf("mcp: %v", err)
			w.WriteHeader(http.StatusServiceUnavailable)
		default:
			fmt.Fprintf(w, "hello, %s (token %s)", c.Subject, c.ID)
		}
	})
}
