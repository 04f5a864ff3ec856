package web

import "github.com/usherhq/usher/internal/seal"

// hkdfSalt separates Usher's web keys from any other use of the secret.
const hkdfSalt = "usher/web/v1"

// maxSealedChars bounds a sealed value before any decoding.
const maxSealedChars = maxChunks * maxChunkChars

// newSealer returns the sealer of one of web's purposes (a session, a
// sign-in in progress), opening what the previous secrets sealed too.
func newSealer(secret []byte, previous [][]byte, purpose string) (*seal.Sealer, error) {
	return seal.NewRotated(secret, previous, hkdfSalt, purpose, maxSealedChars)
}
