// Package periodic owns the running of a pass of background work on a
// ticker as a component that is started and stopped: whoever starts a Loop
// stops it, and Stop returns only once its goroutine has.
package periodic
