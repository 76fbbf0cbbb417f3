package test

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"dsspmesh/node/launch"
	"dsspmesh/nodeclient"
)

// runFail runs the binary, expects a non-zero exit within the limit and
// returns the last line of stderr, which must be the one-line error.
func runFail(t *testing.T, limit time.Duration, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, Binary(t), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("dssp %v: still running after %v", args, limit)
	}
	if err == nil {
		t.Fatalf("dssp %v: exit 0, want an error", args)
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, "dssp: ") {
		t.Fatalf("dssp %v: last stderr line is not the error: %q", args, stderr.String())
	}
	return last
}

func nodeArgs(t *testing.T, key string, ports []int, extra ...string) []string {
	args := []string{"node", "--data-dir", filepath.Join(t.TempDir(), "data"), "--log-level", "error",
		"--gossip-port", strconv.Itoa(ports[0]), "--quic-port", strconv.Itoa(ports[1]),
		"--http-addr", "127.0.0.1:" + strconv.Itoa(ports[2])}
	if key == "" {
		args = append(args, "--insecure")
	} else {
		args = append(args, "--key", key)
	}
	return append(args, extra...)
}

func freePorts(t *testing.T) []int {
	p, err := launch.FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func keygen(t *testing.T) string {
	path := filepath.Join(t.TempDir(), "mesh.key")
	if out, err := exec.Command(Binary(t), "keygen", "--out", path).CombinedOutput(); err != nil {
		t.Fatalf("keygen: %v %s", err, out)
	}
	return path
}

func TestBadInputIsOneClearLine(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test; skipped with -short")
	}
	key := keygen(t)
	file := filepath.Join(t.TempDir(), "not-a-dir")
	os.WriteFile(file, nil, 0o600)

	t.Run("unknown model", func(t *testing.T) {
		got := runFail(t, 20*time.Second, nodeArgs(t, key, freePorts(t), "--model", "resnet")...)
		if !strings.Contains(got, `--model "resnet" unknown`) {
			t.Fatal(got)
		}
	})
	t.Run("unknown paradigm", func(t *testing.T) {
		got := runFail(t, 20*time.Second, nodeArgs(t, key, freePorts(t), "--paradigm", "fastest")...)
		if !strings.Contains(got, `--paradigm "fastest" unknown`) {
			t.Fatal(got)
		}
	})
	t.Run("join a dead address", func(t *testing.T) {
		dead := freePorts(t)[0]
		got := runFail(t, 30*time.Second, nodeArgs(t, key, freePorts(t), "--join", "127.0.0.1:"+strconv.Itoa(dead), "--join-timeout", "2s")...)
		if !strings.Contains(got, "no seed answered within 2s") {
			t.Fatal(got)
		}
	})
	t.Run("port in use", func(t *testing.T) {
		ports := freePorts(t)
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(ports[2]))
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		got := runFail(t, 20*time.Second, nodeArgs(t, key, ports)...)
		if !strings.Contains(got, "--http-addr 127.0.0.1:"+strconv.Itoa(ports[2])+": address already in use") {
			t.Fatal(got)
		}
	})
	t.Run("data dir is a file", func(t *testing.T) {
		args := nodeArgs(t, key, freePorts(t))
		args[2] = file
		got := runFail(t, 20*time.Second, args...)
		if !strings.Contains(got, file+" is not a directory") {
			t.Fatal(got)
		}
	})
	t.Run("no key", func(t *testing.T) {
		args := nodeArgs(t, key, freePorts(t))
		got := runFail(t, 20*time.Second, append(args[:len(args)-2], "--log-level", "error")...)
		if !strings.Contains(got, "--key FILE is required") {
			t.Fatal(got)
		}
	})
	// A bad number or a bad key is refused before anything is written: no
	// data dir, no node id left behind.
	bad := filepath.Join(t.TempDir(), "bad.key")
	os.WriteFile(bad, []byte("garbage"), 0o600)
	for _, tc := range []struct {
		name, key, want string
		extra           []string
	}{
		{"slowdown inf", key, "--slowdown +Inf: must be a finite number in [1, 1000]", []string{"--slowdown", "inf"}},
		{"slowdown 1e12", key, "--slowdown 1e+12: must be a finite number in [1, 1000]", []string{"--slowdown", "1e12"}},
		{"lr inf", key, "--lr +Inf: must be a finite number in (0, 100]", []string{"--lr", "inf"}},
		{"compute delay", key, "--compute-delay 1000000h0m0s: must be in [0s, 1h0m0s]", []string{"--compute-delay", "1000000h"}},
		{"bad key", bad, "bad.key is 7 bytes, want exactly 32", nil},
	} {
		t.Run(tc.name+" leaves no data dir", func(t *testing.T) {
			args := nodeArgs(t, tc.key, freePorts(t), tc.extra...)
			got := runFail(t, 20*time.Second, args...)
			if !strings.Contains(got, tc.want) {
				t.Fatal(got)
			}
			if _, err := os.Stat(args[2]); !os.IsNotExist(err) {
				t.Fatalf("%s: data dir %s exists after the refusal (%v)", got, args[2], err)
			}
		})
	}
	t.Run("wrong mesh key", func(t *testing.T) {
		c := NewCluster(t, 1, []string{"--train=false", "--log-level", "error"}, nil)
		c.Start(0)
		got := runFail(t, 40*time.Second, nodeArgs(t, keygen(t), freePorts(t), "--join", c.Mesh.Procs[0].Gossip, "--join-timeout", "3s")...)
		if !strings.Contains(got, "no seed answered") || !strings.Contains(got, "same mesh key") {
			t.Fatal(got)
		}
	})
}

