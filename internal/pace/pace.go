// Package pace paces repeated log lines: the first occurrence of a key is
// logged, then at most one a period, the line saying how many were held
// back since the last. It owns no logger and reads no clock: callers pass
// the time and write the line themselves.
//
// A Pacer is safe for concurrent use; its zero value is ready, with no
// keys. It holds one entry per key ever seen: keys are bounded by the
// caller (a shard's peers, a refusal's reasons).
package pace

import (
	"sync"
	"time"
)

// Pacer decides, per key, which occurrences to log.
type Pacer[K comparable] struct {
	Every time.Duration // the least time between two logged lines of one key

	mu   sync.Mutex
	keys map[K]*held // guarded by mu
}

type held struct {
	last time.Time // when its last line was logged
	n    int       // occurrences since, not logged
}

// Note records an occurrence of key at now and reports whether to log it
// and how many of key's occurrences were held back since its last line.
func (p *Pacer[K]) Note(key K, now time.Time) (log bool, heldBack int, since time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.keys[key]
	if h == nil {
		if p.keys == nil {
			p.keys = map[K]*held{}
		}
		p.keys[key] = &held{last: now}
		return true, 0, time.Time{}
	}
	if now.Sub(h.last) < p.Every {
		h.n++
		return false, 0, time.Time{}
	}
	heldBack, since = h.n, h.last
	h.last, h.n = now, 0
	return true, heldBack, since
}
