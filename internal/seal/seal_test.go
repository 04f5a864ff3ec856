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
