package assistant

import "testing"

func TestByteSize(t *testing.T) {
	for n, want := range map[int]string{
		0: "0 bytes", 1023: "1023 bytes", 1024: "1 KiB", 64 << 10: "64 KiB", 70000: "68.4 KiB",
		1<<20 - 1: "1024 KiB", 3 << 19: "1.5 MiB",
	} {
		if got := byteSize(n); got != want {
			t.Errorf("byteSize(%d) = %q, want %q", n, got, want)
		}
	}
}
