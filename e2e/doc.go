// Package e2e owns the end-to-end tests: they build the usher binary, run it
// as a person would (`usher serve` on a loopback port with a fresh data
// directory), and drive it with real MCP clients from outside the project —
// the MCP Inspector CLI, and the official MCP conformance suite in server
// mode against a fixture upstream that offers the suite's test tools.
//
// The suite also runs against a server from outside the project, the Go
// SDK's conformance everything-server, built from the module go.mod
// requires (everything_test.go): directly, in both of its modes, and
// federated unmodified through Usher (prefix "none") in both of Usher's,
// each run's outcomes compared with
// testdata/conformance-everything-expected.yaml.
//
// The OAuth tests (oauth_test.go) drive Usher's authorization server: the
// official MCP TypeScript SDK's client runs its own authorization flow
// (testdata/oauth-client.mjs, which also plays the browser: the
// development provider's sign-in and the consent page, over HTTP with a
// cookie jar), the Inspector CLI uses a token so obtained, and the
// conformance suite's pre-release (installed as conformance-next beside
// the released suite) runs its authorization-server scenarios.
//
// The Node.js tools are pinned in package.json and package-lock.json, with
// the Node.js that runs them; `make e2e-deps` installs them into
// node_modules. Without them the tests fail when CI is set, and skip
// otherwise. The scenarios the suite is expected to fail, each with its
// reason, are in testdata/conformance-expected.yaml and docs/conformance.md.
package e2e
