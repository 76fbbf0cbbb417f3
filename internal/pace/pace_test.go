package pace

import (
	"testing"
	"time"
)

func TestPacerLogsFirstThenOncePerPeriod(t *testing.T) {
	p := Pacer[string]{Every: 10 * time.Second}
	t0 := time.Unix(1000, 0)
	type want struct {
		log  bool
		held int
	}
	for i, c := range []struct {
		key  string
		at   time.Duration
		want want
	}{
		{"a", 0, want{true, 0}},
		{"a", time.Second, want{false, 0}},
		{"b", 2 * time.Second, want{true, 0}}, // keys are paced apart
		{"a", 5 * time.Second, want{false, 0}},
		{"a", 10 * time.Second, want{true, 2}},
		{"a", 12 * time.Second, want{false, 0}},
		{"a", 30 * time.Second, want{true, 1}},
	} {
		log, held, since := p.Note(c.key, t0.Add(c.at))
		if log != c.want.log || held != c.want.held {
			t.Errorf("%d: %s at %v: log %v held %d, want %+v", i, c.key, c.at, log, held, c.want)
		}
		if i == 4 && !since.Equal(t0) {
			t.Errorf("the held-back count dates from %v, want %v", since, t0)
		}
	}
}
