package netlab

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Rate is a link rate in bits per second; 0 is unshaped.
type Rate int64

// ParseRate reads 100mbit, 1gbit, 500kbit or a plain number of bit/s.
func ParseRate(s string) (Rate, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		m      int64
	}{{"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}, {"bit", 1}} {
		if v, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = v, u.m
			break
		}
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || f < 0 || math.IsInf(f, 0) || f*float64(mult) > 1e12 {
		return 0, fmt.Errorf("rate %q: want a number of bit/s up to 1000gbit with an optional unit kbit, mbit or gbit", s)
	}
	return Rate(f * float64(mult)), nil
}

// String is the rate in the largest unit that keeps it whole: 100mbit.
func (r Rate) String() string {
	for _, u := range []struct {
		suffix string
		m      int64
	}{{"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}} {
		if int64(r) >= u.m && int64(r)%u.m == 0 {
			return strconv.FormatInt(int64(r)/u.m, 10) + u.suffix
		}
	}
	return strconv.FormatInt(int64(r), 10) + "bit"
}

// BytesPerSec is the rate in bytes per second.
func (r Rate) BytesPerSec() float64 { return float64(r) / 8 }

// Spec is a topology: Sites switches of Hosts hosts each, and between
// the sites one router.
type Spec struct {
	Sites int // switches; 1: every host on one switch
	Hosts int // hosts per site
	// Rate shapes each host's egress (the link to its switch); 0: unshaped.
	Rate Rate
	// Between shapes the link between sites each way (the router's egress
	// into each site); 0: unshaped. Needs Sites ≥ 2, as do Delay and Loss.
	Between Rate
	// Delay is the one-way delay between sites; Loss the share of the
	// packets between sites dropped, in [0, 1).
	Delay time.Duration
	Loss  float64
	// Queue is the longest a packet may wait in a shaped link's queue
	// (tbf's latency); 0: 20 ms within a site, the round trip between
	// sites (at least 20 ms), about a bandwidth-delay product of buffer.
	Queue time.Duration
}

// Presets are the named topologies of the text form.
var Presets = map[string]Spec{
	// The two sites: 2 × 2 hosts, 1 Gbit/s within a site, 100
	// Mbit/s and 25 ms one way between them.
	"two-sites": {Sites: 2, Hosts: 2, Rate: 1e9, Between: 100e6, Delay: 25 * time.Millisecond},
	// Four hosts on one switch at 100 Mbit/s.
	"switch": {Sites: 1, Hosts: 4, Rate: 100e6},
}

// ParseSpec reads a topology: a preset's name, key=value pairs, or a
// preset followed by pairs that override it ("two-sites,delay=50ms").
// Keys: sites, hosts, rate, between, delay, loss, queue. Without a preset
// the defaults are one site of 4 hosts, unshaped.
func ParseSpec(text string) (Spec, error) {
	s := Spec{Sites: 1, Hosts: 4}
	for k, part := range strings.Split(text, ",") {
		part = strings.TrimSpace(part)
		key, val, ok := strings.Cut(part, "=")
		if !ok {
			p, known := Presets[part]
			if k > 0 || !known {
				return Spec{}, fmt.Errorf("link %q: %q is neither key=value nor a preset (%s)", text, part, presetNames())
			}
			s = p
			continue
		}
		var err error
		switch strings.TrimSpace(key) {
		case "sites":
			s.Sites, err = strconv.Atoi(val)
		case "hosts":
			s.Hosts, err = strconv.Atoi(val)
		case "rate":
			s.Rate, err = ParseRate(val)
		case "between":
			s.Between, err = ParseRate(val)
		case "delay":
			s.Delay, err = time.ParseDuration(val)
		case "loss":
			s.Loss, err = strconv.ParseFloat(val, 64)
		case "queue":
			s.Queue, err = time.ParseDuration(val)
		default:
			return Spec{}, fmt.Errorf("link %q: unknown key %q (sites, hosts, rate, between, delay, loss, queue)", text, key)
		}
		if err != nil {
			return Spec{}, fmt.Errorf("link %q: %s: %w", text, key, err)
		}
	}
	return s, s.Validate()
}

func presetNames() string {
	return strings.Join(slices.Sorted(maps.Keys(Presets)), ", ")
}

// MaxSites and MaxHosts bound a topology (subnets are /24 per site).
const MaxSites, MaxHosts = 8, 64

// Validate names the first bad value.
func (s Spec) Validate() error {
	switch {
	case s.Sites < 1 || s.Sites > MaxSites:
		return fmt.Errorf("link: sites %d outside 1..%d", s.Sites, MaxSites)
	case s.Hosts < 1 || s.Sites*s.Hosts > MaxHosts:
		return fmt.Errorf("link: hosts %d per site outside 1..%d in all", s.Hosts, MaxHosts)
	case s.Rate < 0 || s.Between < 0:
		return errors.New("link: a rate must be >= 0")
	case s.Rate > 0 && s.Rate < 100e3, s.Between > 0 && s.Between < 100e3:
		return fmt.Errorf("link: rates below 100kbit are not supported (rate %v, between %v)", s.Rate, s.Between)
	case s.Delay < 0 || s.Delay > 10*time.Second:
		return fmt.Errorf("link: delay %v outside [0, 10s]", s.Delay)
	case !(s.Loss >= 0 && s.Loss < 1):
		return fmt.Errorf("link: loss %g outside [0, 1)", s.Loss)
	case s.Queue < 0 || s.Queue > 10*time.Second:
		return fmt.Errorf("link: queue %v outside [0, 10s]", s.Queue)
	case s.Sites == 1 && (s.Between > 0 || s.Delay > 0 || s.Loss > 0):
		return fmt.Errorf("link: between, delay and loss are between sites; one site has none (between %v, delay %v, loss %g)", s.Between, s.Delay, s.Loss)
	}
	return nil
}

// Shaped reports whether any link is shaped, delayed or lossy.
func (s Spec) Shaped() bool { return s.Rate > 0 || s.Between > 0 || s.Delay > 0 || s.Loss > 0 }

// Unshaped is the same hosts and sites with no shaping, delay or loss.
func (s Spec) Unshaped() Spec {
	return Spec{Sites: s.Sites, Hosts: s.Hosts}
}

// Nodes is the number of hosts.
func (s Spec) Nodes() int { return s.Sites * s.Hosts }

// SiteOf is the site of host i (hosts are numbered site by site).
func (s Spec) SiteOf(i int) int { return i / s.Hosts }

// String is the text form ParseSpec reads, every key given.
func (s Spec) String() string {
	parts := []string{fmt.Sprintf("sites=%d", s.Sites), fmt.Sprintf("hosts=%d", s.Hosts)}
	if s.Rate > 0 {
		parts = append(parts, "rate="+s.Rate.String())
	}
	if s.Between > 0 {
		parts = append(parts, "between="+s.Between.String())
	}
	if s.Delay > 0 {
		parts = append(parts, "delay="+s.Delay.String())
	}
	if s.Loss > 0 {
		parts = append(parts, "loss="+strconv.FormatFloat(s.Loss, 'g', -1, 64))
	}
	if s.Queue > 0 {
		parts = append(parts, "queue="+s.Queue.String())
	}
	return strings.Join(parts, ",")
}

// Describe is the topology in words: "2 sites × 2 hosts, 1gbit within a
// site, 100mbit and 25ms one way between sites".
func (s Spec) Describe() string {
	rate := func(r Rate) string {
		if r == 0 {
			return "unshaped"
		}
		return r.String()
	}
	if s.Sites == 1 {
		return fmt.Sprintf("%d hosts on one switch, %s", s.Hosts, rate(s.Rate))
	}
	out := fmt.Sprintf("%d sites × %d hosts, %s within a site, %s and %v one way between sites", s.Sites, s.Hosts, rate(s.Rate), rate(s.Between), s.Delay)
	if !s.Shaped() {
		out = fmt.Sprintf("%d sites × %d hosts, unshaped", s.Sites, s.Hosts)
	}
	if s.Loss > 0 {
		out += fmt.Sprintf(", %g loss", s.Loss)
	}
	return out
}

// queue is the tbf latency of a link within a site (between false) or
// between sites.
func (s Spec) queue(between bool) time.Duration {
	if s.Queue > 0 {
		return s.Queue
	}
	if between {
		return max(2*s.Delay, 20*time.Millisecond)
	}
	return 20 * time.Millisecond
}

// burst is tbf's bucket for rate r: 2 ms at the rate, at least 16 KiB.
func burst(r Rate) int64 {
	return max(16<<10, int64(r.BytesPerSec()*0.002))
}
