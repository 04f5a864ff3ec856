// Command cabundle writes the trusted roots of Mozilla's NSS store, as the
// module golang.org/x/crypto/x509roots/fallback carries them, to its
// standard output as one PEM file: the image's
// /etc/ssl/certs/ca-certificates.crt (deploy/image/Containerfile), where
// Go's crypto/x509 looks for the system's roots on Linux. The roots come
// from a pinned module rather than from the build machine, so that the
// image trusts the same roots wherever it is built.
//
// A root that NSS trusts only with a constraint (a distrust-after date)
// is left out: PEM cannot carry the constraint, and trusting it without
// one would trust more than NSS does.
package main

import (
	"bufio"
	"encoding/pem"
	"fmt"
	"io"
	"iter"
	"os"

	"golang.org/x/crypto/x509roots/fallback/bundle"
)

func main() {
	if _, err := write(os.Stdout, bundle.Roots()); err != nil {
		fmt.Fprintln(os.Stderr, "cabundle:", err)
		os.Exit(1)
	}
}

// write writes each unconstrained root of roots to w as a PEM block, and
// returns how many it wrote.
func write(w io.Writer, roots iter.Seq[bundle.Root]) (int, error) {
	bw := bufio.NewWriter(w)
	n := 0
	for r := range roots {
		if r.Constraint != nil {
			continue
		}
		if err := pem.Encode(bw, &pem.Block{Type: "CERTIFICATE", Bytes: r.Certificate}); err != nil {
			return n, err
		}
		n++
	}
	if n == 0 {
		return 0, fmt.Errorf("the bundle has no unconstrained root")
	}
	return n, bw.Flush()
}
