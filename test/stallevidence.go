package test

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
)

// logNoise matches what varies between two lines of one warning: the
// time and numbers (indexes, terms, durations); a shard's id is kept.
var logNoise = regexp.MustCompile(`time=\S+ |shard=\d+|\d+`)

// distinctWarnings is the last n distinct WARN and ERROR lines of the log
// at path, newest last, each with how often its kind (the line with time
// and numbers blanked) occurred. A stall in CI prints only part of the
// output, and a log tail there was one warning repeated; these say what
// each node kept complaining about.
func distinctWarnings(path string, n int) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return []string{fmt.Sprintf("(log unreadable: %v)", err)}
	}
	type kind struct {
		last  string
		count int
		order int
	}
	kinds := map[string]*kind{}
	lines := strings.Split(string(b), "\n")
	for i, l := range lines {
		if !strings.Contains(l, "level=WARN") && !strings.Contains(l, "level=ERROR") {
			continue
		}
		k := logNoise.ReplaceAllStringFunc(l, func(m string) string {
			if strings.HasPrefix(m, "shard=") {
				return m
			}
			return "#"
		})
		if kinds[k] == nil {
			kinds[k] = &kind{}
		}
		kinds[k].last, kinds[k].order = l, i
		kinds[k].count++
	}
	all := make([]*kind, 0, len(kinds))
	for _, k := range kinds {
		all = append(all, k)
	}
	slices.SortFunc(all, func(a, b *kind) int { return a.order - b.order })
	if len(all) > n {
		all = all[len(all)-n:]
	}
	out := make([]string, len(all))
	for i, k := range all {
		out[i] = fmt.Sprintf("%d× %s", k.count, k.last)
	}
	return out
}
