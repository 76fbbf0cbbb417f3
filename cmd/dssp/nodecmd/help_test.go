package nodecmd

import (
	"bytes"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// help is `dssp node --help` as the command prints it.
func help(t *testing.T) string {
	t.Helper()
	cmd := New()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--help"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

var helpFlag = regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([a-z0-9-]+)`)

// TestEveryNodeFlagHasAHeading: every visible flag but --config and --help
// is listed under one heading, once, and every listed name is a real flag.
func TestEveryNodeFlagHasAHeading(t *testing.T) {
	cmd := New()
	seen := map[string]string{}
	for _, g := range flagGroups {
		for _, name := range g.flags {
			if cmd.Flags().Lookup(name) == nil {
				t.Errorf("heading %q lists --%s, which dssp node does not have", g.title, name)
			}
			if prev, ok := seen[name]; ok {
				t.Errorf("--%s is under %q and %q", name, prev, g.title)
			}
			seen[name] = g.title
		}
	}
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if _, ok := seen[f.Name]; !ok && !f.Hidden && f.Name != "config" {
			t.Errorf("--%s is under no heading of dssp node --help (add it to flagGroups or LabKnobs)", f.Name)
		}
	})
}

// TestHelpGroupsFlagsAndHidesLabKnobs: the help prints each heading, every
// visible flag exactly once, and no lab knob.
func TestHelpGroupsFlagsAndHidesLabKnobs(t *testing.T) {
	out := help(t)
	for _, g := range flagGroups {
		if !strings.Contains(out, "\n"+g.title+" flags:\n") {
			t.Errorf("no heading %q in:\n%s", g.title, out)
		}
	}
	count := map[string]int{}
	for _, m := range helpFlag.FindAllStringSubmatch(out, -1) {
		count[m[1]]++
	}
	New().Flags().VisitAll(func(f *pflag.Flag) {
		want := 1
		if slices.Contains(LabKnobs, f.Name) {
			want = 0
		}
		if count[f.Name] != want {
			t.Errorf("--%s printed %d times, want %d", f.Name, count[f.Name], want)
		}
	})
}

// TestLabKnobsAreAccepted: hidden is not removed; each knob still parses
// and reaches the config (dssp up and test/ pass them to node processes).
func TestLabKnobsAreAccepted(t *testing.T) {
	cmd := New()
	args := []string{"--slowdown=2", "--compute-delay=5ms", "--raft-timing=fixed", "--pipeline-fresh=0.5",
		"--history-dir=h", "--fault-nan-every=3"}
	if len(args) != len(LabKnobs) {
		t.Fatalf("test covers %d knobs, LabKnobs has %d", len(args), len(LabKnobs))
	}
	if err := cmd.Flags().Parse(args); err != nil {
		t.Fatal(err)
	}
	for _, name := range LabKnobs {
		f := cmd.Flags().Lookup(name)
		if f == nil || !f.Hidden || !f.Changed {
			t.Errorf("--%s: %+v, want a hidden flag that was set", name, f)
		}
	}
}
