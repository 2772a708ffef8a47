package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/pgtest"
)

// Three Postgres servers: the suite's (the default inbox) and two of this
// spec's own, served by WorkflowInboxes b and c; five namespaces spread
// over them. One server is stopped for a minute while the others' runs
// keep their rate; on its return every run of its namespaces finishes
// exactly once.
var _ = Describe("several inboxes", Ordered, func() {
	type team struct {
		ns, inbox string
		pool      *pgxpool.Pool
		url       string
		worker    *process
	}
	var (
		clusterB, clusterC *pgtest.Cluster
		teams              []*team
	)
	// consoleAs fetches a page of the suite's manager's console as a
	// ServiceAccount allowed every namespace (made by BeforeAll), bounded.
	var consoleToken string
	consoleAs := func(path string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+consoleAddr+path, nil)
		Expect(err).NotTo(HaveOccurred())
		req.Header.Set("Authorization", "Bearer "+consoleToken)
		resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// renderChart asks the API server (helm install --dry-run=server: the
	// chart's lookups are answered) what the chart would install in ns with
	// its example worker.
	renderChart := func(ns string, set ...string) (string, error) {
		chart, err := pgtest.RepoFile("charts/simple-workflow")
		Expect(err).NotTo(HaveOccurred())
		args := []string{"install", "probe", chart, "--dry-run=server", "--namespace", ns,
			"--set", "exampleWorker.enabled=true", "--set", "database.url=postgres://chart@nowhere/none"}
		for _, kv := range set {
			args = append(args, "--set", kv)
		}
		cmd := exec.CommandContext(ctx, helmBin, args...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+cp.Kubeconfig)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	mounted := regexp.MustCompile(`(?s)name: database\s+secret:\s+secretName: (\S+)`)
	// mountOf is the Secret the rendered example worker's Deployment mounts.
	mountOf := func(out string) string {
		for _, doc := range strings.Split(out, "\n---\n") {
			if strings.Contains(doc, "templates/example-worker.yaml") && strings.Contains(doc, "kind: Deployment") {
				m := mounted.FindStringSubmatch(doc)
				Expect(m).NotTo(BeNil(), "no database volume in:\n%s", doc)
				return m[1]
			}
		}
		Fail("no example worker Deployment in:\n" + out)
		return ""
	}
	byNS := func(ns string) *team {
		for _, t := range teams {
			if t.ns == ns {
				return t
			}
		}
		Fail("no team " + ns)
		return nil
	}
	inboxStatus := func(name string) func() workflowv1alpha1.WorkflowInboxStatus {
		return func() workflowv1alpha1.WorkflowInboxStatus {
			var in workflowv1alpha1.WorkflowInbox
			_ = k8sClient.Get(ctx, client.ObjectKey{Name: name}, &in)
			return in.Status
		}
	}
	// cond shows an inbox's condition as "status/reason: message".
	cond := func(inbox, typ string) func() string {
		return func() string {
			c := meta.FindStatusCondition(inboxStatus(inbox)().Conditions, typ)
			if c == nil {
				return ""
			}
			return string(c.Status) + "/" + c.Reason + ": " + c.Message
		}
	}
	// ready shows an inbox's Ready condition as "status/reason".
	ready := func(name string) func() string {
		return func() string {
			status, _, _ := strings.Cut(cond(name, workflowv1alpha1.ConditionInboxReady)(), ":")
			return status
		}
	}
	// runsIn counts the runs a namespace has in a database.
	runsIn := func(p *pgxpool.Pool, ns string) int {
		var n int
		Expect(p.QueryRow(ctx, "select count(*) from workflow.workflow_run where namespace = $1", ns).Scan(&n)).To(Succeed())
		return n
	}
	// ownPhases is phases without the runs the schedule made.
	ownPhases := func(ns string) func() string {
		return func() string {
			var out []string
			for _, f := range strings.Fields(phases(ns)()) {
				if !strings.HasPrefix(f, "minutely-") {
					out = append(out, f)
				}
			}
			return strings.Join(out, " ")
		}
	}
	// loadClient is not held back by client-go's default 5 requests a
	// second, so the load is what the test offers.
	var loadClient client.Client
	newRun := func(ns, name, typ, payload string, labels map[string]string) {
		wfr := &workflowv1alpha1.WorkflowRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
			Spec: workflowv1alpha1.WorkflowRunSpec{Type: typ, Payload: &apiextensionsv1.JSON{Raw: []byte(payload)}}}
		ExpectWithOffset(1, loadClient.Create(ctx, wfr)).To(Succeed())
	}
	// succeeded counts the WorkflowRuns of a namespace with a label that
	// succeeded.
	succeeded := func(ns, label string) int {
		var list workflowv1alpha1.WorkflowRunList
		Expect(loadClient.List(ctx, &list, client.InNamespace(ns), client.HasLabels{label})).To(Succeed())
		n := 0
		for _, r := range list.Items {
			if r.Status.Phase == workflowv1alpha1.PhaseSucceeded {
				n++
			}
		}
		return n
	}

	BeforeAll(func() {
		DeferCleanup(func() {
			if CurrentSpecReport().Failed() {
				GinkgoWriter.Println("manager log (tail):\n" + tail(manager.output(), 30000))
			}
		})
		var err error
		cfg := rest.CopyConfig(cp.Config)
		cfg.QPS, cfg.Burst = 200, 400
		loadClient, err = client.New(cfg, client.Options{Scheme: k8sClient.Scheme()})
		Expect(err).NotTo(HaveOccurred())
		clusterB, err = pgtest.StartCluster(ctx)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(clusterB.Stop)
		clusterC, err = pgtest.StartCluster(ctx)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(clusterC.Stop)
		defaultPool, err := pgxpool.New(ctx, dbURL)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(defaultPool.Close)
		poolB, err := pgxpool.New(ctx, clusterB.URL)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(poolB.Close)
		poolC, err := pgxpool.New(ctx, clusterC.URL)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(poolC.Close)
		teams = []*team{
			{ns: "e2e-inbox-a1", inbox: "default", pool: defaultPool, url: dbURL},
			{ns: "e2e-inbox-a2", inbox: "default", pool: defaultPool, url: dbURL},
			{ns: "e2e-inbox-b1", inbox: "b", pool: poolB, url: clusterB.URL},
			{ns: "e2e-inbox-b2", inbox: "b", pool: poolB, url: clusterB.URL},
			{ns: "e2e-inbox-c1", inbox: "c", pool: poolC, url: clusterC.URL},
		}

		By("refusing, at admission, an inbox that would take every namespace or the default inbox's name")
		out, err := kubectl("apply", "-f", writeManifest("inbox-bad.yaml", `
apiVersion: workflow.simpleworkflow.dev/v1alpha1
kind: WorkflowInbox
metadata: {name: everything}
spec:
  secretRef: {namespace: simple-workflow-system, name: inbox-b}
  namespaceSelector: {}
`))
		Expect(err).To(HaveOccurred())
		Expect(out).To(ContainSubstring("namespaceSelector must name at least one label"))
		out, err = kubectl("apply", "-f", writeManifest("inbox-default.yaml", `
apiVersion: workflow.simpleworkflow.dev/v1alpha1
kind: WorkflowInbox
metadata: {name: default}
spec:
  secretRef: {namespace: simple-workflow-system, name: inbox-b, key: "bad key"}
  namespaceSelector: {matchLabels: {inbox: b}}
`))
		Expect(err).To(HaveOccurred())
		Expect(out).To(And(ContainSubstring("the name default is the default inbox's"), ContainSubstring("key must be a Secret data key")))

		By("making a ServiceAccount allowed every namespace, to read the console as")
		mustKubectl("create", "serviceaccount", "inboxes-console", "-n", chartNamespace)
		mustKubectl("create", "clusterrolebinding", "inboxes-console", "--clusterrole=cluster-admin",
			"--serviceaccount="+chartNamespace+":inboxes-console")
		DeferCleanup(func() {
			_, _ = kubectl("delete", "clusterrolebinding", "inboxes-console")
			_, _ = kubectl("delete", "serviceaccount", "inboxes-console", "-n", chartNamespace)
		})
		consoleToken = strings.TrimSpace(mustKubectl("create", "token", "inboxes-console", "-n", chartNamespace))

		By("creating the Secrets, the namespaces and two WorkflowInboxes")
		Expect(k8sClient.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: chartNamespace, Name: "inbox-b"},
			StringData: map[string]string{"url": clusterB.URL}})).To(Succeed())
		Expect(k8sClient.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: chartNamespace, Name: "inbox-c"},
			StringData: map[string]string{"dsn": clusterC.URL}})).To(Succeed())
		for _, t := range teams {
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: t.ns}}
			if t.inbox != "default" {
				ns.Labels = map[string]string{"team-inbox": t.inbox}
			}
			Expect(k8sClient.Create(ctx, ns)).To(Succeed())
		}
		mustKubectl("apply", "-f", writeManifest("inboxes.yaml", `
apiVersion: workflow.simpleworkflow.dev/v1alpha1
kind: WorkflowInbox
metadata: {name: b}
spec:
  secretRef: {namespace: simple-workflow-system, name: inbox-b}
  namespaceSelector: {matchLabels: {team-inbox: b}}
---
apiVersion: workflow.simpleworkflow.dev/v1alpha1
kind: WorkflowInbox
metadata: {name: c}
spec:
  secretRef: {namespace: simple-workflow-system, name: inbox-c, key: dsn}
  namespaceSelector: {matchExpressions: [{key: team-inbox, operator: In, values: [c]}]}
`))
		DeferCleanup(func() {
			// Their namespaces go back to the default inbox (nothing is
			// left unfinished), then the inboxes go.
			out, err := kubectl("delete", "workflowinbox", "b", "c", "--timeout=90s")
			Expect(err).NotTo(HaveOccurred(), out)
		})
		Eventually(ready("b"), 60*time.Second).Should(Equal("True/Connected"))
		Eventually(ready("c"), 60*time.Second).Should(Equal("True/Connected"))
		Eventually(func() []string { return inboxStatus("b")().Namespaces }).Should(Equal([]string{"e2e-inbox-b1", "e2e-inbox-b2"}))
		Eventually(func() []string { return inboxStatus("c")().Namespaces }).Should(Equal([]string{"e2e-inbox-c1"}))

		for _, t := range teams {
			t.worker = start("inbox-worker-"+t.ns, []string{"DATABASE_URL=" + t.url}, filepath.Join(binDir, "example-worker"),
				"--type-prefixes=demo.", "--worker-id=worker-"+t.ns, "--namespace="+t.ns, "--lease-duration=5s", "--reap-interval=1s")
			DeferCleanup(func() { t.worker.stop(syscall.SIGTERM) })
		}
	})

	It("keeps a namespace two inboxes select with the older, says so on both, and reports a bad Secret", func() {
		_, err := byNS("e2e-inbox-c1").pool.Exec(ctx, "create database b_too")
		Expect(err).NotTo(HaveOccurred())
		bToo, err := pgtest.WithDatabase(clusterC.URL, "b_too")
		Expect(err).NotTo(HaveOccurred())
		Expect(k8sClient.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: chartNamespace, Name: "inbox-b-too"},
			StringData: map[string]string{"url": bToo}})).To(Succeed())
		mustKubectl("apply", "-f", writeManifest("inbox-contest.yaml", `
apiVersion: workflow.simpleworkflow.dev/v1alpha1
kind: WorkflowInbox
metadata: {name: b-too}
spec:
  secretRef: {namespace: simple-workflow-system, name: inbox-b-too}
  namespaceSelector: {matchLabels: {team-inbox: b}}
---
apiVersion: workflow.simpleworkflow.dev/v1alpha1
kind: WorkflowInbox
metadata: {name: no-secret}
spec:
  secretRef: {namespace: simple-workflow-system, name: inbox-missing}
  namespaceSelector: {matchLabels: {team-inbox: nobody}}
---
apiVersion: workflow.simpleworkflow.dev/v1alpha1
kind: WorkflowInbox
metadata: {name: no-key}
spec:
  secretRef: {namespace: simple-workflow-system, name: inbox-b, key: other}
  namespaceSelector: {matchLabels: {team-inbox: nobody}}
`))
		Eventually(cond("b-too", workflowv1alpha1.ConditionNamespacesHeld)).Should(
			HavePrefix("True/SelectedByOlderInbox: served by another inbox for now: e2e-inbox-b1: an older inbox selects it too"))
		Eventually(cond("b", workflowv1alpha1.ConditionNamespacesContested)).Should(
			Equal("True/SelectedByNewerInbox: kept here, the older inbox: e2e-inbox-b1 (also selected by b-too); e2e-inbox-b2 (also selected by b-too)"))
		Expect(inboxStatus("b-too")().Namespaces).To(BeEmpty())
		Expect(inboxStatus("b")().Namespaces).To(Equal([]string{"e2e-inbox-b1", "e2e-inbox-b2"}))
		Eventually(ready("no-secret")).Should(Equal("False/SecretNotFound"))
		Eventually(ready("no-key")).Should(Equal("False/SecretKeyMissing"))
		Expect(cond("no-key", workflowv1alpha1.ConditionInboxReady)()).To(ContainSubstring(`has no key "other"`))

		By("refusing an inbox whose URL reaches another inbox's database through another address")
		sameB := strings.Replace(clusterB.URL, "127.0.0.1", "localhost", 1)
		Expect(sameB).NotTo(Equal(clusterB.URL))
		sameDefault := strings.Replace(dbURL, "127.0.0.1", "localhost", 1)
		Expect(k8sClient.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: chartNamespace, Name: "inbox-same"},
			StringData: map[string]string{"b": sameB, "default": sameDefault}})).To(Succeed())
		DeferCleanup(func() { _, _ = kubectl("delete", "secret", "inbox-same", "-n", chartNamespace) })
		mustKubectl("apply", "-f", writeManifest("inbox-same.yaml", `
apiVersion: workflow.simpleworkflow.dev/v1alpha1
kind: WorkflowInbox
metadata: {name: b-again}
spec:
  secretRef: {namespace: simple-workflow-system, name: inbox-same, key: b}
  namespaceSelector: {matchLabels: {team-inbox: nobody}}
---
apiVersion: workflow.simpleworkflow.dev/v1alpha1
kind: WorkflowInbox
metadata: {name: default-again}
spec:
  secretRef: {namespace: simple-workflow-system, name: inbox-same, key: default}
  namespaceSelector: {matchLabels: {team-inbox: nobody}}
`))
		By("reporting an inbox whose database never answered as down in the metrics")
		Expect(k8sClient.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: chartNamespace, Name: "inbox-nowhere"},
			StringData: map[string]string{"url": "postgres://nobody@127.0.0.1:1/none?connect_timeout=2"}})).To(Succeed())
		DeferCleanup(func() { _, _ = kubectl("delete", "secret", "inbox-nowhere", "-n", chartNamespace) })
		mustKubectl("apply", "-f", writeManifest("inbox-nowhere.yaml", `
apiVersion: workflow.simpleworkflow.dev/v1alpha1
kind: WorkflowInbox
metadata: {name: nowhere}
spec:
  secretRef: {namespace: simple-workflow-system, name: inbox-nowhere}
  namespaceSelector: {matchLabels: {team-inbox: nobody}}
`))
		Eventually(ready("nowhere"), 60*time.Second).Should(Equal("False/Unreachable"))
		Eventually(func() string { _, body := httpGet("http://" + metricsAddr + "/metrics"); return body }, 30*time.Second).Should(
			MatchRegexp(`simpleworkflow_inbox_up\{inbox="nowhere"\} 0`))
		mustKubectl("delete", "workflowinbox", "nowhere", "--timeout=60s")
		Eventually(func() string { _, body := httpGet("http://" + metricsAddr + "/metrics"); return body }, 30*time.Second).ShouldNot(
			ContainSubstring(`inbox="nowhere"`))

		Eventually(cond("b-again", workflowv1alpha1.ConditionInboxReady)).Should(
			HavePrefix("False/DatabaseTaken: Its URL reaches the database of inbox b "))
		Eventually(cond("default-again", workflowv1alpha1.ConditionInboxReady)).Should(
			HavePrefix("False/DatabaseTaken: Its URL reaches the database of inbox default "))
		Expect(ready("b")()).To(Equal("True/Connected"))

		By("deleting them: they serve no namespace, so they go at once")
		mustKubectl("delete", "workflowinbox", "b-too", "no-secret", "no-key", "b-again", "default-again", "--timeout=60s")
		Eventually(cond("b", workflowv1alpha1.ConditionNamespacesContested)).Should(HavePrefix("False/NoneContested"))
	})

	It("keeps an inbox serving namespaces on its database when its Secret names another", func() {
		admin := byNS("e2e-inbox-c1").pool
		for _, db := range []string{"d_one", "d_two"} {
			_, err := admin.Exec(ctx, "create database "+db)
			Expect(err).NotTo(HaveOccurred())
		}
		one, err := pgtest.WithDatabase(clusterC.URL, "d_one")
		Expect(err).NotTo(HaveOccurred())
		two, err := pgtest.WithDatabase(clusterC.URL, "d_two")
		Expect(err).NotTo(HaveOccurred())
		// Its Secret lives in the namespace it serves, where the manager is
		// granted get on Secrets as docs/scaling.md says.
		Expect(k8sClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "e2e-inbox-d1",
			Labels: map[string]string{"team-inbox": "d"}}})).To(Succeed())
		Expect(k8sClient.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "e2e-inbox-d1", Name: "inbox-d"},
			StringData: map[string]string{"url": one}})).To(Succeed())
		saName := serviceAccount[strings.LastIndex(serviceAccount, ":")+1:]
		mustKubectl("create", "role", "inbox-secrets", "-n", "e2e-inbox-d1", "--verb=get", "--resource=secrets")
		mustKubectl("create", "rolebinding", "inbox-secrets", "-n", "e2e-inbox-d1", "--role=inbox-secrets",
			"--serviceaccount="+chartNamespace+":"+saName)
		mustKubectl("apply", "-f", writeManifest("inbox-d.yaml", `
apiVersion: workflow.simpleworkflow.dev/v1alpha1
kind: WorkflowInbox
metadata: {name: d}
spec:
  secretRef: {namespace: e2e-inbox-d1, name: inbox-d}
  namespaceSelector: {matchLabels: {team-inbox: d}}
`))
		Eventually(ready("d"), 60*time.Second).Should(Equal("True/Connected"))
		Eventually(func() []string { return inboxStatus("d")().Namespaces }).Should(Equal([]string{"e2e-inbox-d1"}))
		Expect(inboxStatus("d")().Database).To(MatchRegexp(`^[0-9]+/[0-9]+$`))

		By("giving the chart's example worker in that namespace the inbox's own Secret")
		out, err := renderChart("e2e-inbox-d1")
		Expect(err).NotTo(HaveOccurred(), "%s", out)
		Expect(mountOf(out)).To(Equal("inbox-d"))
		Expect(out).To(And(ContainSubstring("value: /etc/simple-workflow/database/url"),
			ContainSubstring(`workflow.simpleworkflow.dev/inbox: "d"`)))

		By("pointing its Secret at another database: refused, and the namespace's runs stay where they are")
		mustKubectl("patch", "secret", "inbox-d", "-n", "e2e-inbox-d1", "--type=merge",
			"-p", fmt.Sprintf(`{"stringData":{"url":%q}}`, two))
		databaseOne := inboxStatus("d")().Database
		Eventually(cond("d", workflowv1alpha1.ConditionInboxReady), 90*time.Second).Should(
			HavePrefix("False/DatabaseChanged: The Secret's URL now reaches another database"))
		Expect(inboxStatus("d")().Database).To(Equal(databaseOne), "the status names the database it keeps")
		newRun("e2e-inbox-d1", "kept", "demo.echo.v1", `{}`, nil)
		poolOne, err := pgxpool.New(ctx, one)
		Expect(err).NotTo(HaveOccurred())
		defer poolOne.Close()
		Eventually(func() int { return runsIn(poolOne, "e2e-inbox-d1") }, 30*time.Second).Should(Equal(1))
		poolTwo, err := pgxpool.New(ctx, two)
		Expect(err).NotTo(HaveOccurred())
		defer poolTwo.Close()
		var schemas int
		Expect(poolTwo.QueryRow(ctx, "select count(*) from pg_namespace where nspname = 'workflow'").Scan(&schemas)).To(Succeed())
		Expect(schemas).To(BeZero(), "the other database was migrated")

		By("pointing it back: served again")
		mustKubectl("patch", "secret", "inbox-d", "-n", "e2e-inbox-d1", "--type=merge",
			"-p", fmt.Sprintf(`{"stringData":{"url":%q}}`, one))
		Eventually(ready("d"), 90*time.Second).Should(Equal("True/Connected"))

		By("deleting the run, moving the namespace back to the default inbox, deleting the inbox")
		mustKubectl("delete", "wfr", "kept", "-n", "e2e-inbox-d1", "--timeout=60s")
		mustKubectl("label", "namespace", "e2e-inbox-d1", "team-inbox-")
		Eventually(func() []string { return inboxStatus("d")().Namespaces }, 60*time.Second).Should(BeEmpty())
		mustKubectl("delete", "workflowinbox", "d", "--timeout=60s")
	})

	It("shows the inboxes in kubectl get, with their schema version and namespaces", func() {
		out := mustKubectl("get", "workflowinboxes")
		Expect(out).To(MatchRegexp(`(?m)^NAME\s+READY\s+REASON\s+SCHEMA\s+NAMESPACES\s+AGE`))
		Expect(out).To(MatchRegexp(`(?m)^b\s+True\s+Connected\s+[1-9][0-9]*\s+2\s`))
		Expect(out).To(MatchRegexp(`(?m)^c\s+True\s+Connected\s+[1-9][0-9]*\s+1\s`))
		Expect(mustKubectl("get", "wfinbox", "c", "-o", "wide")).To(MatchRegexp(`c\s+True\s+Connected\s+[0-9]+\s+1\s+\S+\s+inbox-c\s+False`))
	})

	It("gives the chart's example worker the database of its namespace's inbox, or says why not", func() {
		for _, t := range teams {
			out, err := renderChart(t.ns)
			if t.inbox == "default" {
				Expect(err).NotTo(HaveOccurred(), "%s", out)
				Expect(mountOf(out)).To(Equal("probe-simple-workflow-database"), "the worker of %s", t.ns)
				Expect(out).NotTo(ContainSubstring("workflow.simpleworkflow.dev/inbox"))
				continue
			}
			// The inbox's Secret is in the manager's namespace: never copied.
			Expect(err).To(HaveOccurred(), "the worker of %s", t.ns)
			Expect(out).To(ContainSubstring(fmt.Sprintf("WorkflowInbox %s serves namespace %s, so the example worker needs that inbox's database, but its Secret is in namespace %s: set exampleWorker.database.existingSecret",
				t.inbox, t.ns, chartNamespace)))
			Expect(out).NotTo(ContainSubstring(t.url))
		}
		// A Secret of the worker's own wins (and the inbox is not looked up).
		out, err := renderChart("e2e-inbox-b1", "exampleWorker.database.existingSecret=team-worker-login",
			"exampleWorker.database.secretKey=dsn")
		Expect(err).NotTo(HaveOccurred(), "%s", out)
		Expect(mountOf(out)).To(Equal("team-worker-login"))
		Expect(out).To(ContainSubstring("value: /etc/simple-workflow/database/dsn"))
	})

	It("runs plain runs, DAGs, signals and schedules in each namespace, in its own inbox's database", func() {
		for i, t := range teams {
			mustKubectl("apply", "-n", t.ns, "-f", writeManifest("inbox-reg-"+t.ns+".yaml", fmt.Sprintf(`
apiVersion: workflow.simpleworkflow.dev/v1alpha1
kind: WorkflowRegistry
metadata: {name: flows}
spec:
  workflows:
  - name: inboxes%d.chain.v1
    steps:
    - {name: first, type: demo.echo.v1, payload: {step: first}}
    - {name: second, type: demo.echo.v1, dependsOn: [first], payload: {step: second}}
---
apiVersion: workflow.simpleworkflow.dev/v1alpha1
kind: WorkflowRun
metadata: {name: plain}
spec: {type: demo.echo.v1, payload: {team: %q}}
---
apiVersion: workflow.simpleworkflow.dev/v1alpha1
kind: WorkflowRun
metadata: {name: order}
spec:
  type: demo.order.v1
  payload: {orderId: %q, amount: 5, sleepSeconds: 0, approveTimeoutSeconds: 600}
`, i, t.ns, t.ns)))
			mustKubectl("apply", "-n", t.ns, "-f", writeManifest("inbox-dag-"+t.ns+".yaml", fmt.Sprintf(`
apiVersion: workflow.simpleworkflow.dev/v1alpha1
kind: WorkflowRun
metadata: {name: chain}
spec: {type: inboxes%d.chain.v1}
`, i)))
		}
		for _, t := range teams {
			Eventually(func() string {
				out, _ := kubectl("get", "wfreg", "flows", "-n", t.ns, "-o", "jsonpath={.status.inbox}")
				return out
			}).Should(Equal(t.inbox), "registry of %s", t.ns)
			Eventually(func() string {
				out, _ := kubectl("get", "wfr", "order", "-n", t.ns, "-o", "jsonpath={.status.phase}/{.status.waitingFor.signal}")
				return out
			}, 60*time.Second).Should(Equal("Waiting/approve"), "order of %s", t.ns)
			mustKubectl("patch", "wfr", "order", "-n", t.ns, "--type=json",
				"-p", `[{"op":"add","path":"/spec/signals/-","value":{"name":"approve","payload":{"by":"e2e"}}}]`)
		}
		for _, t := range teams {
			Eventually(phases(t.ns), 60*time.Second).Should(Equal("chain=Succeeded order=Succeeded plain=Succeeded"), "runs of %s", t.ns)
		}

		By("keeping each namespace's runs in its own inbox's database and nowhere else")
		for _, t := range teams {
			for _, other := range teams {
				if other.inbox == t.inbox {
					continue
				}
				Expect(runsIn(other.pool, t.ns)).To(BeZero(), "runs of %s in inbox %s", t.ns, other.inbox)
			}
			// plain, order and the DAG with its two steps.
			Expect(runsIn(t.pool, t.ns)).To(Equal(5), "runs of %s in its inbox %s", t.ns, t.inbox)
		}

		By("showing every inbox's runs on the console, each run's page read from its inbox")
		var listed string
		Eventually(func() string {
			_, listed = consoleAs("/runs")
			return listed
		}, 30*time.Second).Should(And(ContainSubstring(`<td class="inbox">b</td>`), ContainSubstring(`<td class="inbox">c</td>`),
			ContainSubstring(`<td class="inbox">default</td>`)))
		for _, t := range teams {
			id, err := kubectl("get", "wfr", "plain", "-n", t.ns, "-o", "jsonpath={.status.runID}")
			Expect(err).NotTo(HaveOccurred())
			Expect(listed).To(ContainSubstring(id), "the console's list lacks %s's run", t.ns)
			code, body := consoleAs("/runs/" + id)
			Expect(code).To(Equal(http.StatusOK), "the console's page of %s's run", t.ns)
			Expect(body).To(And(ContainSubstring(`<dd id="inbox">`+t.inbox+`</dd>`), ContainSubstring(`WorkflowRun `+t.ns+`/plain`)))
		}

		By("firing a schedule in inbox b's database, moving its clock a minute on")
		b1 := byNS("e2e-inbox-b1")
		mustKubectl("apply", "-n", b1.ns, "-f", writeManifest("inbox-schedule.yaml", `
apiVersion: workflow.simpleworkflow.dev/v1alpha1
kind: WorkflowSchedule
metadata: {name: minutely}
spec:
  schedule: "* * * * *"
  runTemplate: {type: demo.echo.v1, payload: {from: schedule}}
`))
		Eventually(func() int {
			var n int
			_ = b1.pool.QueryRow(ctx, "select count(*) from workflow.list_schedules($1, null, null)", b1.ns).Scan(&n)
			return n
		}).Should(Equal(1))
		_, err := b1.pool.Exec(ctx, `update workflow.workflow_settings
			set clock_offset = clock_offset + (date_trunc('minute', workflow.now()) + interval '61 seconds' - workflow.now())`)
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() string {
			out, _ := kubectl("get", "wfr", "-n", b1.ns, "-l", "workflow.simpleworkflow.dev/schedule=minutely",
				"-o", `jsonpath={range .items[*]}{.status.phase}{" "}{end}`)
			return strings.TrimSpace(out)
		}, 60*time.Second).Should(Equal("Succeeded"))
		// The tick's run is in inbox b's database only.
		Expect(runsIn(b1.pool, b1.ns)).To(BeNumerically(">=", 6))
		Expect(runsIn(byNS("e2e-inbox-a1").pool, b1.ns)).To(BeZero())
		mustKubectl("patch", "wfs", "minutely", "-n", b1.ns, "--type=merge", "-p", `{"spec":{"suspend":true}}`)
	})

	It("keeps the other inboxes at their rate while one database is down for a minute, and loses nothing", func() {
		b1, b2 := byNS("e2e-inbox-b1"), byNS("e2e-inbox-b2")
		loaded := []*team{byNS("e2e-inbox-a1"), byNS("e2e-inbox-c1")}
		const label = "inbox-load"
		// A steady load on the other inboxes: 10 runs a second in each.
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for _, t := range loaded {
			wg.Go(func() {
				defer GinkgoRecover()
				tick := time.NewTicker(100 * time.Millisecond)
				defer tick.Stop()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					case <-tick.C:
					}
					newRun(t.ns, fmt.Sprintf("load-%d", i), "demo.echo.v1", `{"load":true}`, map[string]string{label: "yes"})
				}
			})
		}
		DeferCleanup(func() {
			select {
			case <-stop:
			default:
				close(stop)
			}
			wg.Wait()
		})
		total := func() int {
			n := 0
			for _, t := range loaded {
				n += succeeded(t.ns, label)
			}
			return n
		}
		time.Sleep(10 * time.Second) // the load settles
		before0, t0 := total(), time.Now()
		time.Sleep(30 * time.Second)
		before1, t1 := total(), time.Now()
		rateBefore := float64(before1-before0) / t1.Sub(t0).Seconds()

		// A run of b2 in flight when the server stops: its lease runs out
		// meanwhile, so it is taken again, and must still end once.
		newRun(b2.ns, "slow", "demo.sleep.v1", `{"seconds": 15}`, nil)
		Eventually(phases(b2.ns)).Should(ContainSubstring("slow=Running"))

		By("stopping every process of inbox b's server (SIGSTOP) for a minute: its connections hang")
		paused := make(chan error, 1)
		go func() { paused <- clusterB.Pause(ctx, time.Minute) }()
		down := time.Now()
		// The window is the whole outage, its first seconds (while the
		// manager has not yet seen b stop answering) included.
		during0, t2 := total(), time.Now()
		for i := range 5 {
			newRun(b1.ns, fmt.Sprintf("during-%d", i), "demo.echo.v1", `{"during":true}`, nil)
		}
		Eventually(ready("b"), 30*time.Second).Should(Equal("False/Unreachable"))
		Expect(ready("c")()).To(Equal("True/Connected"))
		Eventually(func() string { _, body := httpGet("http://" + metricsAddr + "/metrics"); return body }, 30*time.Second).Should(And(
			MatchRegexp(`simpleworkflow_inbox_up\{inbox="b"\} 0`), MatchRegexp(`simpleworkflow_inbox_up\{inbox="c"\} 1`)))
		Eventually(func() string {
			out, _ := kubectl("get", "wfr", "during-0", "-n", b1.ns, "-o",
				`jsonpath={.status.conditions[?(@.type=="InboxAvailable")].status}/{.status.conditions[?(@.type=="InboxAvailable")].reason}`)
			return out
		}, 30*time.Second).Should(Equal("False/InboxUnavailable"))
		Eventually(func() string {
			out, _ := kubectl("get", "events", "-n", b1.ns, "--field-selector", "reason=InboxUnavailable", "-o", "name")
			return out
		}).ShouldNot(BeEmpty())
		// The console shows the other inboxes' runs, within its bound, and
		// says which inbox it could not read.
		start := time.Now()
		code, body := consoleAs("/runs?namespace=" + loaded[0].ns)
		Expect(time.Since(start)).To(BeNumerically("<", 10*time.Second), "the console's list while inbox b is down")
		Expect(code).To(Equal(http.StatusOK))
		Expect(body).To(And(ContainSubstring(`id="unread"`), ContainSubstring(`<strong>b</strong>`), ContainSubstring("load-")))
		time.Sleep(time.Until(down.Add(58 * time.Second)))
		during1, t3 := total(), time.Now()
		rateDuring := float64(during1-during0) / t3.Sub(t2).Seconds()
		close(stop)
		wg.Wait()
		ratio := rateDuring / rateBefore
		AddReportEntry("inbox outage", fmt.Sprintf("other inboxes' runs succeeded: %.2f/s before, %.2f/s during the outage (%.2fx)",
			rateBefore, rateDuring, ratio))
		GinkgoWriter.Printf("other inboxes: %.2f runs/s before, %.2f during the outage (%.2fx)\n", rateBefore, rateDuring, ratio)
		Expect(rateBefore).To(BeNumerically(">", 10), "the load did not run")
		Expect(ratio).To(BeNumerically(">=", 0.8), "the other inboxes slowed down during the outage")

		By("letting inbox b's server go on: every run of its namespaces finishes, each once")
		Expect(<-paused).To(Succeed())
		Eventually(ready("b"), 60*time.Second).Should(Equal("True/Connected"))
		Eventually(ownPhases(b1.ns), 90*time.Second).Should(Equal(
			"chain=Succeeded during-0=Succeeded during-1=Succeeded during-2=Succeeded during-3=Succeeded during-4=Succeeded order=Succeeded plain=Succeeded"))

		By("shutting inbox b's server down (connections refused) and starting it again")
		Expect(clusterB.Halt(ctx)).To(Succeed())
		Eventually(ready("b"), 30*time.Second).Should(Equal("False/Unreachable"))
		newRun(b1.ns, "halted", "demo.echo.v1", `{"halted":true}`, nil)
		Eventually(func() string {
			out, _ := kubectl("get", "wfr", "halted", "-n", b1.ns, "-o",
				`jsonpath={.status.conditions[?(@.type=="InboxAvailable")].reason}`)
			return out
		}, 30*time.Second).Should(Equal("InboxUnavailable"))
		Expect(clusterB.Resume(ctx)).To(Succeed())
		Eventually(ready("b"), 60*time.Second).Should(Equal("True/Connected"))
		Eventually(phases(b1.ns), 60*time.Second).Should(ContainSubstring("halted=Succeeded"))
		Eventually(ownPhases(b2.ns), 90*time.Second).Should(Equal("chain=Succeeded order=Succeeded plain=Succeeded slow=Succeeded"))
		Eventually(func() string {
			out, _ := kubectl("get", "wfr", "during-0", "-n", b1.ns, "-o",
				`jsonpath={.status.conditions[?(@.type=="InboxAvailable")].status}`)
			return out
		}).Should(Equal("True"))
		for _, t := range []*team{b1, b2} {
			var list workflowv1alpha1.WorkflowRunList
			Expect(k8sClient.List(ctx, &list, client.InNamespace(t.ns))).To(Succeed())
			var ids []string
			for _, r := range list.Items {
				if r.Labels["workflow.simpleworkflow.dev/schedule"] == "" {
					ids = append(ids, r.Status.RunID)
				}
			}
			// Each object's run ended once in the audit trail.
			rows, err := t.pool.Query(ctx, `select r.id::text, (select count(*) from workflow.run_events(r.id) e where e.event_type = 'succeeded')
				from workflow.workflow_run r where r.id::text = any($1)`, ids)
			Expect(err).NotTo(HaveOccurred())
			seen := map[string]int{}
			for rows.Next() {
				var id string
				var n int
				Expect(rows.Scan(&id, &n)).To(Succeed())
				seen[id] = n
			}
			Expect(rows.Err()).NotTo(HaveOccurred())
			Expect(seen).To(HaveLen(len(ids)), "runs of %s", t.ns)
			for id, n := range seen {
				Expect(n).To(Equal(1), "succeeded events of run %s", id)
			}
		}
		// No run of the load was lost either, nor recorded twice.
		for _, t := range loaded {
			var list workflowv1alpha1.WorkflowRunList
			Expect(k8sClient.List(ctx, &list, client.InNamespace(t.ns), client.HasLabels{label})).To(Succeed())
			Eventually(func() int { return succeeded(t.ns, label) }, 60*time.Second).Should(Equal(len(list.Items)))
			var n int
			Expect(t.pool.QueryRow(ctx, `select count(*) from workflow.workflow_run where namespace = $1 and payload @> '{"load":true}'`,
				t.ns).Scan(&n)).To(Succeed())
			Expect(n).To(Equal(len(list.Items)))
		}
	})

	It("moves a namespace only once its old inbox holds none of its unfinished runs", func() {
		a2 := byNS("e2e-inbox-a2")
		newRun(a2.ns, "long", "demo.sleep.v1", `{"seconds": 25}`, nil)
		Eventually(phases(a2.ns)).Should(ContainSubstring("long=Running"))
		mustKubectl("label", "namespace", a2.ns, "team-inbox=c")
		Eventually(func() string {
			c := meta.FindStatusCondition(inboxStatus("c")().Conditions, workflowv1alpha1.ConditionNamespacesHeld)
			if c == nil {
				return ""
			}
			return c.Reason + ": " + c.Message
		}).Should(And(HavePrefix("UnfinishedRuns: "), ContainSubstring(a2.ns+": inbox default holds 1 unfinished runs")))
		Expect(inboxStatus("c")().HeldNamespaces).To(Equal([]string{a2.ns}))
		// Meanwhile its new runs still go to the inbox that serves it.
		newRun(a2.ns, "meanwhile", "demo.echo.v1", `{}`, nil)
		Eventually(phases(a2.ns)).Should(ContainSubstring("meanwhile=Succeeded"))
		Expect(runsIn(byNS("e2e-inbox-c1").pool, a2.ns)).To(BeZero())

		By("letting the long run finish: the namespace moves, and nothing of it is recorded twice")
		Eventually(func() []string { return inboxStatus("c")().Namespaces }, 60*time.Second).Should(Equal([]string{"e2e-inbox-a2", "e2e-inbox-c1"}))
		Expect(inboxStatus("c")().HeldNamespaces).To(BeEmpty())
		Eventually(func() string {
			out, _ := kubectl("get", "wfreg", "flows", "-n", a2.ns, "-o", "jsonpath={.status.inbox}")
			return out
		}).Should(Equal("c"))
		// The worker of the new inbox serves it from now on.
		c := byNS("e2e-inbox-c1")
		w := start("inbox-worker-moved", []string{"DATABASE_URL=" + c.url}, filepath.Join(binDir, "example-worker"),
			"--type-prefixes=demo.", "--worker-id=worker-moved", "--namespace="+a2.ns)
		DeferCleanup(func() { w.stop(syscall.SIGTERM) })
		newRun(a2.ns, "after-move", "demo.echo.v1", `{}`, nil)
		Eventually(phases(a2.ns)).Should(ContainSubstring("after-move=Succeeded"))
		Expect(runsIn(c.pool, a2.ns)).To(Equal(1))
		// Its registry moved with it: a DAG of its registry runs in the new
		// inbox, and the old one keeps no entry of it.
		registered := func(p *pgxpool.Pool) int {
			var n int
			Expect(p.QueryRow(ctx, "select count(*) from workflow.workflow_registry where owner_namespace = $1", a2.ns).Scan(&n)).To(Succeed())
			return n
		}
		Eventually(func() int { return registered(c.pool) }).Should(Equal(1))
		Expect(registered(a2.pool)).To(BeZero())
		newRun(a2.ns, "chain-after", "inboxes1.chain.v1", `{}`, nil)
		Eventually(phases(a2.ns), 60*time.Second).Should(ContainSubstring("chain-after=Succeeded"))
		Expect(runsIn(c.pool, a2.ns)).To(Equal(4)) // after-move, the DAG and its two steps
		// The runs that finished in the old inbox keep their status.
		Consistently(phases(a2.ns), 3*time.Second).Should(Equal(
			"after-move=Succeeded chain=Succeeded chain-after=Succeeded long=Succeeded meanwhile=Succeeded order=Succeeded plain=Succeeded"))
	})
})
