package alerts

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// The chart ships the dashboard file as it is, in a ConfigMap with the
// label Grafana's sidecar looks for (its name and value configurable),
// and every panel of it has a query.
func TestDashboardConfigMapCarriesTheDashboard(t *testing.T) {
	helm := tool(t, "HELM", "helm", "run through `make test`, which builds helm and exports HELM")
	out := run(t, helm, "template", "sw", filepath.Join("..", "..", "charts", "simple-workflow"),
		"--set", "database.url=postgres://x", "--set", "metrics.grafanaDashboard.enabled=true",
		"--set", "metrics.grafanaDashboard.namespace=monitoring", "--set", "metrics.grafanaDashboard.folder=Workflows",
		"--show-only", "templates/dashboard.yaml")
	var cm struct {
		Kind     string `json:"kind"`
		Metadata struct {
			Namespace   string            `json:"namespace"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
		Data map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal(out, &cm); err != nil {
		t.Fatalf("the ConfigMap does not parse: %v\n%s", err, out)
	}
	if cm.Kind != "ConfigMap" || cm.Metadata.Labels["grafana_dashboard"] != "1" || cm.Metadata.Namespace != "monitoring" ||
		cm.Metadata.Annotations["grafana_folder"] != "Workflows" {
		t.Fatalf("the dashboard's ConfigMap: %+v", cm.Metadata)
	}
	file, err := os.ReadFile(filepath.Join("..", "..", "charts", "simple-workflow", "dashboards", "simple-workflow.json"))
	if err != nil {
		t.Fatal(err)
	}
	var shipped, want any
	if err := json.Unmarshal([]byte(cm.Data["simple-workflow.json"]), &shipped); err != nil {
		t.Fatalf("the ConfigMap's dashboard is not JSON: %v", err)
	}
	if err := json.Unmarshal(file, &want); err != nil {
		t.Fatalf("dashboards/simple-workflow.json is not JSON: %v", err)
	}
	a, _ := json.Marshal(shipped)
	b, _ := json.Marshal(want)
	if string(a) != string(b) {
		t.Fatal("the ConfigMap's dashboard differs from dashboards/simple-workflow.json")
	}
	var dash struct {
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(file, &dash); err != nil {
		t.Fatal(err)
	}
	if dash.UID == "" || len(dash.Panels) < 8 {
		t.Fatalf("the dashboard has uid %q and %d panels", dash.UID, len(dash.Panels))
	}
	ops, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 || p.Targets[0].Expr == "" {
			t.Errorf("panel %q has no query", p.Title)
		}
		// docs/operations.md lists each panel beside its queries.
		for _, q := range p.Targets {
			row := "| " + p.Title + " | "
			if !bytes.Contains(ops, []byte(row)) || !bytes.Contains(ops, []byte("`"+strings.ReplaceAll(q.Expr, "|", `\|`)+"`")) {
				t.Errorf("docs/operations.md#dashboard does not list panel %q with its query %s", p.Title, q.Expr)
			}
		}
	}
	// Off by default.
	if out := run(t, helm, "template", "sw", filepath.Join("..", "..", "charts", "simple-workflow"),
		"--set", "database.url=postgres://x"); bytes.Contains(out, []byte("grafana_dashboard")) {
		t.Fatal("the dashboard's ConfigMap is rendered by default")
	}
}
