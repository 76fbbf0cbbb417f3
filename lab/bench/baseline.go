package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// MeasureBaselineReplication runs the replication measurement of cfg in
// another dssp binary (an earlier build: `dssp-lab bench mesh
// --no-process-mesh` with the other measurements cut short) and reads its
// pushes/s from the progress lines it prints ("  3 replicas: 812 pushes/s,
// ..."). The earlier build pushes fp32 whatever cfg.Precision says.
func MeasureBaselineReplication(ctx context.Context, binary string, cfg ReplicationConfig) (ReplicationResult, error) {
	res := ReplicationResult{Config: cfg}
	dir, err := os.MkdirTemp("", "dssp-bench-baseline-*")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	var reps []string
	for _, n := range cfg.Replicas {
		reps = append(reps, strconv.Itoa(n))
	}
	args := []string{"bench", "mesh", "--no-process-mesh", "--transport-time", "1s", "--gate-pushes", "1",
		"--inproc-time", "1s", "--replicas", strings.Join(reps, ","), "--push-workers", strconv.Itoa(cfg.Workers),
		"--replication-time", cfg.Duration.String(), "--payload", strconv.Itoa(cfg.Payload),
		"--disk=" + strconv.FormatBool(cfg.Dir != ""), "--out", dir}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(len(cfg.Replicas)+1)*(cfg.Duration+time.Minute))
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return res, fmt.Errorf("bench: baseline %s %s: %w: %s", binary, strings.Join(args, " "), err, lastLine(errOut.String()))
	}
	found := map[int]PushRate{}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		name, rest, ok := strings.Cut(strings.TrimSpace(sc.Text()), ": ")
		if !ok || !strings.Contains(rest, " pushes/s") {
			continue
		}
		v, err := strconv.ParseFloat(strings.Fields(rest)[0], 64)
		if err != nil {
			continue
		}
		n := 0
		switch {
		case name == "unreplicated echo":
		case name == "1 replica":
			n = 1
		default:
			if n, err = strconv.Atoi(strings.TrimSuffix(name, " replicas")); err != nil {
				continue
			}
		}
		found[n] = PushRate{Replicas: n, PushesPerSec: v, MiBs: v * float64(cfg.Payload) / (1 << 20)}
	}
	b, ok := found[0]
	if !ok {
		return res, fmt.Errorf("bench: baseline %s printed no unreplicated echo rate", binary)
	}
	res.Baseline = b
	for _, n := range cfg.Replicas {
		r, ok := found[n]
		if !ok {
			return res, fmt.Errorf("bench: baseline %s printed no rate for %d replicas", binary, n)
		}
		r.Ratio = r.PushesPerSec / b.PushesPerSec
		res.Rates = append(res.Rates, r)
	}
	return res, nil
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}
