package trainer

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
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

// ShmPath is where the shared-memory file of the trainer socket sock
// lies: under dir ("" = /dev/shm when it exists, else the socket's
// folder), named after a hash of the socket's absolute path, so a
// restarted node replaces the file its last run left.
func ShmPath(dir, sock string) string {
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
	return filepath.Join(dir, fmt.Sprintf("dssp-trainer-%016x.shm", h.Sum64()))
}

// CreateShm creates (replacing any file there) the shared-memory file at
// path for p parameters, mode 0600, and maps it.
func CreateShm(path string, p int) (*Shm, error) {
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		return nil, fmt.Errorf("trainer: shared memory holds little-endian float32; this host is big-endian")
	}
	if p <= 0 || p > (1<<40)/(4*numRegions) {
		return nil, fmt.Errorf("trainer: shared memory for %d parameters", p)
	}
	os.Remove(path)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("trainer: shared memory %s: %w", path, err)
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
