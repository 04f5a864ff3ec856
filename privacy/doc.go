// Package privacy owns what a person may ask of the data Usher keeps of
// them: a copy (Export, `usher export`), and its erasure (Erase, `usher
// erase`) — their conversations, deleted or not, the approvals and
// records of their tool calls, their notes, attachments, settings, pins
// and model usage, their browser, OAuth and MCP sessions. An erasure is
// one transaction with an audit record of it (principal_erased); an
// export is one snapshot, recorded before it is read (principal_exported),
// and holds the audit log's records that name the person too.
//
// The audit log itself is kept: it is the tamper-evident account of what
// happened, and names people by their principal id, not by what they
// wrote. Decisions a person took on other people's approvals stay with
// those approvals. Two kinds of short-lived rows name no one in the
// clear and go by themselves: the events an MCP stream keeps for its
// resumption (keyed by a digest of the session handle, kept an hour), and
// the records of the upstream sessions opened for a caller (keyed by a
// digest, sealed, ended when idle). Erasing a person does not stop them
// signing in again: disable them at the identity provider first.
//
// A dry run counts what an erasure would erase, in the same transaction,
// rolled back.
//
// A legal hold (PlaceHold, `usher hold`) keeps a person's data whatever
// the retention policy says: while it stands the purge of deleted
// conversations skips theirs, deleting a conversation of theirs keeps its
// attachments until that purge, and Erase is refused (store.ErrLegalHold).
// Placing and lifting one are audited in the same transaction
// (legal_hold_placed, legal_hold_lifted).
package privacy
