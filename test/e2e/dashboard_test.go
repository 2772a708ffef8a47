package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/simple-workflow/simple-workflow/internal/engine"
	"github.com/simple-workflow/simple-workflow/internal/pgtest"
)

// dashboardJob is the job name the spec's Prometheus scrapes the manager
// under (the dashboard's $job).
const dashboardJob = "simple-workflow-e2e"

// promResult is an answer of Prometheus' HTTP API.
type promResult struct {
	Status string `json:"status"`
	Error  string `json:"error"`
	Data   struct {
		ResultType string            `json:"resultType"`
		Result     []json.RawMessage `json:"result"`
	} `json:"data"`
}

// Every query of the chart's Grafana dashboard, run against a real
// Prometheus scraping the suite's real manager while runs succeed, fail,
// retry, lose their lease and wait, and a worker pool scales: each returns
// series, and names only metrics and labels the manager exports.
var _ = Describe("the Grafana dashboard", Ordered, func() {
	var prom string

	query := func(path string, params url.Values) promResult {
		resp, err := http.Get(prom + path + "?" + params.Encode())
		Expect(err).NotTo(HaveOccurred())
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		Expect(err).NotTo(HaveOccurred())
		var r promResult
		Expect(json.Unmarshal(b, &r)).To(Succeed(), "%s", b)
		return r
	}

	BeforeAll(func() {
		bin := os.Getenv("PROMETHEUS")
		if bin == "" {
			var err error
			bin, err = exec.LookPath("prometheus")
			Expect(err).NotTo(HaveOccurred(), "no prometheus on PATH: run `make prometheus` (Debian's package, as root)")
		}
		dir := GinkgoT().TempDir()
		cfg := filepath.Join(dir, "prometheus.yml")
		Expect(os.WriteFile(cfg, []byte(fmt.Sprintf(`global: {scrape_interval: 1s, evaluation_interval: 1s}
scrape_configs:
- job_name: %s
  honor_labels: true
  static_configs: [{targets: [%q]}]
`, dashboardJob, metricsAddr)), 0o600)).To(Succeed())
		addr := freePort()
		p := start("prometheus", nil, bin, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, "data"),
			"--web.listen-address="+addr)
		DeferCleanup(func() { p.stop(syscall.SIGTERM) })
		prom = "http://" + addr
		Eventually(func() int {
			// Not yet listening at first: no answer counts as none.
			resp, err := http.Get(prom + "/api/v1/query?" + url.Values{"query": {fmt.Sprintf(`up{job=%q} == 1`, dashboardJob)}}.Encode())
			if err != nil {
				return 0
			}
			defer resp.Body.Close()
			var r promResult
			if json.NewDecoder(resp.Body).Decode(&r) != nil {
				return 0
			}
			return len(r.Data.Result)
		}, 60*time.Second).Should(Equal(1), "Prometheus scrapes the manager")
	})

	It("answers every panel's query with series of exported metrics and labels", func() {
		By("making runs succeed, fail, retry, lose their lease and wait, beside a worker pool")
		mustKubectl("create", "namespace", "e2e-dash")
		mustKubectl("apply", "-n", "e2e-dash", "-f", writeManifest("dash.yaml", `
apiVersion: apps/v1
kind: Deployment
metadata: {name: dash-workers}
spec:
  replicas: 0
  selector: {matchLabels: {app: dash-workers}}
  template:
    metadata: {labels: {app: dash-workers}}
    spec: {containers: [{name: worker, image: example.invalid/worker:1}]}
---
apiVersion: workflow.simpleworkflow.dev/v1alpha1
kind: WorkflowRegistry
metadata: {name: dash}
spec:
  workers:
  - scaleTargetRef: {name: dash-workers}
    runtime: go
    typePrefixes: [dash.]
    maxReplicas: 2
`))
		pool, err := pgxpool.New(ctx, dbURL)
		Expect(err).NotTo(HaveOccurred())
		defer pool.Close()
		eng, err := engine.New(pool)
		Expect(err).NotTo(HaveOccurred())
		create := func(typ string, attempts int) {
			_, err := eng.CreateRun(ctx, engine.CreateParams{Type: typ, Namespace: "e2e-dash", MaxAttempts: attempts})
			Expect(err).NotTo(HaveOccurred())
		}
		claim := func(prefix string, lease time.Duration) []engine.ClaimedRun {
			runs, err := eng.ClaimRuns(ctx, engine.ClaimParams{WorkerID: "dash-e2e", TypePrefixes: []string{prefix},
				Limit: 100, LeaseDuration: lease, Namespace: "e2e-dash"})
			Expect(err).NotTo(HaveOccurred())
			return runs
		}
		for range 5 {
			create("dash.ok.v1", 1)
		}
		for _, r := range claim("dash.ok.", time.Minute) {
			_, err := eng.CompleteRuns(ctx, "dash-e2e", []engine.Completion{{LeaseRef: r.Ref()}})
			Expect(err).NotTo(HaveOccurred())
		}
		for range 3 {
			create("dash.bad.v1", 1) // failed for good
		}
		create("dash.again.v1", 3) // retried
		for _, r := range claim("dash.", time.Minute) {
			_, err := eng.FailRuns(ctx, "dash-e2e", []engine.Failure{{LeaseRef: r.Ref(), Error: "dashboard e2e", Retryable: true}})
			Expect(err).NotTo(HaveOccurred())
		}
		create("dash.lost.v1", 2)
		Expect(claim("dash.lost.", time.Second)).To(HaveLen(1)) // never heartbeated: the manager reaps it
		create("dash.wait.v1", 1)

		By("seeing the load counted: a lease expired, runs failed and were retried")
		metricName := regexp.MustCompile(`\b(simpleworkflow_[a-z_]+|leader_election_[a-z_]+)\b`)
		for _, q := range []string{
			fmt.Sprintf(`simpleworkflow_lease_expiries_total{job=%q} > 0`, dashboardJob),
			fmt.Sprintf(`simpleworkflow_run_duration_seconds_count{job=%q,namespace="e2e-dash",status="failed"} >= 3`, dashboardJob),
			fmt.Sprintf(`simpleworkflow_transitions_total{job=%q,event="retried"} > 0`, dashboardJob),
			fmt.Sprintf(`simpleworkflow_pool_replicas{job=%q,namespace="e2e-dash",registry="dash"} >= 0`, dashboardJob),
		} {
			Eventually(func() int {
				return len(query("/api/v1/query", url.Values{"query": {q}}).Data.Result)
			}, 90*time.Second, time.Second).Should(BeNumerically(">", 0), func() string {
				// What the manager exports and logs, to tell a metric not
				// counted from one not scraped.
				name := metricName.FindString(q)
				_, body := httpGet("http://" + metricsAddr + "/metrics")
				var lines []string
				for l := range strings.Lines(body) {
					if strings.HasPrefix(l, name) {
						lines = append(lines, l)
					}
				}
				return fmt.Sprintf("no series: %s\nthe manager at %s exports:\n%s\nits log ends:\n%s", q, metricsAddr,
					strings.Join(lines, ""), tail(manager.output(), 6000))
			})
		}

		By("querying Prometheus with each of the dashboard's queries")
		file, err := pgtest.RepoFile("charts/simple-workflow/dashboards/simple-workflow.json")
		Expect(err).NotTo(HaveOccurred())
		raw, err := os.ReadFile(file)
		Expect(err).NotTo(HaveOccurred())
		var dash struct {
			Panels []struct {
				Title   string `json:"title"`
				Targets []struct {
					Expr         string `json:"expr"`
					LegendFormat string `json:"legendFormat"`
				} `json:"targets"`
			} `json:"panels"`
			Templating struct {
				List []struct {
					Name       string `json:"name"`
					Definition string `json:"definition"`
				} `json:"list"`
			} `json:"templating"`
		}
		Expect(json.Unmarshal(raw, &dash)).To(Succeed())
		Expect(dash.Panels).NotTo(BeEmpty())
		byLabels := regexp.MustCompile(`\b(?:by|without|on|ignoring)\s*\(([^)]*)\)`)
		vars := strings.NewReplacer(`"$job"`, fmt.Sprintf("%q", dashboardJob), "$inbox", ".*", "$namespace", ".*",
			"$__rate_interval", "1m")
		matchers := regexp.MustCompile(`([a-z_]+)\s*(?:=~|!=|!~|=)\s*"`)
		exported := map[string][]string{}
		labelsOf := func(metric string) []string {
			if l, ok := exported[metric]; ok {
				return l
			}
			resp, err := http.Get(prom + "/api/v1/labels?" +
				url.Values{"match[]": {fmt.Sprintf(`%s{job=%q}`, metric, dashboardJob)}}.Encode())
			Expect(err).NotTo(HaveOccurred())
			defer resp.Body.Close()
			var r struct {
				Data []string `json:"data"`
			}
			Expect(json.NewDecoder(resp.Body).Decode(&r)).To(Succeed())
			names := r.Data
			if len(names) > 0 {
				exported[metric] = names
			}
			return names
		}
		type check struct{ title, expr string }
		var checks []check
		legendLabel := regexp.MustCompile(`\{\{\s*([a-z_]+)\s*\}\}`)
		for _, p := range dash.Panels {
			Expect(p.Targets).NotTo(BeEmpty(), "panel %q has no query", p.Title)
			for _, t := range p.Targets {
				checks = append(checks, check{p.Title, vars.Replace(t.Expr)})
				// A legend names only labels its query keeps.
				kept := byLabels.FindStringSubmatch(t.Expr)
				for _, m := range legendLabel.FindAllStringSubmatch(t.LegendFormat, -1) {
					Expect(kept).NotTo(BeNil(), "panel %q's legend names %q but its query keeps no labels", p.Title, m[1])
					Expect(strings.Split(strings.ReplaceAll(kept[1], " ", ""), ",")).To(ContainElement(m[1]),
						"panel %q's legend names %q, which its query does not keep: %s", p.Title, m[1], t.Expr)
				}
			}
		}
		for _, v := range dash.Templating.List {
			if m := regexp.MustCompile(`^label_values\((.*), ([a-z_]+)\)$`).FindStringSubmatch(v.Definition); m != nil {
				checks = append(checks, check{"variable " + v.Name, fmt.Sprintf("count by (%s) (%s)", m[2], vars.Replace(m[1]))})
			}
		}
		for _, c := range checks {
			Eventually(func() int {
				r := query("/api/v1/query", url.Values{"query": {c.expr}})
				Expect(r.Status).To(Equal("success"), "panel %q: %s: %s", c.title, c.expr, r.Error)
				return len(r.Data.Result)
			}, 90*time.Second, time.Second).Should(BeNumerically(">", 0), "panel %q returns no series: %s", c.title, c.expr)
			for _, metric := range slices.Compact(metricName.FindAllString(c.expr, -1)) {
				labels := labelsOf(metric)
				Expect(labels).NotTo(BeEmpty(), "panel %q: the manager exports no %s", c.title, metric)
				var used []string
				for _, m := range byLabels.FindAllStringSubmatch(c.expr, -1) {
					for _, l := range strings.Split(m[1], ",") {
						used = append(used, strings.TrimSpace(l))
					}
				}
				for _, m := range matchers.FindAllStringSubmatch(c.expr, -1) {
					used = append(used, m[1])
				}
				for _, l := range used {
					if l == "le" && !strings.HasSuffix(metric, "_bucket") {
						continue
					}
					if slices.Contains(labels, l) {
						continue
					}
					// A label of another metric of the same query.
					found := false
					for _, other := range metricName.FindAllString(c.expr, -1) {
						found = found || slices.Contains(labelsOf(other), l)
					}
					Expect(found).To(BeTrue(), "panel %q names label %q, which no metric of its query has: %s", c.title, l, c.expr)
				}
			}
		}
		GinkgoWriter.Printf("%d dashboard queries answered with series\n", len(checks))

		By("dropping a deleted pool's gauges, so that no alert stays on a pool that is gone")
		poolLabels := `namespace="e2e-dash",pool="dash-workers",registry="dash"`
		Expect(func() string { _, body := httpGet("http://" + metricsAddr + "/metrics"); return body }()).To(
			ContainSubstring("simpleworkflow_pool_max_replicas{" + poolLabels + "}"))
		mustKubectl("delete", "workflowregistry", "dash", "-n", "e2e-dash", "--timeout=60s")
		Eventually(func() string { _, body := httpGet("http://" + metricsAddr + "/metrics"); return body }, 30*time.Second).ShouldNot(
			ContainSubstring(poolLabels))
	})
})
