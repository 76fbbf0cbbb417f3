package test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"dsspmesh/internal/headless"
)

// TestDashboardShowsTheRunSoFar opens the dashboard of a running mesh late
// (DSSP_DASHBOARD_LATE after the first node started, 20s by default; 55s
// for the screenshot) on the node that does not train
// (--train=false), in headless Chromium, and checks that it draws the
// whole run: the worker charts start at the first point of the node's
// history (/status/history), itself within a sample of the moment a worker
// first reported; the header says the node hosts shards; the join labels of
// the timeline do not overprint; `dssp status` names its role and the two
// iteration counts. It saves a screenshot taken 5 s after the page opened
// (page.png in the test's temp dir, and in DSSP_SCREENSHOT_DIR when set).
func TestDashboardShowsTheRunSoFar(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test; skipped with -short")
	}
	bin := headless.Chromium(t)
	late := 20 * time.Second
	if v := os.Getenv("DSSP_DASHBOARD_LATE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("DSSP_DASHBOARD_LATE=%q: %v", v, err)
		}
		late = d
	}
	const shown = 5 * time.Second // how long the page is open before the screenshot
	c := NewCluster(t, 3, []string{"--threads", "1", "--eval-every", "1s", "--eval-samples", "1000", "--log-level", "warn"},
		[]string{"--model", "mlp"})
	c.Mesh.AddArgs(2, "--train=false")
	start := time.Now()
	for i := range 3 {
		c.Start(i)
	}
	const host = 2
	addr := c.Mesh.Procs[host].HTTP
	var firstSeen time.Time
	c.WaitFor("node2 sees a worker", 90*time.Second, func() bool {
		s, err := c.Status(host)
		if err == nil && len(s.Trainers) > 0 {
			firstSeen = time.Now()
		}
		return !firstSeen.IsZero()
	})
	c.WaitFor(fmt.Sprintf("%v since the first node started", late), late+30*time.Second, func() bool {
		return time.Since(start) >= late
	})
	opened := time.Since(start)

	// The node's own history: from its start, every worker since it first
	// reported, about a point a second.
	h := fetchHistory(t, addr)
	st, err := c.Status(host)
	if err != nil {
		t.Fatal(err)
	}
	if d := h.Started.Sub(st.Started); d < 0 || d > 3*time.Second {
		t.Errorf("history starts %v after the node (%v, %v)", d, st.Started, h.Started)
	}
	if len(h.Workers) != 2 {
		t.Fatalf("history of %d workers, want the 2 trainers: %+v", len(h.Workers), h.Workers)
	}
	first := int64(0)
	for _, w := range h.Workers {
		span := time.Duration(w.T[len(w.T)-1]-w.T[0]) * time.Millisecond
		if n := len(w.T); float64(n) < 0.8*span.Seconds() {
			t.Errorf("%s: %d points over %v", w.ID, n, span)
		}
		if first == 0 || w.T[0] < first {
			first = w.T[0]
		}
	}
	if lim := firstSeen.Add(1500 * time.Millisecond).UnixMilli(); first > lim || first < start.UnixMilli() {
		t.Errorf("the history's first worker point is at %v, want between the start (%v) and a sample after a worker was first seen (%v)",
			time.UnixMilli(first), start, firstSeen)
	}

	// The page, opened now, draws from that first point.
	shot := filepath.Join(t.TempDir(), "page.png")
	dom := chromiumPage(t, bin, addr, shot, shown)
	for _, chart := range []string{"chart-iter", "chart-rate", "chart-wait"} {
		m := regexp.MustCompile(`<svg id="` + chart + `"[^>]*>`).FindString(dom)
		t0, _ := strconv.ParseInt(attr(m, "data-t0"), 10, 64)
		points, _ := strconv.Atoi(attr(m, "data-points"))
		if t0 != first {
			t.Errorf("%s starts at %v, want the history's first point %v", chart, time.UnixMilli(t0), time.UnixMilli(first))
		}
		if want := int(2 * 0.8 * (opened - time.Duration(first-start.UnixMilli())*time.Millisecond).Seconds()); points < want {
			t.Errorf("%s drew %d points, want at least %d (80%% of one a second per worker since the first)", chart, points, want)
		}
	}
	if !strings.Contains(dom, "hosting shards (not training)") {
		t.Error("the header of the node that does not train does not say it hosts shards")
	}
	checkLabels(t, dom)
	if data, err := os.ReadFile(shot); err != nil || len(data) < 10000 {
		t.Errorf("screenshot %s: %d bytes, %v", shot, len(data), err)
	} else if dir := os.Getenv("DSSP_SCREENSHOT_DIR"); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Error(err)
		} else if err := os.WriteFile(filepath.Join(dir, "dashboard.png"), data, 0o644); err != nil {
			t.Error(err)
		}
	}
	t.Logf("dashboard of node2 opened %v after the start, screenshot %v later: %s; first worker point %v after the start, workers first seen %v after",
		opened.Round(100*time.Millisecond), shown, shot, (time.Duration(first-start.UnixMilli()) * time.Millisecond).Round(100*time.Millisecond),
		firstSeen.Sub(start).Round(100*time.Millisecond))

	text, err := exec.Command(Binary(t), "status", "--node", addr).CombinedOutput()
	if err != nil {
		t.Fatalf("dssp status: %v\n%s", err, text)
	}
	for _, want := range []string{"(hosting shards, not training)", "CLOCK ON SHARDS", "COMPUTED", "the iterations its worker loop computed"} {
		if !strings.Contains(string(text), want) {
			t.Errorf("dssp status does not say %q:\n%s", want, text)
		}
	}
}

