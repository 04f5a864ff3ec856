package broker

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// SealKeySize is the size in bytes of the key that seals private signing keys
// at rest (an AES-256 key).
const SealKeySize = 32

// ParseSealKey decodes a configured seal key: 32 bytes in base64 (standard or
// URL alphabet, padded or not). The error never repeats the input.
func ParseSealKey(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	for _, enc := range []*base64.Encoding{
		base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding,
	} {
		if k, err := enc.DecodeString(s); err == nil {
			if len(k) != SealKeySize {
				return nil, fmt.Errorf("broker: seal key is %d bytes, want %d", len(k), SealKeySize)
			}
			return k, nil
		}
	}
	return nil, errors.New("broker: seal key is not valid base64")
}

// LoadSealKey reads the seal key stored base64-encoded in the file at
// path, as LoadOrCreateSealKey does, but creates none: a missing file is
// an error that wraps fs.ErrNotExist.
func LoadSealKey(path string) ([]byte, error) {
	k, err := readSealKey(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("broker: seal key: %w", err)
	}
	return k, err
}

// LoadOrCreateSealKey reads the seal key stored base64-encoded in the file at
// path, or, when the file does not exist, creates it with a new random key
// (mode 0600, its directory 0700). It refuses a file that its group or
// others may read or write, because anyone who can read the seal key and the
// database can sign tokens. Two processes racing to create the file end up
// with the same key.
func LoadOrCreateSealKey(path string) ([]byte, error) {
	k, err := readSealKey(path)
	if !errors.Is(err, fs.ErrNotExist) {
		return k, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("broker: seal key directory: %w", err)
	}
	k = make([]byte, SealKeySize)
	rand.Read(k)
	if err := createExclusive(path, []byte(base64.StdEncoding.EncodeToString(k)+"\n")); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return readSealKey(path) // another process created it first
		}
		return nil, fmt.Errorf("broker: create seal key: %w", err)
	}
	return k, nil
}

// readSealKey reads and checks an existing seal key file.
func readSealKey(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		return nil, fmt.Errorf("broker: seal key: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("broker: seal key %s is not a regular file", path)
	}
	// Windows has no Unix permission bits; its ACLs are the operator's job.
	if runtime.GOOS != "windows" && fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("broker: seal key %s has mode %#o; it must be readable by its owner only (chmod 600)", path, fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("broker: seal key: %w", err)
	}
	k, err := ParseSealKey(string(b))
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, path)
	}
	return k, nil
}

// createExclusive writes data to a new file at path, mode 0600, atomically:
// it writes a temporary file and links it into place, so no reader ever sees
// a partial key, and fails with fs.ErrExist when path already exists.
func createExclusive(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".seal-key-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Link(tmp.Name(), path)
}

// sealVersion prefixes every sealed blob, so the format can change later.
const sealVersion = 1

// sealer encrypts private keys at rest with AES-256-GCM. The key is derived
// from the seal key with HKDF, so the same seal key could protect other
// secrets without the two uses ever sharing an AES key.
type sealer struct{ aead cipher.AEAD }

func newSealer(sealKey []byte) (*sealer, error) {
	if len(sealKey) != SealKeySize {
		return nil, fmt.Errorf("seal key is %d bytes, want %d", len(sealKey), SealKeySize)
	}
	k, err := hkdf.Key(sha256.New, sealKey, nil, "usher broker signing-key seal v1", 32)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(k)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &sealer{aead: aead}, nil
}

// sealAD is the additional data bound to a sealed key: its purpose and kid.
// A sealed blob moved to another row (another kid or purpose) fails to open.
// Purposes never contain NUL (see validPurpose), so the encoding is
// unambiguous.
func sealAD(purpose, kid string) []byte {
	return []byte("usher-signing-key\x00" + purpose + "\x00" + kid)
}

// seal encrypts plaintext as version || nonce || ciphertext-and-tag.
func (s *sealer) seal(plaintext []byte, purpose, kid string) []byte {
	out := make([]byte, 1+s.aead.NonceSize(), 1+s.aead.NonceSize()+len(plaintext)+s.aead.Overhead())
	out[0] = sealVersion
	rand.Read(out[1:])
	return s.aead.Seal(out, out[1:], plaintext, sealAD(purpose, kid))
}

// ErrUnseal is the one error for every way opening a sealed private key
// can fail: a wrong seal key and a tampered or moved blob are
// indistinguishable to AES-GCM.
var ErrUnseal = errors.New("cannot decrypt the private key: the seal key is not the one it was sealed with, or the stored key was altered or moved")

// open decrypts a blob made by seal for the same purpose and kid.
func (s *sealer) open(blob []byte, purpose, kid string) ([]byte, error) {
	n := s.aead.NonceSize()
	if len(blob) < 1+n+s.aead.Overhead() || blob[0] != sealVersion {
		return nil, ErrUnseal
	}
	pt, err := s.aead.Open(nil, blob[1:1+n], blob[1+n:], sealAD(purpose, kid))
	if err != nil {
		return nil, ErrUnseal
	}
	return pt, nil
}
