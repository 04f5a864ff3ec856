package seal

import (
	"strings"
	"testing"
	"time"
)

func TestSealer(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	a, _ := New(secret, "usher/test/v1", "one purpose", 4096)
	b, _ := New(secret, "usher/test/v1", "another purpose", 4096)
	now := time.Unix(1_800_000_000, 0)
	raw, err := a.Seal(map[string]string{"k": "v"}, now.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]string
	if err := a.Open(raw, now, &got); err != nil || got["k"] != "v" {
		t.Fatalf("open: %v %v", got, err)
	}
	again, _ := a.Seal(map[string]string{"k": "v"}, now.Add(time.Minute))
	if again == raw {
		t.Error("two seals of one value are equal: the nonce is not fresh")
	}
	for name, tt := range map[string]struct {
		s   *Sealer
		raw string
		at  time.Time
	}{
		"expired":            {a, raw, now.Add(time.Minute)},
		"other purpose":      {b, raw, now},
		"empty":              {a, "", now},
		"not base64":         {a, "***", now},
		"short":              {a, raw[:10], now},
		"other version":      {a, "Ag" + raw[2:], now},
		"too long to decode": {a, strings.Repeat("A", 4097), now},
	} {
		if err := tt.s.Open(tt.raw, tt.at, &got); err == nil {
			t.Errorf("%s: opened", name)
		}
	}
}

// TestNewRotated checks a sealer whose secret replaced another: it opens
// what either sealed (not for another purpose, not expired), seals under
// the new secret only, and a sealer of the new secret alone does not open
// what the old one sealed.
func TestNewRotated(t *testing.T) {
	oldSecret, newSecret := []byte(strings.Repeat("o", 32)), []byte(strings.Repeat("n", 32))
	now := time.Unix(1_800_000_000, 0)
	before, _ := New(oldSecret, "usher/test/v1", "a purpose", 4096)
	rotated, err := NewRotated(newSecret, [][]byte{[]byte(strings.Repeat("x", 32)), oldSecret}, "usher/test/v1", "a purpose", 4096)
	if err != nil {
		t.Fatal(err)
	}
	alone, _ := New(newSecret, "usher/test/v1", "a purpose", 4096)
	other, _ := NewRotated(newSecret, [][]byte{oldSecret}, "usher/test/v1", "another purpose", 4096)
	sealedBefore, _ := before.Seal("v", now.Add(time.Minute))
	var got string
	if err := rotated.Open(sealedBefore, now, &got); err != nil || got != "v" {
		t.Errorf("the rotated sealer opening the old secret's value: %q, %v", got, err)
	}
	if err := alone.Open(sealedBefore, now, &got); err != ErrSealed {
		t.Errorf("the new secret alone opening the old one's value: %v, want ErrSealed", err)
	}
	if err := other.Open(sealedBefore, now, &got); err != ErrSealed {
		t.Errorf("the old secret's value opened for another purpose: %v, want ErrSealed", err)
	}
	if err := rotated.Open(sealedBefore, now.Add(time.Minute), &got); err != ErrSealed {
		t.Errorf("the old secret's value opened after it expired: %v, want ErrSealed", err)
	}
	sealedAfter, _ := rotated.Seal("w", now.Add(time.Minute))
	if err := alone.Open(sealedAfter, now, &got); err != nil || got != "w" {
		t.Errorf("the new secret alone opening the rotated sealer's value: %q, %v; want it sealed under the new secret", got, err)
	}
	if err := before.Open(sealedAfter, now, &got); err != ErrSealed {
		t.Errorf("the old secret opening the rotated sealer's value: %v, want ErrSealed", err)
	}
}
