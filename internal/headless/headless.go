// Package headless is test support for the tests that load the dashboard
// in a browser: [Chromium] finds a headless-capable Chromium (skipping the
// test without one, failing it in CI, which installs it) and [DumpDOM]
// returns a page's DOM after its scripts ran. For tests only: no
// package's build may import it.
package headless

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// Chromium is the path of a headless-capable browser, or skips t (fails
// it when CI=true).
func Chromium(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is not installed; CI must install it (apt-get install -y chromium)")
	}
	t.Skip("chromium not installed (apt-get install -y chromium); dashboard not checked")
	return ""
}

// DumpDOM loads url in headless Chromium bin for budget of virtual time
// (the page's timers run that long) and returns the DOM its scripts left.
func DumpDOM(t testing.TB, bin, url string, budget time.Duration) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--user-data-dir="+t.TempDir(), "--virtual-time-budget="+strconv.FormatInt(budget.Milliseconds(), 10), "--dump-dom", url).Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom %s: %v", url, err)
	}
	return string(out)
}
