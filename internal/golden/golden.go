// Package golden is test support: golden transcripts in the manner of
// etcd-io/raft's interaction tests. A transcript is a text file of
// commands, each a line "> cmd args…" followed by what it produced; lines
// before the first command (comments, blank lines) are kept as they are.
// Run replays every command and compares what it produces with the text
// under it; with the test flag -rewrite it writes the text instead:
//
//	go test ./shard -run Golden -rewrite
//
// A changed rule shows as a failure naming the file, the command and the
// first lines that differ. Tests only (no package's build may import it).
package golden

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the golden transcripts (testdata/*.txt) with what the code produces")

// Files are the transcripts dir/prefix*.txt; none fails the test.
func Files(t *testing.T, dir, prefix string) []string {
	t.Helper()
	fs, err := filepath.Glob(filepath.Join(dir, prefix+"*.txt"))
	if err != nil || len(fs) == 0 {
		t.Fatalf("no transcripts %s*.txt in %s: %v", prefix, dir, err)
	}
	return fs
}

// Run replays the transcript at path, one command at a time through do,
// and compares (or, with -rewrite, replaces) each command's output.
func Run(t *testing.T, path string, do func(cmd string, args []string) string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	var cmd string
	var want, diffs []string
	flush := func() {
		if cmd == "" {
			return
		}
		f := strings.Fields(strings.TrimPrefix(cmd, "> "))
		got := strings.TrimRight(do(f[0], f[1:]), "\n")
		if w := strings.TrimRight(strings.Join(want, "\n"), "\n"); got != w {
			diffs = append(diffs, cmd+"\n"+lineDiff(w, got))
		}
		out.WriteString(cmd + "\n")
		if got != "" {
			out.WriteString(got + "\n")
		}
		out.WriteString("\n")
	}
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, "> "):
			flush()
			cmd, want = line, nil
		case cmd == "":
			out.WriteString(line + "\n") // the file's header
		case line != "" || len(want) > 0:
			want = append(want, line)
		}
	}
	flush()
	if *rewrite {
		if err := os.WriteFile(path, []byte(strings.TrimRight(out.String(), "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	for _, d := range diffs {
		t.Errorf("%s: transcript differs (-rewrite to accept what the code produces):\n%s", path, d)
	}
}

// lineDiff shows the first lines at which want and got differ.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	shown := 0
	for i := 0; i < max(len(w), len(g)) && shown < 6; i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			fmt.Fprintf(&b, "  line %d\n    - %s\n    + %s\n", i+1, wl, gl)
			shown++
		}
	}
	return b.String()
}
