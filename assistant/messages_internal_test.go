package assistant

import (
	"testing"

	"github.com/usherhq/usher/assistant/model"
)

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

func TestModelFailure(t *testing.T) {
	for _, tc := range []struct {
		err  model.Error
		want string
	}{
		{model.Error{Message: "the model did not finish within 30s", Retryable: true}, "The model did not finish within 30s. Tried 3 times."},
		{model.Error{}, "The model failed."},
		{model.Error{Message: "HTTP 401: the model provider rejected the API key"}, "HTTP 401: the model provider rejected the API key."},
	} {
		if got := modelFailure(&tc.err); got != tc.want {
			t.Errorf("modelFailure(%q) = %q, want %q", tc.err.Message, got, tc.want)
		}
	}
}
