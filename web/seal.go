package web

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"time"
)

// sealVersion leads every sealed value, so that the format can change.
const sealVersion byte = 1

// hkdfSalt separates Usher's web keys from any other use of the secret.
const hkdfSalt = "usher/web/v1"

// maxSealedChars bounds a sealed value before any decoding.
const maxSealedChars = maxChunks * maxChunkChars

var errSealed = errors.New("sealed value is malformed, forged, for another purpose or expired")

// sealer seals values for one purpose (a session, a sign-in in progress)
// with AES-256-GCM under a key derived from the secret by HKDF-SHA256.
// The purpose is the key's HKDF info and the additional data, so a value
// sealed for one purpose never opens as another.
type sealer struct {
	aead    cipher.AEAD
	purpose []byte
}

func newSealer(secret []byte, purpose string) (*sealer, error) {
	key, err := hkdf.Key(sha256.New, secret, []byte(hkdfSalt), purpose, 32)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &sealer{aead: aead, purpose: []byte(purpose)}, nil
}

// envelope is what is sealed: the value and its expiry.
type envelope struct {
	Expires int64           `json:"exp"`
	Value   json.RawMessage `json:"v"`
}

// seal returns v, valid until expires, as base64url(version ‖ nonce ‖
// ciphertext ‖ tag).
func (s *sealer) seal(v any, expires time.Time) (string, error) {
	value, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	plain, err := json.Marshal(envelope{Expires: expires.Unix(), Value: value})
	if err != nil {
		return "", err
	}
	out := make([]byte, 1+s.aead.NonceSize(), 1+s.aead.NonceSize()+len(plain)+s.aead.Overhead())
	out[0] = sealVersion
	_, _ = rand.Read(out[1:]) // crypto/rand.Read never fails
	out = s.aead.Seal(out, out[1:], plain, s.purpose)
	return base64.RawURLEncoding.EncodeToString(out), nil
}

// open decrypts and authenticates raw and, unless it has expired at now,
// decodes its value into v.
func (s *sealer) open(raw string, now time.Time, v any) error {
	if raw == "" || len(raw) > maxSealedChars {
		return errSealed
	}
	b, err := base64.RawURLEncoding.DecodeString(raw)
	n := s.aead.NonceSize()
	if err != nil || len(b) < 1+n+s.aead.Overhead() || b[0] != sealVersion {
		return errSealed
	}
	plain, err := s.aead.Open(nil, b[1:1+n], b[1+n:], s.purpose)
	if err != nil {
		return errSealed
	}
	var env envelope
	if err := json.Unmarshal(plain, &env); err != nil || !now.Before(time.Unix(env.Expires, 0)) {
		return errSealed
	}
	if err := json.Unmarshal(env.Value, v); err != nil {
		return errSealed
	}
	return nil
}
