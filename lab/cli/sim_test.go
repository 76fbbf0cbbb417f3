package cli

import (
	"testing"

	"dsspmesh/lab/sim"
)

// TestRunParadigmsInParallelIsSequential: the results do not depend on how
// many paradigms run at a time, and come back in the policies' order.
func TestRunParadigmsInParallelIsSequential(t *testing.T) {
	cfg := sim.DefaultConfig()
	cfg.Workers, cfg.Iters = 16, 200
	policies, err := parseParadigms("bsp,asp,ssp:3,dssp:3:12,dssp-paper:3:12")
	if err != nil {
		t.Fatal(err)
	}
	one, many := runParadigms(cfg, policies, 1), runParadigms(cfg, policies, 4)
	for i := range policies {
		if one[i].err != nil || many[i].err != nil || one[i].res != many[i].res || one[i].res.Policy != policies[i] {
			t.Errorf("%s: sequential %+v %v, parallel %+v %v", policies[i], one[i].res, one[i].err, many[i].res, many[i].err)
		}
	}
}
