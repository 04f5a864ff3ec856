// Package jcs owns canonical JSON: the RFC 8785 JSON Canonicalization Scheme
// (JCS) that Usher hashes whenever two JSON texts must be recognised as the
// same value — tool definitions for the tool lock, and call arguments for
// approvals.
//
// Canonical JSON has no insignificant whitespace, object members sorted by
// the UTF-16 code units of their names, strings with the minimal escaping of
// RFC 8785 §3.2.2.2, and numbers serialised as ECMAScript's JSON.stringify
// does (IEEE 754 doubles in shortest round-trip form; -0 becomes 0).
//
// The input must be I-JSON (RFC 7493): Canonicalize rejects invalid UTF-8,
// escaped lone surrogates, duplicate object member names, numbers outside
// the range of a double, and nesting deeper than MaxDepth. Integers beyond
// 2^53 are not rejected, but like every number they are canonicalised as the
// nearest double, so two texts that differ only there canonicalise alike;
// send such values as strings when their exact digits matter.
//
// The scanning and serialisation are done by github.com/gowebpki/jcs, a
// maintained implementation of RFC 8785 that runs in linear time and memory;
// this package pins the nesting limit and the error wording, and is the one
// place the rest of Usher depends on.
package jcs
