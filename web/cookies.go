package web

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Cookie names. Over https they carry the __Host- prefix: the browser then
// accepts them only Secure, for Path=/ and without a Domain, so no sibling
// subdomain can plant or shadow them.
const (
	sessionCookie = "usher_session"
	loginCookie   = "usher_login"
	hostPrefix    = "__Host-"
)

// A sealed session may exceed what one cookie holds (an Entra principal
// lists up to 200 group ids): it is split over up to maxChunks cookies,
// name, name_1, name_2, name_3, of at most maxChunkChars each — below the
// 4096 bytes browsers allow for a cookie's name and value.
const (
	maxChunks     = 4
	maxChunkChars = 3800
)

var errTooLarge = errors.New("the sealed session is larger than the cookies can hold")

// cookies writes and reads the cookies of one public URL.
type cookies struct {
	secure bool
	prefix string
}

func newCookies(publicURL string) cookies {
	if insecureLoopback(publicURL) {
		return cookies{}
	}
	return cookies{secure: true, prefix: hostPrefix}
}

func (c cookies) name(base string, chunk int) string {
	if chunk == 0 {
		return c.prefix + base
	}
	return c.prefix + base + "_" + strconv.Itoa(chunk)
}

// cookie is one of ours: HttpOnly, SameSite=Lax, Path=/, no Domain,
// Secure unless on loopback http.
func (c cookies) cookie(name, value string, maxAge time.Duration) *http.Cookie {
	ck := &http.Cookie{
		Name:     name,
		Value:    value,
		Path:     "/",
		HttpOnly: true,
		Secure:   c.secure,
		SameSite: http.SameSiteLaxMode,
	}
	if maxAge > 0 {
		ck.MaxAge = int(maxAge / time.Second)
	} else {
		ck.MaxAge = -1 // Max-Age=0: delete it now
	}
	return ck
}

// set writes value under base, split into chunks, and deletes the chunks
// of a longer earlier value that r still carries.
func (c cookies) set(w http.ResponseWriter, r *http.Request, base, value string, maxAge time.Duration) error {
	if len(value) > maxChunks*maxChunkChars {
		return errTooLarge
	}
	i := 0
	for ; i == 0 || len(value) > 0; i++ {
		part := value[:min(len(value), maxChunkChars)]
		value = value[len(part):]
		http.SetCookie(w, c.cookie(c.name(base, i), part, maxAge))
	}
	for ; i < maxChunks; i++ {
		if _, err := r.Cookie(c.name(base, i)); err == nil {
			http.SetCookie(w, c.cookie(c.name(base, i), "", 0))
		}
	}
	return nil
}

// get returns the value under base, its chunks joined; "" when r has none.
func (c cookies) get(r *http.Request, base string) string {
	first, err := r.Cookie(c.name(base, 0))
	if err != nil {
		return ""
	}
	var b strings.Builder
	b.WriteString(first.Value)
	for i := 1; i < maxChunks; i++ {
		ck, err := r.Cookie(c.name(base, i))
		if err != nil {
			break
		}
		b.WriteString(ck.Value)
	}
	return b.String()
}

// has reports whether r carries any chunk of base.
func (c cookies) has(r *http.Request, base string) bool {
	for i := range maxChunks {
		if _, err := r.Cookie(c.name(base, i)); err == nil {
			return true
		}
	}
	return false
}

// clear deletes every chunk of base that r carries (the first always).
func (c cookies) clear(w http.ResponseWriter, r *http.Request, base string) {
	for i := range maxChunks {
		if _, err := r.Cookie(c.name(base, i)); i == 0 || err == nil {
			http.SetCookie(w, c.cookie(c.name(base, i), "", 0))
		}
	}
}
