// Package httpx owns the HTTP plumbing every endpoint shares: the one API
// error shape and its writer, request body limits, request metrics, and
// the client's address behind trusted reverse proxies.
package httpx
