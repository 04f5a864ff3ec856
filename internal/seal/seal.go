package seal

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

// version leads every sealed value, so that the format can change.
const version byte = 1

// ErrSealed reports a value that does not open: malformed, forged, sealed
// for another purpose or under another secret, or expired. It says no
// more, on purpose.
var ErrSealed = errors.New("seal: sealed value is malformed, forged, for another purpose or expired")

// Sealer seals values for one purpose (a session, a sign-in in progress,
// a pending authorization request) under a key derived from the secret by
// HKDF-SHA256. The purpose is the key's HKDF info and the additional data,
// so a value sealed for one purpose never opens as another; the salt
// separates one component's keys from another's.
type Sealer struct {
	aead cipher.AEAD
	// previous open what the secrets the secret replaced sealed
	// (NewRotated).
	previous []cipher.AEAD
	purpose  []byte
	maxChars int
}

// New returns the sealer of purpose. Open refuses a value of more than
// maxChars characters before decoding it.
func New(secret []byte, salt, purpose string, maxChars int) (*Sealer, error) {
	return NewRotated(secret, nil, salt, purpose, maxChars)
}

// NewRotated is New for a secret that replaced the previous ones: it
// seals under secret, and opens what it or any of previous sealed, until
// those values expire.
func NewRotated(secret []byte, previous [][]byte, salt, purpose string, maxChars int) (*Sealer, error) {
	aead, err := aeadOf(secret, salt, purpose)
	if err != nil {
		return nil, err
	}
	s := &Sealer{aead: aead, purpose: []byte(purpose), maxChars: maxChars}
	for _, p := range previous {
		a, err := aeadOf(p, salt, purpose)
		if err != nil {
			return nil, err
		}
		s.previous = append(s.previous, a)
	}
	return s, nil
}

// aeadOf is the AES-256-GCM of purpose's key under secret.
func aeadOf(secret []byte, salt, purpose string) (cipher.AEAD, error) {
	key, err := hkdf.Key(sha256.New, secret, []byte(salt), purpose, 32)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// envelope is what is sealed: the value and its expiry.
type envelope struct {
	Expires int64           `json:"exp"`
	Value   json.RawMessage `json:"v"`
}

// Seal returns v, valid until expires, as base64url(version ‖ nonce ‖
// ciphertext ‖ tag). The random nonce makes every sealed value unique and
// unguessable.
func (s *Sealer) Seal(v any, expires time.Time) (string, error) {
	value, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	plain, err := json.Marshal(envelope{Expires: expires.Unix(), Value: value})
	if err != nil {
		return "", err
	}
	out := make([]byte, 1+s.aead.NonceSize(), 1+s.aead.NonceSize()+len(plain)+s.aead.Overhead())
	out[0] = version
	_, _ = rand.Read(out[1:]) // crypto/rand.Read never fails
	out = s.aead.Seal(out, out[1:], plain, s.purpose)
	return base64.RawURLEncoding.EncodeToString(out), nil
}

// Open authenticates and decrypts raw and, unless it has expired at now,
// decodes its value into v; ErrSealed otherwise.
func (s *Sealer) Open(raw string, now time.Time, v any) error {
	if raw == "" || len(raw) > s.maxChars {
		return ErrSealed
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(raw)
	n := s.aead.NonceSize()
	if err != nil || len(b) < 1+n+s.aead.Overhead() || b[0] != version {
		return ErrSealed
	}
	plain, err := s.aead.Open(nil, b[1:1+n], b[1+n:], s.purpose)
	for i := 0; err != nil && i < len(s.previous); i++ {
		plain, err = s.previous[i].Open(nil, b[1:1+n], b[1+n:], s.purpose)
	}
	if err != nil {
		return ErrSealed
	}
	var env envelope
	if err := json.Unmarshal(plain, &env); err != nil || !now.Before(time.Unix(env.Expires, 0)) {
		return ErrSealed
	}
	if err := json.Unmarshal(env.Value, v); err != nil {
		return ErrSealed
	}
	return nil
}
