package devoidc

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"sync"
	"time"
)

var errTooManyCodes = errors.New("too many outstanding authorization codes")

// grant is what an authorization code stands for.
type grant struct {
	clientID    string
	redirectURI string
	challenge   string // PKCE S256 code_challenge
	nonce       string
	scope       string // granted scopes, space-separated
	user        string
	groups      []string // the groups the person named on the form
	authTime    time.Time
	expires     time.Time
}

// codeStore keeps outstanding authorization codes in memory, which is why
// the development provider serves a single process. Codes are kept by
// their SHA-256, so a lookup never compares the secret itself.
type codeStore struct {
	mu    sync.Mutex
	max   int
	codes map[[sha256.Size]byte]grant
}

func newCodeStore(limit int) *codeStore {
	return &codeStore{max: limit, codes: make(map[[sha256.Size]byte]grant)}
}

// put stores g under a new random code, after dropping expired codes.
func (s *codeStore) put(now time.Time, g grant) (string, error) {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	code := base64.RawURLEncoding.EncodeToString(b[:])
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, v := range s.codes {
		if !now.Before(v.expires) {
			delete(s.codes, k)
		}
	}
	if len(s.codes) >= s.max {
		return "", errTooManyCodes
	}
	s.codes[sha256.Sum256([]byte(code))] = g
	return code, nil
}

// take removes code and returns its grant unless it has expired: a code
// is good for one attempt, whatever the outcome.
func (s *codeStore) take(now time.Time, code string) (grant, bool) {
	key := sha256.Sum256([]byte(code))
	s.mu.Lock()
	defer s.mu.Unlock()
	g, ok := s.codes[key]
	delete(s.codes, key)
	return g, ok && now.Before(g.expires)
}
