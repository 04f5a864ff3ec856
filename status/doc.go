// Package status owns what operators see of a running installation: each
// replica's heartbeat in the database, the status report read from it, who
// may read it over the API (admin.groups), and its text for `usher status`.
//
// # Heartbeats
//
// Every `usher serve` replica records itself (Heartbeat) every interval:
// its id (the one it names itself by in the runs' leases), version, listen
// address, start time and its view of the upstream MCP servers, through
// the narrow Upstreams interface. A replica is alive for AliveIntervals
// intervals after its last heartbeat; one that stops leaves at once, one
// that dies ages out. Each heartbeat also sets the gauge
// usher_replicas_alive, for the alert on fewer replicas than wanted.
//
// # The report
//
// Read builds a Report from the database alone, so that `usher status`
// and GET /api/admin/status, on any replica, say the same: the replicas
// alive, the upstreams and their state as each replica sees them, the run
// queue (queued, running, the oldest queued), the pending approvals (how
// many, and the oldest's tool and age — never its arguments) and the last
// audit checkpoint.
//
// # Who is an admin
//
// An admin is a signed-in person with one of admin.groups among the
// groups or the app roles of their token. The API sits behind the
// identity middleware, which accepts only the organisation's access tokens
// for a person (never an app-only token), and behind broker.RefuseTokens
// (never a broker token). Anyone else who is signed in gets 403
// admin_required.
package status
