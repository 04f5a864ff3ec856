package main

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/pem"
	"testing"

	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// TestWritesEveryUnconstrainedRoot checks that the PEM file holds exactly
// the bundle's unconstrained roots, each a certificate crypto/x509 parses,
// and none of the roots NSS trusts only until a date.
func TestWritesEveryUnconstrainedRoot(t *testing.T) {
	want := map[[32]byte]bool{}
	constrained := map[[32]byte]bool{}
	for r := range bundle.Roots() {
		if r.Constraint != nil {
			constrained[sha256.Sum256(r.Certificate)] = true
		} else {
			want[sha256.Sum256(r.Certificate)] = true
		}
	}
	if len(want) < 100 {
		t.Fatalf("the bundle has %d unconstrained roots; NSS trusts well over 100", len(want))
	}

	var out bytes.Buffer
	n, err := write(&out, bundle.Roots())
	if err != nil {
		t.Fatal(err)
	}
	if n != len(want) {
		t.Errorf("write reported %d roots, want %d", n, len(want))
	}
	got := 0
	for rest := out.Bytes(); ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			if len(bytes.TrimSpace(rest)) != 0 {
				t.Fatalf("%d bytes after the last PEM block", len(rest))
			}
			break
		}
		if b.Type != "CERTIFICATE" {
			t.Errorf("a %q block; want CERTIFICATE only", b.Type)
		}
		if _, err := x509.ParseCertificate(b.Bytes); err != nil {
			t.Errorf("block %d: %v", got, err)
		}
		sum := sha256.Sum256(b.Bytes)
		if constrained[sum] {
			t.Errorf("block %d is a root NSS trusts only with a constraint", got)
		} else if !want[sum] {
			t.Errorf("block %d is not a root of the bundle", got)
		}
		delete(want, sum)
		got++
	}
	if len(want) != 0 {
		t.Errorf("%d roots of the bundle are missing from the file", len(want))
	}
}
