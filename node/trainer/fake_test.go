package trainer

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"net"
	"os"
	"syscall"
	"testing"
	"unsafe"
)

// fakeTrainer is a trainer written in Go for the tests: it speaks the
// protocol over a real Unix socket and maps the shared memory as a
// Python trainer does.
type fakeTrainer struct {
	t       *testing.T
	c       net.Conn
	welcome map[string]any
	regs    [3][]float32
	data    []byte
	// computes, when set before serve, gets every compute message.
	computes chan map[string]any
}

func mlpLayout() []Tensor {
	return []Tensor{
		{Name: "fc1.weight", Shape: []int{4, 3}, Dtype: "float32"},
		{Name: "fc1.bias", Shape: []int{4}, Dtype: "float32"},
		{Name: "fc2.weight", Shape: []int{2, 4}, Dtype: "float32"},
		{Name: "fc2.bias", Shape: []int{2}, Dtype: "float32"},
	}
}

// dial connects and says hello with layout; the reply (welcome or error)
// is returned decoded.
func dial(t *testing.T, sock string, layout []Tensor) (*fakeTrainer, map[string]any) {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeTrainer{t: t, c: c}
	t.Cleanup(f.close)
	f.send(map[string]any{"op": "hello", "version": Version, "role": "train", "layout": layout})
	rep := f.recv()
	if rep["op"] == "welcome" {
		f.welcome = rep
		f.mapShm(rep["shm"].(string), int(rep["params"].(float64)))
	}
	return f, rep
}

func (f *fakeTrainer) mapShm(path string, p int) {
	fd, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		f.t.Fatal(err)
	}
	defer fd.Close()
	f.data, err = syscall.Mmap(int(fd.Fd()), 0, 12*p, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		f.t.Fatal(err)
	}
	all := unsafe.Slice((*float32)(unsafe.Pointer(&f.data[0])), 3*p)
	for i := range f.regs {
		f.regs[i] = all[i*p : (i+1)*p]
	}
}

func (f *fakeTrainer) close() {
	f.c.Close()
	if f.data != nil {
		syscall.Munmap(f.data)
		f.data = nil
	}
}

func (f *fakeTrainer) sendRaw(b []byte) {
	if _, err := WriteFrame(f.c, nil, b); err != nil {
		f.t.Log("fake trainer send:", err)
	}
}

func (f *fakeTrainer) send(m any) {
	b, err := json.Marshal(m)
	if err != nil {
		f.t.Fatal(err)
	}
	f.sendRaw(b)
}

// recv reads one message; nil at EOF.
func (f *fakeTrainer) recv() map[string]any {
	b, err := ReadFrame(f.c, nil, DefaultMaxFrame)
	if err != nil {
		return nil
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		f.t.Errorf("node sent bad JSON %q: %v", b, err)
	}
	return m
}

// serve answers compute with the gradient of ½‖θ − target‖² (θ − target)
// and evaluate with the accuracy 1/(1+‖θ_eval − target‖²), until stop or
// EOF; it returns the stop reason ("" at EOF).
func (f *fakeTrainer) serve(target []float32) string {
	for {
		m := f.recv()
		if m == nil {
			return ""
		}
		switch m["op"] {
		case "compute":
			theta, upd := f.regs[RegionTheta], f.regs[RegionUpdate]
			var loss float64
			for i := range theta {
				d := theta[i] - target[i]
				upd[i] = d
				loss += 0.5 * float64(d) * float64(d)
			}
			n := (m["hi"].(float64) - m["lo"].(float64)) * m["local_steps"].(float64)
			if f.computes != nil {
				f.computes <- m
			}
			f.send(map[string]any{"op": "update", "iter": m["iter"], "loss": loss, "samples": n})
		case "evaluate":
			var d2 float64
			for i, v := range f.regs[RegionEval] {
				d2 += float64(v-target[i]) * float64(v-target[i])
			}
			f.send(map[string]any{"op": "evaluated", "seq": m["seq"], "accuracy": 1 / (1 + d2), "loss": d2, "samples": 100})
		case "stop":
			f.c.Close()
			return m["reason"].(string)
		default:
			f.t.Errorf("unexpected message %v", m)
			return ""
		}
	}
}

// le32 reads float32 i of region r straight from the file's bytes.
func le32(b []byte, p, r, i int) float32 {
	return math.Float32frombits(binary.LittleEndian.Uint32(b[4*(r*p+i):]))
}
