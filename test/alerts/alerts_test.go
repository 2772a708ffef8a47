// Package alerts tests the chart's alert rules with promtool: they are
// rendered by helm as a user would install them, checked, and run against
// the cases of testdata/rules_test.yaml.
package alerts

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// tool returns the path of a binary named by env, or found on PATH.
func tool(t *testing.T, env, name, hint string) string {
	t.Helper()
	if p := os.Getenv(env); p != "" {
		return p
	}
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is not on PATH (nor named by %s): %s", name, env, hint)
	}
	return p
}

// run runs a command and returns its output, failing the test with it.
func run(t *testing.T, name string, args ...string) []byte {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out.String())
	}
	return out.Bytes()
}

// rule is what the test reads of a rendered rule.
type rule struct {
	Alert       string            `json:"alert"`
	Annotations map[string]string `json:"annotations"`
}

// renderRules renders the chart's PrometheusRule for the release "sw" and
// returns its groups as a Prometheus rules file, and its alerts.
func renderRules(t *testing.T) ([]byte, []rule) {
	t.Helper()
	helm := tool(t, "HELM", "helm", "run through `make test`, which builds helm and exports HELM")
	out := run(t, helm, "template", "sw", filepath.Join("..", "..", "charts", "simple-workflow"),
		"--set", "database.url=postgres://x", "--set", "metrics.prometheusRule.enabled=true",
		"--show-only", "templates/prometheusrule.yaml")
	var pr struct {
		Kind string `json:"kind"`
		Spec struct {
			Groups []struct {
				Name  string `json:"name"`
				Rules []rule `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(out, &pr); err != nil {
		t.Fatalf("the rendered PrometheusRule does not parse: %v\n%s", err, out)
	}
	if pr.Kind != "PrometheusRule" || len(pr.Spec.Groups) == 0 {
		t.Fatalf("no PrometheusRule rendered:\n%s", out)
	}
	var raw struct {
		Spec struct {
			Groups []any `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(out, &raw); err != nil {
		t.Fatal(err)
	}
	file, err := yaml.Marshal(map[string]any{"groups": raw.Spec.Groups})
	if err != nil {
		t.Fatal(err)
	}
	var rules []rule
	for _, g := range pr.Spec.Groups {
		rules = append(rules, g.Rules...)
	}
	return file, rules
}

// The rules pass promtool's check and every case of testdata: each alert
// fires where it should, with its labels and annotations, and not for the
// bystanders beside it.
func TestAlertRulesFireAsTheirCasesSay(t *testing.T) {
	promtool := tool(t, "PROMTOOL", "promtool", "run `make prometheus` (Debian's prometheus package, as root) or install Prometheus")
	file, _ := renderRules(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), file, 0o644); err != nil {
		t.Fatal(err)
	}
	cases, err := os.ReadFile(filepath.Join("testdata", "rules_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules_test.yaml"), cases, 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, promtool, "check", "rules", filepath.Join(dir, "rules.yaml"))
	out := run(t, promtool, "test", "rules", filepath.Join(dir, "rules_test.yaml"))
	if !bytes.Contains(out, []byte("SUCCESS")) {
		t.Fatalf("promtool test rules:\n%s", out)
	}
}

// Every alert has a firing case in testdata and a runbook section in
// docs/operations.md, which its runbook_url names.
func TestEveryAlertHasACaseAndARunbook(t *testing.T) {
	_, rules := renderRules(t)
	cases, err := os.ReadFile(filepath.Join("testdata", "rules_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ops, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	headings := regexp.MustCompile(`(?m)^#### (SimpleWorkflow[A-Za-z]+)$`).FindAllStringSubmatch(string(ops), -1)
	var documented []string
	for _, h := range headings {
		documented = append(documented, h[1])
	}
	firing := regexp.MustCompile(`(?m)alertname: (\S+)\n\s+exp_alerts:\n\s+- exp_labels`)
	var tested []string
	for _, m := range firing.FindAllStringSubmatch(string(cases), -1) {
		tested = append(tested, m[1])
	}
	if len(rules) < 6 {
		t.Fatalf("%d alert rules rendered, want the six of the chart", len(rules))
	}
	for _, r := range rules {
		if !slices.Contains(tested, r.Alert) {
			t.Errorf("alert %s has no firing case in testdata/rules_test.yaml", r.Alert)
		}
		if !slices.Contains(documented, r.Alert) {
			t.Errorf("alert %s has no runbook section (#### %s) in docs/operations.md", r.Alert, r.Alert)
		}
		if want := "docs/operations.md#" + strings.ToLower(r.Alert); !strings.HasSuffix(r.Annotations["runbook_url"], want) {
			t.Errorf("alert %s's runbook_url %q does not end in %s", r.Alert, r.Annotations["runbook_url"], want)
		}
	}
}
