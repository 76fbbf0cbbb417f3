package status

import (
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"dsspmesh/internal/headless"
)

// TestDashboardShowsTheTrainer: the page of a --trainer external node
// shows /status's trainer object (the socket, whether a trainer is
// attached, the layout's size, the bridge's cost); a node with no trainer
// socket shows no trainer section, and one waiting for its first trainer
// says so.
func TestDashboardShowsTheTrainer(t *testing.T) {
	attached := sampleStatus()
	attached.Trainer = &ExternalTrainer{Socket: "/data/node0/trainer.sock", Attached: true, PID: 4242, Attachments: 2, Iterations: 77,
		Tensors: 6, Params: 235146, BytesCopiedPerIter: 0, CopyMicros: 3.5, RoundTripMicros: 812.5, TrainerMicros: 790.25}
	waiting := sampleStatus()
	waiting.Phase, waiting.Worker = "waiting-trainer", nil
	waiting.Trainer = &ExternalTrainer{Socket: "/data/node0/trainer.sock", Waiting: "the job's layout: the first trainer to attach fixes it"}
	trainerText := regexp.MustCompile(`(?s)<div id="trainer-box"( hidden(="")?)?><h2>Trainer</h2><div id="trainer" class="muted">(.*?)</div>`)
	for _, c := range []struct {
		name   string
		st     Status
		hidden bool
		want   []string
	}{
		{"attached", attached, false, []string{"attached (pid 4242) at /data/node0/trainer.sock", "layout 6 tensors, 235146 parameters",
			"2 attachments", "77 iterations", "812.5 µs round trip", "3.5 µs copying 0 bytes", "790.3 µs in the trainer"}},
		{"waiting", waiting, false, []string{"no trainer attached at /data/node0/trainer.sock", "layout not fixed yet",
			"waiting for a trainer: the job's layout: the first trainer to attach fixes it"}},
		{"built-in", sampleStatus(), true, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := c.st
			srv := httptest.NewServer(NewHTTPHandler(func() Status { return st }, NewMetrics(func() Status { return st })))
			defer srv.Close()
			dom := headless.DumpDOM(t, headless.Chromium(t), srv.URL+"/", 3*time.Second)
			m := trainerText.FindStringSubmatch(dom)
			if m == nil {
				t.Fatalf("no trainer section in the page:\n%s", dom)
			}
			if hidden := m[1] != ""; hidden != c.hidden {
				t.Errorf("trainer section hidden = %v, want %v (%q)", hidden, c.hidden, m[0])
			}
			for _, w := range c.want {
				if !strings.Contains(m[3], w) {
					t.Errorf("trainer section %q does not say %q", m[3], w)
				}
			}
		})
	}
}
