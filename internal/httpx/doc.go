// Package httpx owns the HTTP plumbing every endpoint shares: the one API
// error shape and its writer, request body limits, and request metrics.
package httpx
