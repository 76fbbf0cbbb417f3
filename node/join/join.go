package join

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"dsspmesh/mesh"
)

// A join no seed answers says so: first after joinFirstNote, then every
// joinNoteEvery, until it gives up.
const (
	joinFirstNote = 2 * time.Second
	joinNoteEvery = 5 * time.Second
	// httpProbeTimeout bounds the question whether a seed answers HTTP.
	httpProbeTimeout = time.Second
)

// Join is one join of the mesh through seeds that tells its operator
// how it goes while no seed answers: which seeds, which attempt, why the
// last failed, and — for a --join seed that accepted a connection but did
// not speak gossip — whether it answers HTTP (a node's --http port given
// instead of its gossip port). Nothing is logged when a seed answers
// within joinFirstNote.
type Join struct {
	Seeds   []string
	Timeout time.Duration // the whole join's
	// Flag: the seeds are --join's (false: the data dir's persisted
	// peers, gossip addresses learnt from the mesh: nothing to hint).
	Flag bool
	// GossipPort is the default gossip port the HTTP hint names.
	GossipPort int
	Log        *slog.Logger
	After      func(time.Duration) <-chan time.Time // time.After; tests inject
	// AnswersHTTP asks whether addr answers HTTP ([AnswersHTTP]).
	AnswersHTTP func(ctx context.Context, addr string) bool

	mu   sync.Mutex
	last mesh.JoinAttempt
}

// Run joins through join (Membership.Join) within j.Timeout. The error
// names the seeds, the attempts and the last failure, and carries the
// HTTP hint for every seed that earned one.
func (j *Join) Run(ctx context.Context, join func(ctx context.Context, seeds []string) (int, error)) error {
	jctx, cancel := context.WithTimeout(ctx, j.Timeout)
	defer cancel()
	jctx = mesh.WithJoinTrace(jctx, func(a mesh.JoinAttempt) {
		j.mu.Lock()
		j.last = a
		j.mu.Unlock()
	})
	done := make(chan error, 1)
	go func() { _, err := join(jctx, j.Seeds); done <- err }()
	var (
		waited time.Duration
		next   = joinFirstNote
		probed = map[string]bool{}
		hints  []string
	)
	for {
		select {
		case err := <-done:
			if err == nil {
				return nil
			}
			if ctx.Err() != nil {
				return fmt.Errorf("joining via %s: %w", strings.Join(j.Seeds, ", "), ctx.Err())
			}
			hints = append(hints, j.probe(probed)...)
			return j.failed(err, hints)
		case <-j.After(next):
			waited += next
			next = joinNoteEvery
			j.mu.Lock()
			last := j.last
			j.mu.Unlock()
			args := []any{"waited", waited, "timeout", j.Timeout}
			if last.Attempt > 0 {
				args = append(args, "attempt", last.Attempt, "next_in", last.Next, "err", oneLine(last.Err))
			}
			j.Log.Info(fmt.Sprintf("joining via %s: no answer yet", strings.Join(j.Seeds, ", ")), args...)
			for _, h := range j.probe(probed) {
				j.Log.Warn(h)
				hints = append(hints, h)
			}
		}
	}
}

// probe asks each --join seed not asked yet that the last attempt reached
// (mesh.JoinAttempt.Reached: something listens there, but no gossip node
// of this mesh) whether it answers HTTP, and returns a hint for each that
// does. A seed not reached is not asked: nothing listens there yet (its
// node may still be starting), and an HTTP request to a gossip port that
// comes up would only make that node log a malformed message.
func (j *Join) probe(probed map[string]bool) []string {
	if !j.Flag || j.AnswersHTTP == nil {
		return nil
	}
	last := j.lastAttempt()
	var hints []string
	for _, s := range j.Seeds {
		if probed[s] || !last.Reached(s) {
			continue
		}
		probed[s] = true
		ctx, cancel := context.WithTimeout(context.Background(), httpProbeTimeout)
		ok := j.AnswersHTTP(ctx, s)
		cancel()
		if ok {
			hints = append(hints, fmt.Sprintf("%s answers HTTP: --join takes the gossip address (default port %d)", s, j.GossipPort))
		}
	}
	return hints
}

// failed is the error of a join no seed answered.
func (j *Join) failed(err error, hints []string) error {
	what := "--join"
	if !j.Flag {
		what = "persisted peers"
	}
	msg := fmt.Sprintf("%s %s: no seed answered within %v", what, strings.Join(j.Seeds, ", "), j.Timeout)
	if a := j.lastAttempt(); a.Attempt > 0 {
		msg += fmt.Sprintf(" (%d attempts; the last: %s)", a.Attempt, oneLine(a.Err))
	} else {
		msg += fmt.Sprintf(" (%s)", oneLine(err))
	}
	if len(hints) > 0 {
		return fmt.Errorf("%s; %s", msg, strings.Join(hints, "; "))
	}
	return fmt.Errorf("%s; is a node running there, with the same mesh key?", msg)
}

func (j *Join) lastAttempt() mesh.JoinAttempt {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.last
}

// AnswersHTTP reports whether an HTTP request to addr gets any answer.
func AnswersHTTP(ctx context.Context, addr string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/", nil)
	if err != nil {
		return false
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	res.Body.Close()
	return true
}

// oneLine flattens a multi-error's lines ("2 errors occurred:\n\t* a\n\t*
// b", memberlist's) into "a; b".
func oneLine(err error) string {
	if err == nil {
		return ""
	}
	s := err.Error()
	if _, rest, ok := strings.Cut(s, "occurred:\n\t* "); ok {
		s = rest
	}
	return strings.TrimSpace(strings.ReplaceAll(s, "\n\t* ", "; "))
}
