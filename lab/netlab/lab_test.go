package netlab

import (
	"bufio"
	"context"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"dsspmesh/internal/testlogger"
)

func TestParseSpec(t *testing.T) {
	for text, want := range map[string]Spec{
		"two-sites":                       Presets["two-sites"],
		"two-sites,delay=50ms":            {Sites: 2, Hosts: 2, Rate: 1e9, Between: 100e6, Delay: 50 * time.Millisecond},
		"switch,hosts=8,rate=10mbit":      {Sites: 1, Hosts: 8, Rate: 10e6},
		"hosts=3":                         {Sites: 1, Hosts: 3},
		"sites=3,hosts=1,between=2.5mbit": {Sites: 3, Hosts: 1, Between: 2.5e6},
	} {
		got, err := ParseSpec(text)
		if err != nil || got != want {
			t.Errorf("ParseSpec(%q) = %+v, %v; want %+v", text, got, err, want)
		}
		if again, err := ParseSpec(got.String()); err != nil || again != got {
			t.Errorf("ParseSpec(%q.String() = %q) = %+v, %v", text, got.String(), again, err)
		}
	}
	for _, bad := range []string{"", "three-sites", "hosts=0", "delay=5ms", "sites=2,loss=1", "rate=fast", "sites=9", "sites=2,hosts=2,between=1kbit", "x=1", "hosts=2,two-sites"} {
		if _, err := ParseSpec(bad); err == nil {
			t.Errorf("ParseSpec(%q) accepted", bad)
		}
	}
}

// startLab starts spec and closes it when the test ends, checking that
// nothing of it is left.
func startLab(t *testing.T, spec Spec) *Lab {
	t.Helper()
	Require(t)
	l, err := Start(context.Background(), spec, testlogger.New(t, slog.LevelDebug))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Error(err)
		}
		if left := leftoversOf(l.slot); len(left) > 0 {
			t.Errorf("left after Close: %v", left)
		}
	})
	return l
}

func leftoversOf(slot int) []string {
	var out []string
	for _, s := range Leftovers() {
		if strings.Contains(s, prefix(slot)) {
			out = append(out, s)
		}
	}
	return out
}

// TestTwoSitesDelayAndRate probes the two sites: within a site the
// round trip is short; between them it is at least twice the one-way
// delay, for UDP and for TCP's stream, which the link's rate bounds.
func TestTwoSitesDelayAndRate(t *testing.T) {
	spec := Presets["two-sites"]
	spec.Between = 20e6 // a rate the stream reaches in a second
	l := startLab(t, spec)
	ctx := context.Background()
	near, err := l.Probe(ctx, 0, 1, 10, 0)
	if err != nil {
		t.Fatal(err)
	}
	far, err := l.Probe(ctx, 0, 2, 10, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("within a site: %v; between sites: %v", near, far)
	if near.Lost > 0 || far.Lost > 0 {
		t.Errorf("probes lost: %d within, %d between", near.Lost, far.Lost)
	}
	if far.MinRTT < 2*spec.Delay {
		t.Errorf("round trip between sites %v < 2 × the one-way delay %v", far.MinRTT, spec.Delay)
	}
	if near.RTT >= spec.Delay {
		t.Errorf("round trip within a site %v crosses the delay line", near.RTT)
	}
	if far.Rate <= 0 || far.Rate > spec.Between*11/10 {
		t.Errorf("TCP between sites at %v, link %v", far.Rate, spec.Between)
	}
}

// TestCutAndHeal: a cut site's traffic to the other is dropped, its own
// is not, and a heal restores it.
func TestCutAndHeal(t *testing.T) {
	l := startLab(t, Spec{Sites: 2, Hosts: 2, Delay: 5 * time.Millisecond})
	ctx := context.Background()
	if err := l.Cut(1); err != nil {
		t.Fatal(err)
	}
	m, err := l.Probe(ctx, 0, 3, 3, 0)
	if err != nil || m.Lost != 3 {
		t.Errorf("across a cut: %v, %v; want every probe lost", m, err)
	}
	if m, err := l.Probe(ctx, 2, 3, 3, 0); err != nil || m.Lost != 0 {
		t.Errorf("within the cut site: %v, %v", m, err)
	}
	if err := l.Heal(1); err != nil {
		t.Fatal(err)
	}
	if m, err := l.Probe(ctx, 0, 3, 3, 0); err != nil || m.Lost != 0 || m.MinRTT < 10*time.Millisecond {
		t.Errorf("after the heal: %v, %v", m, err)
	}
}

// TestSwitchRate: four hosts on one switch, each host's egress at the rate.
func TestSwitchRate(t *testing.T) {
	l := startLab(t, Spec{Sites: 1, Hosts: 4, Rate: 20e6})
	m, err := l.Probe(context.Background(), 1, 3, 3, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("on one switch: %v", m)
	if m.Rate <= 0 || m.Rate > 22e6 {
		t.Errorf("TCP at %v over a 20mbit link", m.Rate)
	}
}

// TestFailedStartLeavesNothing: a command failing half-way through Start
// removes what was built.
func TestFailedStartLeavesNothing(t *testing.T) {
	Require(t)
	failCmd = "rule add"
	defer func() { failCmd = "" }()
	before := len(Leftovers())
	_, err := Start(context.Background(), Presets["two-sites"], testlogger.New(t, slog.LevelDebug))
	if err == nil || !strings.Contains(err.Error(), "rule add") {
		t.Fatalf("Start = %v, want the injected failure", err)
	}
	if left := Leftovers(); len(left) != before {
		t.Errorf("left after a failed start: %v", left)
	}
}

// TestInterruptedOwnerLeavesNothing: a process holding a lab with a
// process in it, interrupted (SIGINT, as Ctrl-C), removes it on its way
// out; one killed outright leaves it to the next Sweep.
func TestInterruptedOwnerLeavesNothing(t *testing.T) {
	Require(t)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGKILL} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperLabOwner$")
		cmd.Env = append(os.Environ(), "NETLAB_HELPER=1")
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		r := bufio.NewScanner(out)
		var ns string
		for r.Scan() {
			if v, ok := strings.CutPrefix(r.Text(), "ready "); ok {
				ns = v
				break
			}
		}
		if ns == "" {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatal("the helper did not start its lab")
		}
		cmd.Process.Signal(sig)
		cmd.Wait()
		if sig == syscall.SIGKILL {
			if _, err := os.Stat("/run/netns/" + ns); err != nil {
				t.Errorf("after SIGKILL the namespace %s is gone already: %v", ns, err)
			}
			Sweep(testlogger.New(t, slog.LevelDebug))
		}
		for _, s := range Leftovers() {
			if strings.HasPrefix(s, ns[:strings.Index(ns, "-")+1]) {
				t.Errorf("after %v: %s left", sig, s)
			}
		}
	}
}

// TestHelperLabOwner is the process TestInterruptedOwnerLeavesNothing
// interrupts: it starts a lab with a sleeping process on a host, says
// ready, and closes the lab when SIGINT arrives.
func TestHelperLabOwner(t *testing.T) {
	if os.Getenv("NETLAB_HELPER") != "1" {
		t.Skip("a helper process of TestInterruptedOwnerLeavesNothing")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	l, err := Start(ctx, Spec{Sites: 2, Hosts: 1, Delay: time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	sleeper := exec.Command("ip", "netns", "exec", l.Hosts()[0].NS, "sleep", "600")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	go sleeper.Wait()
	os.Stdout.WriteString("ready " + l.Hosts()[0].NS + "\n")
	<-ctx.Done()
}
