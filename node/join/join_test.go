package join

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"dsspmesh/mesh"
)

// joinRig runs a Join whose clock and join the test drive: tick fires
// the next progress note, fail ends the join with no seed answered.
type joinRig struct {
	j      *Join
	log    bytes.Buffer
	tick   chan time.Time
	fail   chan struct{}
	waits  []time.Duration // what run asked after for
	probes []string        // the seeds asked whether they answer HTTP
}

func newJoinRig(seeds []string, last mesh.JoinAttempt) *joinRig {
	r := &joinRig{tick: make(chan time.Time), fail: make(chan struct{})}
	r.j = &Join{Seeds: seeds, Timeout: 30 * time.Second, Flag: true, GossipPort: 7946,
		Log:   slog.New(slog.NewTextHandler(&r.log, nil)),
		After: func(d time.Duration) <-chan time.Time { r.waits = append(r.waits, d); return r.tick },
		AnswersHTTP: func(ctx context.Context, addr string) bool {
			r.probes = append(r.probes, addr)
			return AnswersHTTP(ctx, addr)
		}}
	// The attempt the join's trace last reported (mesh's own test checks
	// that memberlist's trace reports these).
	r.j.last = last
	return r
}

// run starts the join; the returned function fails it and returns run's error.
func (r *joinRig) run() func() error {
	errc := make(chan error, 1)
	go func() {
		errc <- r.j.Run(context.Background(), func(ctx context.Context, seeds []string) (int, error) {
			select {
			case <-r.fail:
				return 0, &mesh.JoinError{Seeds: seeds, Attempts: r.j.last.Attempt, Last: r.j.last.Err}
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		})
	}()
	return func() error { close(r.fail); return <-errc }
}

// memberlistErr is memberlist's join error for seed, shaped as it
// reports one (mesh's TestJoinTraceReportsEachAttempt sees the real ones).
func memberlistErr(seed, why string) error {
	return fmt.Errorf("1 error occurred:\n\t* failed to join %s: %s\n\n", seed, why)
}

// TestSeedJoinSaysTheSeedAnswersHTTP gives as --join seed the address of
// an HTTP server (a node's --http port instead of its gossip port): while
// the join waits it says so, with the seed, the attempt and the last
// error, and its final error carries the hint.
func TestSeedJoinSaysTheSeedAnswersHTTP(t *testing.T) {
	web := httptest.NewServer(http.NotFoundHandler())
	defer web.Close()
	seed := web.Listener.Addr().String()
	r := newJoinRig([]string{seed}, mesh.JoinAttempt{Attempt: 4, Next: 800 * time.Millisecond, Err: memberlistErr(seed, "encryption is configured but remote state is not encrypted")})
	stop := r.run()
	r.tick <- time.Time{}
	r.tick <- time.Time{}
	err := stop()

	log := r.log.String()
	hint := seed + " answers HTTP: --join takes the gossip address (default port 7946)"
	for _, want := range []string{
		`level=INFO msg="joining via ` + seed + `: no answer yet" waited=2s timeout=30s attempt=4 next_in=800ms err="failed to join ` + seed + `: encryption is configured but remote state is not encrypted"`,
		`level=INFO msg="joining via ` + seed + `: no answer yet" waited=7s`,
		`level=WARN msg="` + hint + `"`,
	} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	if n := strings.Count(log, "answers HTTP"); n != 1 {
		t.Errorf("the hint was logged %d times, want once:\n%s", n, log)
	}
	if !slices.Equal(r.waits, []time.Duration{joinFirstNote, joinNoteEvery, joinNoteEvery}) {
		t.Errorf("notes asked for after %v, want %v then every %v", r.waits, joinFirstNote, joinNoteEvery)
	}
	if err == nil || !strings.Contains(err.Error(), "--join "+seed+": no seed answered within 30s (4 attempts; the last: failed to join "+seed+": encryption is configured but remote state is not encrypted); "+hint) {
		t.Errorf("err = %v, want it to name the seed, the attempts and the hint", err)
	}
	t.Logf("log:\n%serr: %v", log, err)
}

// TestSeedJoinHintsOnlyWhatItReached: a seed where nothing listens (its
// node may still be starting) is never sent an HTTP request, and its error
// asks whether a node runs there; a join that fails before its first note
// still probes a seed it reached, and the error carries the hint.
func TestSeedJoinHintsOnlyWhatItReached(t *testing.T) {
	t.Run("nothing listens", func(t *testing.T) {
		seed := "127.0.0.1:1"
		r := newJoinRig([]string{seed}, mesh.JoinAttempt{Attempt: 2, Next: 200 * time.Millisecond,
			Err: memberlistErr(seed, "dial tcp "+seed+": connect: connection refused")})
		stop := r.run()
		r.tick <- time.Time{}
		err := stop()
		if len(r.probes) != 0 {
			t.Errorf("asked %v whether they answer HTTP; nothing listens there", r.probes)
		}
		if err == nil || !strings.Contains(err.Error(), "connection refused); is a node running there, with the same mesh key?") {
			t.Errorf("err = %v", err)
		}
		if strings.Contains(r.log.String(), "level=WARN") {
			t.Errorf("a warning for a seed that does not listen:\n%s", r.log.String())
		}
	})
	t.Run("fails before the first note", func(t *testing.T) {
		web := httptest.NewServer(http.NotFoundHandler())
		defer web.Close()
		seed := web.Listener.Addr().String()
		r := newJoinRig([]string{seed}, mesh.JoinAttempt{Attempt: 1, Next: 100 * time.Millisecond, Err: memberlistErr(seed, "encryption is configured but remote state is not encrypted")})
		err := r.run()()
		if err == nil || !strings.HasSuffix(err.Error(), seed+" answers HTTP: --join takes the gossip address (default port 7946)") {
			t.Errorf("err = %v, want the hint", err)
		}
		if r.log.Len() != 0 {
			t.Errorf("a join that ended before its first note logged:\n%s", r.log.String())
		}
	})
}