// chromiumPage opens http://addr/ in headless Chromium, keeps it open
// for shown of wall time (the page polls /status every second meanwhile)
// and returns its DOM then, with a full-page screenshot written to png. It
// drives the browser over the DevTools protocol on a pipe
// (--remote-debugging-pipe: JSON messages ending in a NUL byte, commands
// on fd 3, answers on fd 4): --dump-dom and --screenshot take the page as
// soon as it has loaded, or after virtual time, not wall time.
func chromiumPage(t *testing.T, bin, addr, png string, shown time.Duration) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second+shown)
	defer cancel()
	toBrowser, cmdIn, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	answers, fromBrowser, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
		"--remote-debugging-pipe", "about:blank")
	cmd.ExtraFiles = []*os.File{toBrowser, fromBrowser}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("chromium: %v", err)
	}
	toBrowser.Close()
	fromBrowser.Close()
	defer func() {
		cmdIn.Write([]byte(`{"id":999999,"method":"Browser.close"}` + "\x00"))
		cmdIn.Close()
		cmd.Wait() // the browser exits on Browser.close; ctx bounds it
	}()
	msgs := make(chan map[string]json.RawMessage, 64)
	go func() {
		defer close(msgs)
		r := bufio.NewReader(answers)
		for {
			b, err := r.ReadBytes(0)
			if err != nil {
				return
			}
			var m map[string]json.RawMessage
			if json.Unmarshal(b[:len(b)-1], &m) != nil {
				continue
			}
			select {
			case msgs <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	id := 0
	call := func(session, method string, params any, result any) {
		t.Helper()
		id++
		req := map[string]any{"id": id, "method": method, "params": params}
		if session != "" {
			req["sessionId"] = session
		}
		b, _ := json.Marshal(req)
		if _, err := cmdIn.Write(append(b, 0)); err != nil {
			t.Fatalf("chromium %s: %v\n%s", method, err, stderr.String())
		}
		for {
			select {
			case m, ok := <-msgs:
				if !ok {
					t.Fatalf("chromium %s: the browser closed the pipe\n%s", method, stderr.String())
				}
				var got int
				if json.Unmarshal(m["id"], &got) != nil || got != id {
					continue // an event, or an answer to an earlier command
				}
				if e, ok := m["error"]; ok {
					t.Fatalf("chromium %s: %s", method, e)
				}
				if result != nil {
					if err := json.Unmarshal(m["result"], result); err != nil {
						t.Fatalf("chromium %s: %v", method, err)
					}
				}
				return
			case <-ctx.Done():
				t.Fatalf("chromium %s: %v\n%s", method, ctx.Err(), stderr.String())
			}
		}
	}
	var target struct {
		TargetID string `json:"targetId"`
	}
	call("", "Target.createTarget", map[string]any{"url": "about:blank"}, &target)
	var attached struct {
		SessionID string `json:"sessionId"`
	}
	call("", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}, &attached)
	page := attached.SessionID
	call(page, "Emulation.setDeviceMetricsOverride", map[string]any{"width": 1280, "height": 1600, "deviceScaleFactor": 1, "mobile": false}, nil)
	opened := time.Now()
	call(page, "Page.navigate", map[string]any{"url": "http://" + addr + "/"}, nil)
	for time.Since(opened) < shown {
		time.Sleep(100 * time.Millisecond) // the page is shown for this long: the wait is the point
	}
	var dom struct {
		Result struct {
			Value string `json:"value"`
		} `json:"result"`
	}
	call(page, "Runtime.evaluate", map[string]any{"expression": "document.documentElement.outerHTML", "returnByValue": true}, &dom)
	var shot struct {
		Data []byte `json:"data"` // base64 in JSON
	}
	call(page, "Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": true}, &shot)
	if err := os.WriteFile(png, shot.Data, 0o644); err != nil {
		t.Fatal(err)
	}
	return dom.Result.Value
}