// TestBadInputAtTheDoor: dssp train, dssp up and dssp eval refuse each bad
// value by its flag's name, at once (cmd/dssp TestDoorRefusesByName covers
// every case in process; these run the binary).
func TestBadInputAtTheDoor(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary; skipped with -short")
	}
	file := filepath.Join(t.TempDir(), "not-a-dir")
	os.WriteFile(file, nil, 0o600)
	report := filepath.Join(file, "report")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"train", "--batch", "1000000000"}, "--batch 1000000000: must be in [1, 65536]"},
		{[]string{"train", "--lr", "inf"}, "--lr +Inf: must be a finite number in (0, 100]"},
		{[]string{"train", "--lr", "1e40"}, "--lr 1e+40: must be a finite number in (0, 100]"},
		{[]string{"train", "--weight-decay", "inf"}, "--weight-decay +Inf: must be a finite number in [0, 1]"},
		{[]string{"train", "--momentum", "0.99999999999"}, "--momentum 0.99999999999: rounds to 1 in float32"},
		{[]string{"up", "--target-acc", "nan"}, "--target-acc NaN: must be a finite number in [0, 1]"},
		{[]string{"up", "--report", report}, "--report " + report + " cannot be created"},
		{[]string{"eval", "--model", "/dev/zero"}, "a header of 0 bytes"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			if got := runFail(t, 20*time.Second, tc.args...); !strings.Contains(got, tc.want) {
				t.Fatal(got)
			}
		})
	}
}

// TestDataDirAcrossStarts runs the binary on one data dir: a start whose
// dataset is missing fails and leaves nothing that changes the next start
// (the retry with corrected flags and another paradigm trains), a
// --momentum float32 rounds to 1 is refused by dssp node's job check, and
// a start with another mesh key than the data dir recorded exits at once,
// naming the data dir, instead of sitting in joining.
func TestDataDirAcrossStarts(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary; skipped with -short")
	}
	keyA, keyB := keygen(t), keygen(t)
	ports := freePorts(t)
	args := nodeArgs(t, keyA, ports)
	dir := args[2]
	args = append(args, "--threads", "1")

	if got := runFail(t, 30*time.Second, append(args, "--data", "/nonexistent")...); !strings.Contains(got, "dataset mnist") {
		t.Fatalf("start with a missing dataset: %s", got)
	}
	if got := runFail(t, 20*time.Second, append(args, "--momentum", "0.99999999999")...); !strings.Contains(got, "--momentum 0.99999999999: rounds to 1 in float32") {
		t.Fatalf("dssp node --momentum 0.99999999999: %s", got)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, Binary(t), append(args, "--dataset", "synthetic-mnist", "--paradigm", "bsp")...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	addr := "127.0.0.1:" + strconv.Itoa(ports[2])
	for phase := ""; phase != "training"; {
		select {
		case err := <-exited:
			t.Fatalf("the retry on the failed start's data dir exited (%v): %s", err, stderr.String())
		case <-ctx.Done():
			t.Fatalf("the retry did not reach training (phase %q): %s", phase, stderr.String())
		case <-time.After(200 * time.Millisecond):
		}
		if st, err := nodeclient.FetchStatus(ctx, addr); err == nil {
			phase = st.Phase
		}
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := <-exited; err != nil {
		t.Fatalf("graceful stop: %v: %s", err, stderr.String())
	}
	spec, err := os.ReadFile(filepath.Join(dir, "spec.json"))
	if err != nil || !strings.Contains(string(spec), `"bsp"`) {
		t.Fatalf("spec after the retry: %s %v", spec, err)
	}

	keyArgs := slices.Clone(args)
	keyArgs[slices.Index(keyArgs, keyA)] = keyB
	if got := runFail(t, 20*time.Second, keyArgs...); !strings.Contains(got, "data dir "+dir+" was used with another mesh key") {
		t.Fatalf("start with another mesh key: %s", got)
	}
}
