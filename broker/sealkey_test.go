package broker

import (
	"bytes"
	"encoding/base64"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

func TestLoadOrCreateSealKey(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "data", "nested", "broker.key")
	k, err := LoadOrCreateSealKey(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(k) != SealKeySize || bytes.Equal(k, make([]byte, SealKeySize)) {
		t.Fatalf("key of %d bytes: %x", len(k), k)
	}
	if runtime.GOOS != "windows" {
		if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
			t.Errorf("key file mode %#o, want 0600", fi.Mode().Perm())
		}
		if fi, _ := os.Stat(filepath.Dir(path)); fi.Mode().Perm() != 0o700 {
			t.Errorf("key directory mode %#o, want 0700", fi.Mode().Perm())
		}
	}
	again, err := LoadOrCreateSealKey(path)
	if err != nil || !bytes.Equal(again, k) {
		t.Fatalf("second load: %v; same key %v", err, bytes.Equal(again, k))
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("%d files beside the key, want none", len(entries)-1)
	}
}

// TestLoadSealKey: LoadSealKey reads the key LoadOrCreateSealKey made,
// and of a missing file makes nothing and says it does not exist.
func TestLoadSealKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	missing := filepath.Join(dir, "data", "broker.key")
	if _, err := LoadSealKey(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("LoadSealKey of a missing file = %v, want fs.ErrNotExist", err)
	}
	if _, err := os.Stat(filepath.Dir(missing)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("LoadSealKey of a missing file made its directory (%v)", err)
	}
	path := filepath.Join(dir, "broker.key")
	k, err := LoadOrCreateSealKey(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := LoadSealKey(path); err != nil || !bytes.Equal(got, k) {
		t.Errorf("LoadSealKey = %x, %v; want the key made", got, err)
	}
}

func TestLoadOrCreateSealKeyRace(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "broker.key")
	keys := make([][]byte, 8)
	var wg sync.WaitGroup
	for i := range keys {
		wg.Go(func() {
			k, err := LoadOrCreateSealKey(path)
			if err != nil {
				t.Error(err)
			}
			keys[i] = k
		})
	}
	wg.Wait()
	for _, k := range keys[1:] {
		if !bytes.Equal(k, keys[0]) {
			t.Fatal("racing creators got different keys")
		}
	}
}

func TestLoadOrCreateSealKeyRefuses(t *testing.T) {
	t.Parallel()
	if runtime.GOOS == "windows" {
		t.Skip("no Unix permissions")
	}
	good := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, SealKeySize))
	tests := []struct {
		name    string
		content string
		mode    os.FileMode
		want    string
	}{
		{"world readable", good, 0o644, "chmod 600"},
		{"group readable", good, 0o640, "chmod 600"},
		{"group writable", good, 0o620, "chmod 600"},
		{"too short", base64.StdEncoding.EncodeToString([]byte("short")), 0o600, "bytes"},
		{"not base64", "not a key!", 0o600, "base64"},
		{"empty", "", 0o600, "bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "broker.key")
			if err := os.WriteFile(path, []byte(tt.content), tt.mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, tt.mode); err != nil { // past the umask
				t.Fatal(err)
			}
			_, err := LoadOrCreateSealKey(path)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("LoadOrCreateSealKey = %v, want an error mentioning %q", err, tt.want)
			}
			if got, _ := os.ReadFile(path); string(got) != tt.content {
				t.Fatal("the refused file was changed")
			}
		})
	}
	t.Run("directory", func(t *testing.T) {
		if _, err := LoadOrCreateSealKey(t.TempDir()); err == nil {
			t.Fatal("a directory was accepted as a key file")
		}
	})
}

func TestParseSealKey(t *testing.T) {
	t.Parallel()
	raw := []byte("0123456789abcdef0123456789abcd\xfe\xff")
	for _, s := range []string{
		base64.StdEncoding.EncodeToString(raw),
		base64.RawStdEncoding.EncodeToString(raw),
		base64.URLEncoding.EncodeToString(raw),
		base64.RawURLEncoding.EncodeToString(raw),
		" " + base64.StdEncoding.EncodeToString(raw) + "\n",
	} {
		k, err := ParseSealKey(s)
		if err != nil || !bytes.Equal(k, raw) {
			t.Errorf("ParseSealKey(%q) = %x, %v", s, k, err)
		}
	}
	secret := base64.StdEncoding.EncodeToString([]byte("sixteen byte key"))
	for _, s := range []string{secret, "", "!!!!", base64.StdEncoding.EncodeToString(make([]byte, 33))} {
		_, err := ParseSealKey(s)
		if err == nil {
			t.Errorf("ParseSealKey(%q) succeeded", s)
		} else if s != "" && strings.Contains(err.Error(), s) {
			t.Errorf("the error repeats the key: %v", err)
		}
	}
}
