package main

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
)

// usherCommand runs one usher command and returns its standard output.
func usherCommand(ctx context.Context, usher string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, usher, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("usher %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
}
