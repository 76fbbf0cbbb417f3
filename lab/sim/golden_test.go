package sim

import (
	"fmt"
	"testing"
	"time"
)

type goldenConfig struct {
	name     string
	cfg      Config
	policies []string
}

// goldenConfigs cover ties in event times (fixed compute), latency,
// stragglers, many workers and every paradigm.
func goldenConfigs() []goldenConfig {
	hetero := heteroConfig(LogNormal, 1, 2, 3, 1, 1)
	hetero.Iters, hetero.Latency = 400, time.Millisecond
	hetero.Models[1].StragglerProb, hetero.Models[1].StragglerFactor, hetero.Models[1].StragglerIters = 0.02, 5, 4
	fixed := heteroConfig(Fixed, 1, 1.5)
	fixed.Workers, fixed.Iters = 37, 300
	wide := heteroConfig(Jitter, 1, 1, 1, 4)
	wide.Workers, wide.Iters = 300, 60
	return []goldenConfig{
		{"hetero", hetero, []string{"bsp", "asp", "ssp:3", "dssp:3:12", "dssp:2:6:wait", "dssp-paper:3:12", "dssp-paper:1:4:wait"}},
		{"fixed", fixed, []string{"bsp", "asp", "ssp:2", "dssp:3:12", "dssp:0:3", "dssp-paper:3:12"}},
		{"wide", wide, []string{"bsp", "asp", "ssp:3", "dssp:3:12", "dssp-paper:3:12:wait"}},
	}
}

// TestRunGolden pins whole Results, taken from the simulator before its
// gate and event queue were reworked for speed (commit 895db22): the rework
// must not change a single decision.
func TestRunGolden(t *testing.T) {
	var got []string
	for _, gc := range goldenConfigs() {
		for _, pol := range gc.policies {
			got = append(got, fmt.Sprintf("%s %s: %+v", gc.name, pol, run(t, gc.cfg, pol)))
		}
	}
	if len(got) != len(goldenResults) {
		t.Fatalf("%d results, %d golden", len(got), len(goldenResults))
	}
	for i := range got {
		if got[i] != goldenResults[i] {
			t.Errorf("result %d:\n got %s\nwant %s", i, got[i], goldenResults[i])
		}
	}
}

