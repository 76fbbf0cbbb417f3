package trainer

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"unsafe"
)

// Region indexes the shared-memory file's regions.
const (
	RegionTheta  = 0 // node → trainer: the parameters to compute on
	RegionUpdate = 1 // trainer → node: the gradient (or a round's pseudo-gradient)
	RegionEval   = 2 // node → trainer: the parameters to evaluate
	numRegions   = 3
)

// Shm is the shared-memory file of a node's trainers: three regions of P
// little-endian float32 each, region i at byte 4·P·i, mapped shared by
// the node and its trainer.
type Shm struct {
	Path string
	P    int
	data []byte
	regs [numRegions][]float32
}

// NewShm creates the shared-memory file of the trainer socket sock for p
// parameters under dir ("" = /dev/shm when it exists, else the socket's
// folder): dssp-trainer-<a hash of the socket's path>-<128 random bits>.shm,
// created exclusively (O_EXCL, no symlink followed), mode 0600. Its name
// is in the welcome, so no other Unix user can create the file first (in
// the world-writable /dev/shm a predictable name could be taken, and every
// trainer then refused). Files of this socket's earlier runs that this
// user owns (a node killed before it removed its file) are removed first.
func NewShm(dir, sock string, p int) (*Shm, error) {
	if dir == "" {
		dir = filepath.Dir(sock)
		if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
			dir = "/dev/shm"
		}
	}
	abs, err := filepath.Abs(sock)
	if err != nil {
		abs = sock
	}
	h := fnv.New64a()
	h.Write([]byte(abs))
	prefix := filepath.Join(dir, fmt.Sprintf("dssp-trainer-%016x-", h.Sum64()))
	if old, _ := filepath.Glob(prefix + "*.shm"); len(old) > 0 {
		for _, f := range old {
			if fi, err := os.Lstat(f); err == nil && fi.Mode().IsRegular() && ownedByMe(fi) {
				os.Remove(f)
			}
		}
	}
	var last error
	for range 4 { // a collision of 128 random bits is not expected once
		path := prefix + rand.Text() + ".shm"
		s, err := CreateShm(path, p)
		if err == nil {
			return s, nil
		}
		last = err
	}
	return nil, last
}

// ShmError is why the shared-memory file could not be made: the file, its
// owner when it exists, and the error.
type ShmError struct {
	Path  string
	Owner string // "" when the file does not exist
	Err   error
}

func (e *ShmError) Error() string {
	if e.Owner != "" {
		return fmt.Sprintf("trainer: shared memory %s: %v (the file exists, owned by %s)", e.Path, e.Err, e.Owner)
	}
	return fmt.Sprintf("trainer: shared memory %s: %v", e.Path, e.Err)
}

func (e *ShmError) Unwrap() error { return e.Err }

// owner names the owner of the file at path ("" when there is none).
func owner(path string) string {
	fi, err := os.Lstat(path)
	if err != nil {
		return ""
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "another user"
	}
	uid := strconv.FormatUint(uint64(st.Uid), 10)
	if u, err := user.LookupId(uid); err == nil {
		return fmt.Sprintf("user %s (uid %s)", u.Username, uid)
	}
	return "uid " + uid
}

func ownedByMe(fi os.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Geteuid()
}

// CreateShm creates the shared-memory file at path for p parameters,
// exclusively (a file there is a *ShmError naming its owner), mode 0600,
// and maps it.
func CreateShm(path string, p int) (*Shm, error) {
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		return nil, fmt.Errorf("trainer: shared memory holds little-endian float32; this host is big-endian")
	}
	if p <= 0 || p > (1<<40)/(4*numRegions) {
		return nil, fmt.Errorf("trainer: shared memory for %d parameters", p)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, &ShmError{Path: path, Owner: owner(path), Err: err}
	}
	defer f.Close()
	size := int64(4 * numRegions * p)
	if err := f.Truncate(size); err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("trainer: shared memory %s: size %d: %w", path, size, err)
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("trainer: shared memory %s: mmap %d bytes: %w", path, size, err)
	}
	s := &Shm{Path: path, P: p, data: data}
	all := unsafe.Slice((*float32)(unsafe.Pointer(&data[0])), numRegions*p)
	for i := range s.regs {
		s.regs[i] = all[i*p : (i+1)*p : (i+1)*p]
	}
	return s, nil
}

// Bytes is the file's size.
func (s *Shm) Bytes() int64 { return int64(len(s.data)) }

// Region is region i (RegionTheta, RegionUpdate, RegionEval) as P float32.
func (s *Shm) Region(i int) []float32 { return s.regs[i] }

// Close unmaps the file and removes it; the regions must not be used
// after.
func (s *Shm) Close() error {
	s.regs = [numRegions][]float32{}
	err := syscall.Munmap(s.data)
	s.data = nil
	if rerr := os.Remove(s.Path); err == nil && !os.IsNotExist(rerr) {
		err = rerr
	}
	return err
}
