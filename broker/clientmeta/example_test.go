package clientmeta_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/usherhq/usher/broker/clientmeta"
)

// The authorization endpoint looks a URL client_id up, and answers a
// refusal with the Error's Reason, logging its Cause.
func ExampleFetcher_Fetch() {
	f, err := clientmeta.New(nil)
	if err != nil {
		panic(err)
	}
	doc, err := f.Fetch(context.Background(), "https://app.example.com/oauth/client-metadata.json")
	var refused *clientmeta.Error
	if errors.As(err, &refused) {
		slog.Warn("client metadata document refused", "reason", refused.Reason, "cause", refused.Cause)
		fmt.Println("invalid_client:", refused.Reason)
		return
	}
	if !doc.RedirectURIAllowed("http://127.0.0.1:3000/callback") {
		fmt.Println("invalid_request: redirect_uri is not registered")
	}
}
