// Package auditsink owns the delivery of the audit log to the
// organisation's SIEM: sinks (a file of JSON lines, or a webhook that
// receives batches of them), each with a durable cursor in the database,
// delivered to by one process at a time.
//
// # Lines
//
// Each line is one record as `usher audit export` writes it (see
// audit.Line), with its seq. A Source hands out lines in order after a
// sequence number; Records is the audit log's, and the default. Another
// source of lines is delivered by a Target of its own, under a cursor of
// its own name. The lag metrics are measured against the audit log.
//
// # At least once
//
// A sink's cursor (store.AuditSinks) is the sequence of the last line the
// sink acknowledged: a webhook's 2xx answer, or a file's write and sync.
// It moves only after that, so a process stopped between a delivery and
// the cursor's write delivers that batch again when it, or another
// replica, resumes: every line is delivered at least once, and receivers
// deduplicate by seq. While a sink fails, its cursor stays where it is and
// delivery retries with an exponential backoff (at most
// Options.MaxBackoff), or after the time a webhook's Retry-After asks for
// (at most MaxRetryAfter); nothing is dropped.
//
// # One deliverer per sink
//
// A process delivers to a sink only while it holds the sink's lease in
// the database, taken with a conditional update and fenced by its token
// (as the assistant's run leases are). It renews the lease before a batch
// whenever less than half of Options.LeaseFor is left, so each batch is
// sent with at least half the lease ahead of it; a sink's sending is
// bounded by a shorter time (the webhook's client timeout), so a lease
// cannot lapse during a send, and a cursor write after a lost lease is
// refused.
//
// Delivery runs on its own ticker (internal/periodic), reading the log:
// never on the path of a tool call.
package auditsink
