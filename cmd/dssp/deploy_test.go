package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"dsspmesh/node/records"
	"dsspmesh/node/status"
)

// The deployment files live at the repository root, two levels up.
const repoRoot = "../.."

// nodeHelpFlags is every flag `dssp node --help` lists.
func nodeHelpFlags(t *testing.T) map[string]bool {
	t.Helper()
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"node", "--help"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([a-z0-9-]+)`).FindAllStringSubmatch(out.String(), -1) {
		flags[m[1]] = true
	}
	if !flags["join"] || !flags["data-dir"] {
		t.Fatalf("could not read the flags from dssp node --help:\n%s", out.String())
	}
	return flags
}

var (
	envFlag   = regexp.MustCompile(`\bDSSP_([A-Z0-9_]+)`)
	dashFlag  = regexp.MustCompile(`--([a-z0-9-]+)`)
	metricRef = regexp.MustCompile(`\bdssp_[a-z0-9_]+`)
)

// flagOfEnv is the flag a DSSP_* variable sets (nodecmd.LoadSources's rule).
func flagOfEnv(name string) string { return strings.ReplaceAll(strings.ToLower(name), "_", "-") }

// commandLineFlags returns the flags given to `dssp node` in text: on each
// line that runs it, the --flags after "dssp node".
func commandLineFlags(text string) []string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		if _, rest, ok := strings.Cut(line, "dssp node"); ok {
			for _, m := range dashFlag.FindAllStringSubmatch(rest, -1) {
				out = append(out, m[1])
			}
		}
	}
	return out
}

func envFlags(text string) []string {
	var out []string
	for _, m := range envFlag.FindAllStringSubmatch(text, -1) {
		out = append(out, flagOfEnv(m[1]))
	}
	return out
}

// statefulSetFlags decodes the StatefulSet and returns the flags of the
// dssp container: its args after "node" and its DSSP_* variables.
func statefulSetFlags(t *testing.T, b []byte) []string {
	t.Helper()
	var sts struct {
		Kind string
		Spec struct {
			ServiceName string `yaml:"serviceName"`
			Template    struct {
				Spec struct {
					Containers []struct {
						Name string
						Args []string
						Env  []struct{ Name string }
					}
				}
			}
		}
	}
	if err := yaml.Unmarshal(b, &sts); err != nil {
		t.Fatalf("statefulset.yaml: %v", err)
	}
	if sts.Kind != "StatefulSet" || sts.Spec.ServiceName != "dssp" {
		t.Fatalf("statefulset.yaml: kind %q, serviceName %q", sts.Kind, sts.Spec.ServiceName)
	}
	for _, c := range sts.Spec.Template.Spec.Containers {
		if c.Name != "dssp" {
			continue
		}
		if len(c.Args) == 0 || c.Args[0] != "node" {
			t.Fatalf("statefulset.yaml: the dssp container runs %v, not dssp node", c.Args)
		}
		var out []string
		for _, a := range c.Args[1:] {
			name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
			if !strings.HasPrefix(a, "--") {
				t.Errorf("statefulset.yaml: argument %q is not a --flag", a)
			}
			out = append(out, name)
		}
		for _, e := range c.Env {
			if n, ok := strings.CutPrefix(e.Name, "DSSP_"); ok {
				out = append(out, flagOfEnv(n))
			}
		}
		return out
	}
	t.Fatal("statefulset.yaml: no container named dssp")
	return nil
}

// TestDeployFilesUseOnlyRealFlags reads the Dockerfile, the Kubernetes
// and systemd files and checks that every flag they give `dssp node`
// (on a command line or as a DSSP_* variable) is one dssp node --help
// lists, so the files cannot drift from the binary.
func TestDeployFilesUseOnlyRealFlags(t *testing.T) {
	known := nodeHelpFlags(t)
	read := func(rel string) string {
		b, err := os.ReadFile(filepath.Join(repoRoot, rel))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	used := map[string][]string{}
	docker := read("Dockerfile")
	used["Dockerfile"] = append(commandLineFlags(docker), envFlags(docker)...)
	service := read("deploy/systemd/dssp.service")
	used["deploy/systemd/dssp.service"] = append(commandLineFlags(service), envFlags(service)...)
	used["deploy/systemd/dssp.env"] = envFlags(read("deploy/systemd/dssp.env"))
	sts := read("deploy/kubernetes/statefulset.yaml")
	used["deploy/kubernetes/statefulset.yaml"] = append(statefulSetFlags(t, []byte(sts)), commandLineFlags(sts)...)

	all := map[string]bool{}
	for file, flags := range used {
		if len(flags) < 3 {
			t.Errorf("%s: only %v found; is the parser still reading it?", file, flags)
		}
		for _, f := range flags {
			all[f] = true
			if !known[f] {
				t.Errorf("%s uses --%s, which dssp node does not have", file, f)
			}
		}
	}
	for _, f := range []string{"join", "key", "data-dir", "host", "http-addr"} {
		if !all[f] {
			t.Errorf("no deployment file sets --%s", f)
		}
	}
	if !strings.Contains(sts, "path: /status") || !strings.Contains(sts, "secretName: dssp-mesh-key") {
		t.Error("statefulset.yaml: probes on /status and the key from the dssp-mesh-key Secret expected")
	}
	if _, err := os.Stat(filepath.Join(repoRoot, "deploy/kubernetes/service.yaml")); err != nil {
		t.Error(err)
	}
}

// TestDeployMonitoringNamesRealMetrics checks that every dssp_ metric the
// Grafana dashboard and the scrape config name is one a node exports, and
// that promtool accepts the scrape config where promtool is installed.
func TestDeployMonitoringNamesRealMetrics(t *testing.T) {
	zero := uint32(0)
	st := func() status.Status {
		return status.Status{Node: "node-a", Now: time.Unix(10, 0),
			Shards:  []records.ShardStatus{{ID: zero, Leader: "node-a", Term: 1, Local: "leader"}},
			Workers: []records.WorkerStatus{{ID: "node-a"}}, Worker: &records.LocalWorker{},
			Eval: &records.EvalResult{Accuracy: 0.9, By: "node-a"}}
	}
	m := status.NewMetrics(st)
	m.RegisterWorker() // a training node's
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{}
	for _, f := range fams {
		exported[f.GetName()] = true
		if f.GetType().String() == "HISTOGRAM" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				exported[f.GetName()+s] = true
			}
		}
	}
	b, err := os.ReadFile(filepath.Join(repoRoot, "deploy/grafana/dssp-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("grafana dashboard: %v", err)
	}
	var names []string
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, m := range metricRef.FindAllString(tg.Expr, -1) {
				if !exported[m] {
					t.Errorf("grafana panel %q queries %s, which no node exports", p.Title, m)
				}
				names = append(names, m)
			}
		}
	}
	for _, h := range []string{"dssp_worker_push_duration_seconds_bucket", "dssp_worker_gate_hold_seconds_bucket", "dssp_shard_raft_apply_seconds_bucket", "dssp_eval_duration_seconds_count"} {
		if !slices.Contains(names, h) {
			t.Errorf("the dashboard charts no %s", h)
		}
	}
	if promtool, err := exec.LookPath("promtool"); err == nil {
		out, err := exec.Command(promtool, "check", "config", filepath.Join(repoRoot, "deploy/prometheus/prometheus.yml")).CombinedOutput()
		if err != nil {
			t.Errorf("promtool check config: %v\n%s", err, out)
		}
	}
}

// TestDeployFilesWorkOnABareHost checks what a host with only the binary
// (or only the image) needs: the systemd files give MNIST's folder
// (DSSP_DATA) and say how to put the files there; the image holds MNIST
// at its DSSP_DATA; the Dockerfile's keygen example writes into a folder
// the image creates owned by the user it runs as; and the Kubernetes
// containers whose image is a :latest tag (a locally built dssp:latest)
// do not pull it from a registry on every start.
func TestDeployFilesWorkOnABareHost(t *testing.T) {
	read := func(rel string) string {
		b, err := os.ReadFile(filepath.Join(repoRoot, rel))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	setting := regexp.MustCompile(`(?m)^\s*(?:ENV\s+)?DSSP_DATA=(\S+)`)

	env, service := read("deploy/systemd/dssp.env"), read("deploy/systemd/dssp.service")
	if m := setting.FindStringSubmatch(env); m == nil {
		t.Error("deploy/systemd/dssp.env sets no DSSP_DATA: a host without a Go module cache finds no MNIST")
	} else if !strings.Contains(service, "install -d "+m[1]) {
		t.Errorf("deploy/systemd/dssp.service: the install steps do not create DSSP_DATA's folder %s", m[1])
	}

	docker := read("Dockerfile")
	final := docker[strings.LastIndex(docker, "\nFROM "):]
	user := regexp.MustCompile(`(?m)^USER (\d+)`).FindStringSubmatch(final)
	if user == nil {
		t.Fatal("Dockerfile: the runtime stage sets no numeric USER")
	}
	owned := map[string]bool{} // folders the runtime stage copies in owned by USER
	copied := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^COPY (.*) (\S+)$`).FindAllStringSubmatch(final, -1) {
		copied[m[2]] = true
		if strings.Contains(m[1], "--chown="+user[1]+":") {
			owned[m[2]] = true
		}
	}
	if m := setting.FindStringSubmatch(final); m == nil || !copied[m[1]] {
		t.Errorf("Dockerfile: DSSP_DATA %v is not a folder the image copies in (%v)", m, copied)
	}
	keygen := regexp.MustCompile(`dssp keygen --out (\S+)`).FindStringSubmatch(docker)
	if keygen == nil {
		t.Fatal("Dockerfile: no keygen example found")
	}
	if dir := filepath.Dir(keygen[1]); !owned[dir] {
		t.Errorf("Dockerfile: keygen writes %s, but the image has no %s owned by its user %s (folders it owns: %v)", keygen[1], dir, user[1], owned)
	}

	var sts struct {
		Spec struct {
			Template struct {
				Spec struct {
					Containers []struct {
						Name, Image     string
						ImagePullPolicy string `yaml:"imagePullPolicy"`
					}
				}
			}
		}
	}
	if err := yaml.Unmarshal([]byte(read("deploy/kubernetes/statefulset.yaml")), &sts); err != nil {
		t.Fatal(err)
	}
	if len(sts.Spec.Template.Spec.Containers) == 0 {
		t.Fatal("statefulset.yaml: no containers decoded")
	}
	for _, c := range sts.Spec.Template.Spec.Containers {
		_, tag, tagged := strings.Cut(c.Image[strings.LastIndex(c.Image, "/")+1:], ":")
		if (!tagged || tag == "latest") && c.ImagePullPolicy != "IfNotPresent" && c.ImagePullPolicy != "Never" {
			t.Errorf("statefulset.yaml: container %s runs %s with imagePullPolicy %q: Kubernetes pulls a :latest image on every start, which fails for a locally built one", c.Name, c.Image, c.ImagePullPolicy)
		}
	}
}