var goldenResults = []string{
	"hetero bsp: {Policy:bsp Pushes:2000 SimTime:2m28.288810339s ItersPerSec:13.487194316468255 WaitFraction:0.5226205122209265 MeanGap:0 MaxGap:0 MinWorkerIters:400 MaxWorkerIters:400 Stats:{Pushes:2000 Waits:1600 ControllerCalls:0 Grants:0 GrantedPushes:0}}",
	"hetero asp: {Policy:asp Pushes:2000 SimTime:54.726298712s ItersPerSec:36.54550092132311 WaitFraction:0 MeanGap:148.123 MaxGap:361 MinWorkerIters:182 MaxWorkerIters:543 Stats:{Pushes:2000 Waits:0 ControllerCalls:0 Grants:0 GrantedPushes:0}}",
	"hetero ssp:3: {Policy:ssp:3 Pushes:2000 SimTime:2m11.401975714s ItersPerSec:15.220471299100211 WaitFraction:0.4618703964991739 MeanGap:2.301452178267401 MaxGap:3 MinWorkerIters:397 MaxWorkerIters:401 Stats:{Pushes:2000 Waits:1409 ControllerCalls:0 Grants:0 GrantedPushes:0}}",
	"hetero dssp:3:12: {Policy:dssp:3:12 Pushes:2000 SimTime:2m8.887253348s ItersPerSec:15.517438288485607 WaitFraction:0.45254773776824453 MeanGap:4.3945 MaxGap:15 MinWorkerIters:395 MaxWorkerIters:405 Stats:{Pushes:2000 Waits:712 ControllerCalls:213 Grants:162 GrantedPushes:722}}",
	"hetero dssp:2:6:wait: {Policy:dssp:2:6:wait Pushes:2000 SimTime:2m15.066169158s ItersPerSec:14.807557010522789 WaitFraction:0.4768820462409994 MeanGap:2.6045 MaxGap:8 MinWorkerIters:396 MaxWorkerIters:404 Stats:{Pushes:2000 Waits:848 ControllerCalls:337 Grants:210 GrantedPushes:638}}",
	"hetero dssp-paper:3:12: {Policy:dssp-paper:3:12 Pushes:2000 SimTime:2m10.502731328s ItersPerSec:15.32534974285929 WaitFraction:0.4597393492953453 MeanGap:23.60991487230846 MaxGap:232 MinWorkerIters:394 MaxWorkerIters:414 Stats:{Pushes:2000 Waits:823 ControllerCalls:88 Grants:81 GrantedPushes:511}}",
	"hetero dssp-paper:1:4:wait: {Policy:dssp-paper:1:4:wait Pushes:2000 SimTime:2m17.470209888s ItersPerSec:14.548606579050428 WaitFraction:0.49270839708023534 MeanGap:7.1625 MaxGap:93 MinWorkerIters:381 MaxWorkerIters:473 Stats:{Pushes:2000 Waits:1005 ControllerCalls:188 Grants:152 GrantedPushes:410}}",
	"fixed bsp: {Policy:bsp Pushes:11100 SimTime:45s ItersPerSec:246.66666666666666 WaitFraction:0.17117117117117117 MeanGap:0 MaxGap:0 MinWorkerIters:300 MaxWorkerIters:300 Stats:{Pushes:11100 Waits:10800 ControllerCalls:0 Grants:0 GrantedPushes:0}}",
	"fixed asp: {Policy:asp Pushes:11100 SimTime:35.85s ItersPerSec:309.6234309623431 WaitFraction:0 MeanGap:37.23603603603603 MaxGap:120 MinWorkerIters:238 MaxWorkerIters:358 Stats:{Pushes:11100 Waits:0 ControllerCalls:0 Grants:0 GrantedPushes:0}}",
	"fixed ssp:2: {Policy:ssp:2 Pushes:11100 SimTime:44.85s ItersPerSec:247.4916387959866 WaitFraction:0.16888125583777758 MeanGap:1.4823571879794242 MaxGap:2 MinWorkerIters:298 MaxWorkerIters:301 Stats:{Pushes:11100 Waits:5605 ControllerCalls:0 Grants:0 GrantedPushes:0}}",
	"fixed dssp:3:12: {Policy:dssp:3:12 Pushes:11100 SimTime:44.8s ItersPerSec:247.76785714285717 WaitFraction:0.1673503861003861 MeanGap:2.390868898312731 MaxGap:15 MinWorkerIters:298 MaxWorkerIters:302 Stats:{Pushes:11100 Waits:4881 ControllerCalls:5147 Grants:266 GrantedPushes:684}}",
	"fixed dssp:0:3: {Policy:dssp:0:3 Pushes:11100 SimTime:45s ItersPerSec:246.66666666666666 WaitFraction:0.17117117117117117 MeanGap:0 MaxGap:0 MinWorkerIters:300 MaxWorkerIters:300 Stats:{Pushes:11100 Waits:10800 ControllerCalls:10800 Grants:0 GrantedPushes:0}}",
	"fixed dssp-paper:3:12: {Policy:dssp-paper:3:12 Pushes:11100 SimTime:35.85s ItersPerSec:309.6234309623431 WaitFraction:0 MeanGap:37.23603603603603 MaxGap:120 MinWorkerIters:238 MaxWorkerIters:358 Stats:{Pushes:11100 Waits:0 ControllerCalls:2223 Grants:2223 GrantedPushes:4446}}",
	"wide bsp: {Policy:bsp Pushes:18000 SimTime:26.336839902s ItersPerSec:683.453294585775 WaitFraction:0.6013029864957613 MeanGap:0 MaxGap:0 MinWorkerIters:60 MaxWorkerIters:60 Stats:{Pushes:18000 Waits:17940 ControllerCalls:0 Grants:0 GrantedPushes:0}}",
	"wide asp: {Policy:asp Pushes:18000 SimTime:7.443835252s ItersPerSec:2418.1083259686307 WaitFraction:0 MeanGap:26.846222222222224 MaxGap:58 MinWorkerIters:18 MaxWorkerIters:76 Stats:{Pushes:18000 Waits:0 ControllerCalls:0 Grants:0 GrantedPushes:0}}",
	"wide ssp:3: {Policy:ssp:3 Pushes:18000 SimTime:23.347621112s ItersPerSec:770.9564890424114 WaitFraction:0.5541074692453661 MeanGap:2.5478645891716174 MaxGap:3 MinWorkerIters:57 MaxWorkerIters:61 Stats:{Pushes:18000 Waits:12983 ControllerCalls:0 Grants:0 GrantedPushes:0}}",
	"wide dssp:3:12: {Policy:dssp:3:12 Pushes:18000 SimTime:22.925274719s ItersPerSec:785.1596205772822 WaitFraction:0.5493918843651436 MeanGap:5.277089522955323 MaxGap:15 MinWorkerIters:56 MaxWorkerIters:68 Stats:{Pushes:18000 Waits:5674 ControllerCalls:2602 Grants:1675 GrantedPushes:7387}}",
	"wide dssp-paper:3:12:wait: {Policy:dssp-paper:3:12:wait Pushes:18000 SimTime:20.924108579s ItersPerSec:860.2517011436887 WaitFraction:0.5235759149218154 MeanGap:15.516046069551605 MaxGap:156 MinWorkerIters:51 MaxWorkerIters:207 Stats:{Pushes:18000 Waits:6039 ControllerCalls:1441 Grants:908 GrantedPushes:6519}}",
}
