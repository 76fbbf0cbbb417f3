package mesh

import (
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// KeySize is the length of the mesh key in bytes.
const KeySize = 32

// MeshKey is the one secret of a mesh; everything else is derived from it.
type MeshKey [KeySize]byte

// GenerateKey returns a fresh random mesh key.
func GenerateKey() (MeshKey, error) {
	var k MeshKey
	if _, err := io.ReadFull(rand.Reader, k[:]); err != nil {
		return MeshKey{}, fmt.Errorf("mesh: generate key: %w", err)
	}
	return k, nil
}

// WriteKeyFile writes a new random key to path with mode 0600. It refuses to
// overwrite an existing file, so an old mesh's key is never lost by accident.
func WriteKeyFile(path string) error {
	k, err := GenerateKey()
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("mesh: key file %s already exists; refusing to overwrite it", path)
	}
	if err != nil {
		return fmt.Errorf("mesh: create key file: %w", err)
	}
	if _, err := f.Write(k[:]); err != nil {
		f.Close()
		os.Remove(path)
		return fmt.Errorf("mesh: write key file %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		os.Remove(path)
		return fmt.Errorf("mesh: write key file %s: %w", path, err)
	}
	return nil
}

// LoadKeyFile reads a key written by WriteKeyFile. It refuses a file that
// group or others may read or write, and one that is not exactly KeySize
// bytes; the error names the file and what is wrong with it.
func LoadKeyFile(path string) (MeshKey, error) {
	st, err := os.Stat(path)
	if err != nil {
		return MeshKey{}, fmt.Errorf("%w: %v", ErrBadKey, err)
	}
	if !st.Mode().IsRegular() {
		return MeshKey{}, fmt.Errorf("%w: %s is not a regular file", ErrBadKey, path)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return MeshKey{}, fmt.Errorf("%w: %s has mode %04o; group and others must have no access (chmod 600 %s)", ErrBadKey, path, perm, path)
	}
	if st.Size() != KeySize {
		return MeshKey{}, fmt.Errorf("%w: %s is %d bytes, want exactly %d (create one with `dssp keygen`)", ErrBadKey, path, st.Size(), KeySize)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return MeshKey{}, fmt.Errorf("%w: %v", ErrBadKey, err)
	}
	if len(b) != KeySize {
		return MeshKey{}, fmt.Errorf("%w: %s is %d bytes, want exactly %d", ErrBadKey, path, len(b), KeySize)
	}
	var k MeshKey
	copy(k[:], b)
	return k, nil
}

// HKDF info strings; changing one splits meshes built by different versions.
const (
	infoGossip   = "dssp mesh v1 memberlist gossip key"
	infoCA       = "dssp mesh v1 ca ed25519 seed"
	infoOperator = "dssp mesh v1 operator hmac key" // operator.go
)

func (k MeshKey) derive(info string, n int) []byte {
	out, err := hkdf.Key(sha256.New, k[:], nil, info, n)
	if err != nil {
		// Only possible for n > 255*32, which no caller asks for.
		panic("mesh: hkdf: " + err.Error())
	}
	return out
}