// attr is the value of attribute name in the tag.
func attr(tag, name string) string {
	m := regexp.MustCompile(` ` + name + `="([^"]*)"`).FindStringSubmatch(tag)
	if m == nil {
		return ""
	}
	return m[1]
}

// checkLabels checks the timeline's labels: within a lane none overprints
// the next (the page groups close events under one "N joins" label), and
// the groups account for every event of the lane.
func checkLabels(t *testing.T, dom string) {
	tl := regexp.MustCompile(`(?s)<svg id="timeline".*?</svg>`).FindString(dom)
	if tl == "" {
		t.Fatal("no timeline")
	}
	for _, kind := range []string{"join", "leader"} {
		events := strings.Count(tl, `<g class="event `+kind+`"`)
		counted, prevEnd, prevText := 0, -1.0, ""
		for _, m := range regexp.MustCompile(`<g class="label `+kind+`" data-count="(\d+)">(?:<text x="([\d.]+)"[^>]*>([^<]*)</text>)?`).FindAllStringSubmatch(tl, -1) {
			n, _ := strconv.Atoi(m[1])
			x, _ := strconv.ParseFloat(m[2], 64)
			counted += n
			if m[3] == "" {
				continue // a leader change alone is not named
			}
			if x < prevEnd {
				t.Errorf("timeline: %s label %q at x=%.0f overprints %q, which ends at %.0f", kind, m[3], x, prevText, prevEnd)
			}
			prevEnd, prevText = x+6*float64(len(m[3])), m[3]
		}
		if counted != events {
			t.Errorf("timeline: %d %s events, %d in labelled groups", events, kind, counted)
		}
		if kind == "join" && events == 0 {
			t.Error("timeline: no join events")
		}
	}
}

// history is what the test reads of /status/history (node/status's
// SeriesHistory).
type history struct {
	Started time.Time `json:"started"`
	Workers []struct {
		ID   string  `json:"id"`
		T    []int64 `json:"t"`
		Iter []int64 `json:"iter"`
	} `json:"workers"`
}

func fetchHistory(t *testing.T, addr string) history {
	t.Helper()
	res, err := http.Get("http://" + addr + "/status/history")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var h history
	if err := json.NewDecoder(res.Body).Decode(&h); err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("GET /status/history: %d %v", res.StatusCode, err)
	}
	return h
}
