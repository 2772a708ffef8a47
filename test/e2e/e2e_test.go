package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/simple-workflow/simple-workflow/internal/pgtest"
	"github.com/simple-workflow/simple-workflow/pkg/simpleworkflow"
)

func createNamespace(name string) {
	mustKubectl("create", "namespace", name)
}

func createWorkerDeployment(ns, name string) {
	labels := map[string]string{"app": name}
	zero := int32(0)
	Expect(k8sClient.Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: &zero,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "worker", Image: "example-worker"}}},
			},
		},
	})).To(Succeed())
}

func replicas(ns, name string) func() int32 {
	return func() int32 {
		var d appsv1.Deployment
		if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &d); err != nil {
			return -1
		}
		return *d.Spec.Replicas
	}
}

// phases returns "name=Phase" for every WorkflowRun of a namespace, as kubectl shows them.
func phases(ns string) func() string {
	return func() string {
		out, _ := kubectl("get", "workflowruns", "-n", ns, "-o",
			`jsonpath={range .items[*]}{.metadata.name}={.status.phase}{" "}{end}`)
		return strings.TrimSpace(out)
	}
}

func writeManifest(name, body string) string {
	path := filepath.Join(workDir, name)
	Expect(os.WriteFile(path, []byte(body), 0o600)).To(Succeed())
	return path
}

var _ = Describe("simple-workflow", Ordered, func() {
	const ns = "e2e"

	BeforeAll(func() {
		createNamespace(ns)
		createWorkerDeployment(ns, "example-worker")
		follow(ns, "example-worker", "demo.")
	})

	It("runs every sample to Succeeded, with Events in kubectl describe", func() {
		samples, err := pgtest.RepoFile("config/samples")
		Expect(err).NotTo(HaveOccurred())
		mustKubectl("apply", "-n", ns, "-k", samples)
		// order-1 (demo.order.v1) waits for approval, as its comment says.
		Eventually(func() string {
			out, _ := kubectl("get", "workflowrun", "order-1", "-n", ns, "-o", "jsonpath={.status.phase}/{.status.waitingFor.kind}")
			return out
		}).Should(Equal("Waiting/signal"))
		mustKubectl("patch", "wfr", "order-1", "-n", ns, "--type=json",
			"-p", `[{"op":"add","path":"/spec/signals/-","value":{"name":"approve"}}]`)
		Eventually(phases(ns)).Should(Equal("diamond-1=Succeeded echo-hello=Succeeded fail-twice=Succeeded order-1=Succeeded sleep-short=Succeeded"))

		out := mustKubectl("get", "workflowruns", "-n", ns)
		Expect(out).To(MatchRegexp(`NAME\s+TYPE\s+PHASE\s+ATTEMPTS\s+STEPS\s+AGE`))
		Expect(out).To(MatchRegexp(`order-1\s+demo.order.v1\s+Succeeded\s+1/3\s+5\s`))
		Expect(out).To(MatchRegexp(`fail-twice\s+demo.fail.v1\s+Succeeded\s+3/3`))
		Expect(mustKubectl("get", "simpleworkflow", "-n", ns)).To(And(ContainSubstring("workflowregistry"), ContainSubstring("workflowrun")))

		describe := mustKubectl("describe", "workflowrun", "fail-twice", "-n", ns)
		Expect(describe).To(ContainSubstring("Attempt 1 failed: planned failure 1 of 2"))
		Expect(describe).To(ContainSubstring("Succeeded on attempt 3 (worker example-worker-"))

		reg := mustKubectl("get", "workflowregistry", "demo", "-n", ns)
		Expect(reg).To(MatchRegexp(`demo\s+3\s+1\s+True`))
	})

	It("cancels a demo.sleep.v1 run through kubectl patch, and the worker stops it", func() {
		mustKubectl("apply", "-n", ns, "-f", writeManifest("long.yaml", `
apiVersion: workflow.simpleworkflow.dev/v1alpha1
kind: WorkflowRun
metadata: {name: long-sleep}
spec: {type: demo.sleep.v1, payload: {seconds: 600}}
`))
		Eventually(phases(ns)).Should(ContainSubstring("long-sleep=Running"))
		runID := mustKubectl("get", "workflowrun", "long-sleep", "-n", ns, "-o", "jsonpath={.status.runID}")
		mustKubectl("patch", "workflowrun", "long-sleep", "-n", ns, "--type=merge", "-p", `{"spec":{"cancel":true}}`)
		Eventually(phases(ns)).Should(ContainSubstring("long-sleep=Cancelled"))
		Eventually(func() string { return workerLogs("example-worker") }).Should(
			MatchRegexp(`"msg":"Run stopped".*"run_id":"` + runID + `".*"reason":"run cancelled"`))
		run, err := sdk.Get(ctx, runID)
		Expect(err).NotTo(HaveOccurred())
		Expect(run.Status).To(Equal(simpleworkflow.StatusCancelled))
	})

	It("refuses bad manifests with the CRD's message", func() {
		out, err := kubectl("apply", "-n", ns, "-f", writeManifest("bad-type.yaml", `
apiVersion: workflow.simpleworkflow.dev/v1alpha1
kind: WorkflowRun
metadata: {name: bad-type}
spec: {type: Demo.Echo}
`))
		Expect(err).To(HaveOccurred())
		Expect(out).To(ContainSubstring("type must be dot-separated lowercase segments of letters, digits and underscores ending in a version"))
		out, err = kubectl("apply", "-n", ns, "-f", writeManifest("bad-payload.yaml", `
apiVersion: workflow.simpleworkflow.dev/v1alpha1
kind: WorkflowRun
metadata: {name: bad-payload}
spec: {type: demo.echo.v1, payload: [1, 2, 3]}
`))
		Expect(err).To(HaveOccurred())
		Expect(out).To(ContainSubstring("spec.payload in body must be of type object"))
		Expect(phases(ns)()).NotTo(ContainSubstring("bad-"))
	})

	It("survives the manager being killed and restarted mid-run: no duplicate insert, every status converges", func() {
		const n = 30
		var manifest strings.Builder
		for i := range n {
			fmt.Fprintf(&manifest, "---\napiVersion: workflow.simpleworkflow.dev/v1alpha1\nkind: WorkflowRun\n"+
				"metadata: {name: crash-%02d}\nspec: {type: demo.sleep.v1, payload: {seconds: 1}}\n", i)
		}
		createNamespace("e2e-crash")
		// The namespace's own worker: runs are served in their namespace.
		crashWorker := start("crash-worker", []string{"DATABASE_URL=" + dbURL}, filepath.Join(binDir, "example-worker"),
			"--type-prefixes=demo.sleep.", "--worker-id=crash-worker", "--concurrency=50", "--namespace=e2e-crash")
		DeferCleanup(func() { crashWorker.stop(syscall.SIGTERM) })
		mustKubectl("apply", "-n", "e2e-crash", "-f", writeManifest("crash.yaml", manifest.String()))
		// Kill it once some runs are mirrored and others are not yet.
		Eventually(func() int {
			return strings.Count(phases("e2e-crash")(), "=Pending") +
				strings.Count(phases("e2e-crash")(), "=Running")
		}, 60*time.Second, 20*time.Millisecond).Should(BeNumerically(">", 0))
		manager.stop(syscall.SIGKILL)
		manager = startManager()
		Eventually(func() int { return strings.Count(phases("e2e-crash")(), "=Succeeded") }, 120*time.Second).Should(Equal(n))
		var rows int
		Expect(sdkPool().QueryRow(ctx, "select count(*) from workflow.workflow_run where source_namespace = 'e2e-crash'").Scan(&rows)).To(Succeed())
		Expect(rows).To(Equal(n))
	})

	It("scales a worker pool up on a burst of 200 runs, drains it, and returns to zero", func() {
		// Retire the samples' pool so only the burst pool serves demo.*.
		mustKubectl("delete", "workflowregistry", "demo", "-n", ns)
		mustKubectl("delete", "deployment", "example-worker", "-n", ns)
		createNamespace("e2e-scale")
		createWorkerDeployment("e2e-scale", "burst-worker")
		mustKubectl("apply", "-n", "e2e-scale", "-f", writeManifest("burst.yaml", `
apiVersion: workflow.simpleworkflow.dev/v1alpha1
kind: WorkflowRegistry
metadata: {name: burst}
spec:
  workers:
  - scaleTargetRef: {name: burst-worker}
    runtime: go
    typePrefixes: ["demo.sleep."]
    maxReplicas: 4
    runsPerReplica: 50
    scaleDownDelay: 5s
`))
		follower := follow("e2e-scale", "burst-worker", "demo.")
		Consistently(replicas("e2e-scale", "burst-worker"), 2*time.Second).Should(BeEquivalentTo(0))

		start := time.Now()
		for i := range 200 {
			_, err := sdk.Create(ctx, "demo.sleep.v1", map[string]any{"seconds": 1},
				&simpleworkflow.CreateOptions{IdempotencyKey: fmt.Sprintf("burst-%d", i), Namespace: "e2e-scale"})
			Expect(err).NotTo(HaveOccurred())
		}
		Eventually(replicas("e2e-scale", "burst-worker"), 10*time.Second, 50*time.Millisecond).Should(BeEquivalentTo(4))
		AddReportEntry("burst: first scale to max replicas after", time.Since(start).String())
		// The burst's own runs: other specs (in whatever order they run)
		// leave succeeded demo.sleep runs behind.
		Eventually(func() int {
			var n int
			Expect(sdkPool().QueryRow(ctx, `select count(*) from workflow.workflow_run
				where idempotency_key like 'burst-%' and status = 'succeeded'`).Scan(&n)).To(Succeed())
			return n
		}, 120*time.Second).Should(Equal(200))
		drained := time.Since(start)
		AddReportEntry("burst: 200 runs drained after", drained.String())
		Expect(follower.MaxRunning()).To(Equal(4))
		Eventually(replicas("e2e-scale", "burst-worker"), 60*time.Second).Should(BeEquivalentTo(0))
		Eventually(follower.Running, 30*time.Second).Should(BeZero())
		AddReportEntry("burst: back to zero after", time.Since(start).String())
		events := mustKubectl("get", "events", "-n", "e2e-scale", "--field-selector", "reason=Scaled")
		// The 200 runs are inserted one by one: on a busy machine the pool may
		// go 0 → n → 4 as the burst arrives.
		Expect(events).To(MatchRegexp(`scaled burst-worker from [0-3] to 4`))
		Expect(events).To(ContainSubstring("scaled burst-worker from 4 to 0"))
	})

	It("moves a workflow from Go to Python with one kubectl patch, without touching producers", func() {
		createNamespace("e2e-xrt")
		root, err := pgtest.RepoFile(".")
		Expect(err).NotTo(HaveOccurred())
		py, err := exec.Command("bash", filepath.Join(root, "hack", "python-deps.sh")).Output()
		Expect(err).NotTo(HaveOccurred(), "python with psycopg")
		goWorker := start("go-worker", []string{"DATABASE_URL=" + dbURL}, filepath.Join(binDir, "example-worker"),
			"--type-prefixes=demo.", "--runtime=go", "--worker-id=go-worker", "--lease-duration=6s", "--namespace=e2e-xrt")
		DeferCleanup(func() { goWorker.stop(syscall.SIGTERM) })
		pyWorker := start("py-worker", []string{"DATABASE_URL=" + dbURL}, strings.TrimSpace(string(py)),
			filepath.Join(root, "sdk", "python", "examples", "example_worker.py"),
			"--type-prefixes=demo.", "--runtime=python", "--worker-id=py-worker", "--lease-duration=6", "--namespace=e2e-xrt")
		DeferCleanup(func() { pyWorker.stop(syscall.SIGTERM) })

		mustKubectl("apply", "-n", "e2e-xrt", "-f", writeManifest("xrt.yaml", `
apiVersion: workflow.simpleworkflow.dev/v1alpha1
kind: WorkflowRegistry
metadata: {name: xrt}
spec:
  workflows:
  - {name: demo.echo.v1, runtime: go}
  - {name: demo.sleep.v1, runtime: go}
`))
		// Specs of other containers run in random order: give the types back.
		DeferCleanup(func() { mustKubectl("delete", "workflowregistry", "xrt", "-n", "e2e-xrt") })
		runtimeOf := func(name string) func() string {
			return func() string {
				var rt string
				_ = sdkPool().QueryRow(ctx, "select runtime from workflow.workflow_registry where workflow_name = $1 and namespace = 'e2e-xrt'", name).Scan(&rt)
				return rt
			}
		}
		Eventually(runtimeOf("demo.echo.v1")).Should(Equal("go"))
		Eventually(runtimeOf("demo.sleep.v1")).Should(Equal("go"))

		// The producer: the same call before and after the move.
		produce := func(tag string, n int) []string {
			var ids []string
			for i := range n {
				res, err := sdk.Create(ctx, "demo.echo.v1", map[string]any{"tag": tag, "i": i},
					&simpleworkflow.CreateOptions{Namespace: "e2e-xrt"})
				Expect(err).NotTo(HaveOccurred())
				ids = append(ids, res.ID)
			}
			return ids
		}
		finishedBy := func(ids []string) map[string]int {
			by := map[string]int{}
			for _, id := range ids {
				r, err := sdk.Get(ctx, id)
				Expect(err).NotTo(HaveOccurred())
				if r.Status == simpleworkflow.StatusSucceeded {
					by[r.LeasedBy]++
				}
			}
			return by
		}
		before := produce("before", 10)
		Eventually(func() map[string]int { return finishedBy(before) }).Should(Equal(map[string]int{"go-worker": 10}))

		long, err := sdk.Create(ctx, "demo.sleep.v1", map[string]any{"seconds": 4}, &simpleworkflow.CreateOptions{Namespace: "e2e-xrt"})
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() string { r, _ := sdk.Get(ctx, long.ID); return string(r.Status) + "/" + r.LeasedBy }).Should(Equal("leased/go-worker"))

		mustKubectl("patch", "workflowregistry", "xrt", "-n", "e2e-xrt", "--type=merge", "-p",
			`{"spec":{"workflows":[{"name":"demo.echo.v1","runtime":"python"},{"name":"demo.sleep.v1","runtime":"python"}]}}`)
		Eventually(runtimeOf("demo.echo.v1")).Should(Equal("python"))

		after := produce("after", 10)
		Eventually(func() map[string]int { return finishedBy(after) }).Should(Equal(map[string]int{"py-worker": 10}))
		// The run the Go worker already held finishes there, on its first attempt.
		Eventually(func() string { r, _ := sdk.Get(ctx, long.ID); return string(r.Status) + "/" + r.LeasedBy }, 30*time.Second).
			Should(Equal("succeeded/go-worker"))

		// Both runtimes leave the same trail: same events, same data keys.
		shape := func(id string) []string {
			evs, err := sdk.Events(ctx, id)
			Expect(err).NotTo(HaveOccurred())
			var out []string
			for _, e := range evs {
				var d map[string]any
				Expect(json.Unmarshal(e.Data, &d)).To(Succeed())
				keys := make([]string, 0, len(d))
				for k := range d {
					keys = append(keys, k)
				}
				sort.Strings(keys)
				out = append(out, string(e.Type)+strings.Join(keys, ","))
			}
			return out
		}
		Expect(shape(after[0])).To(Equal(shape(before[0])))
		Expect(shape(after[0])).To(HaveLen(3)) // created, started, succeeded
	})

	It("serves readiness (with Postgres) and the inbox metrics", func() {
		Eventually(func() int { code, _ := httpGet("http://" + healthAddr + "/readyz"); return code }).Should(Equal(http.StatusOK))
		Eventually(func() string { _, body := httpGet("http://" + metricsAddr + "/metrics"); return body }, 30*time.Second).Should(And(
			MatchRegexp(`simpleworkflow_runs\{inbox="default",namespace="[a-z0-9-]+",prefix="demo",status="succeeded"\} [1-9]`),
			MatchRegexp(`simpleworkflow_transitions_total\{event="succeeded",inbox="default"\} [1-9]`),
			MatchRegexp(`simpleworkflow_inbox_up\{inbox="default"\} 1`),
			MatchRegexp(`simpleworkflow_run_duration_seconds_count\{inbox="default",namespace="[a-z0-9-]+",prefix="demo",status="succeeded"\} [1-9]`),
			MatchRegexp(`simpleworkflow_status_lag_seconds_count [1-9]`),
			MatchRegexp(`simpleworkflow_pool_desired_replicas\{namespace="e2e-scale",pool="burst-worker",registry="burst"\} 0`),
			MatchRegexp(`simpleworkflow_pool_max_replicas\{namespace="e2e-scale",pool="burst-worker",registry="burst"\} [1-9]`),
			MatchRegexp(`simpleworkflow_lease_expiries_total\{inbox="default"\} [0-9]`),
			ContainSubstring("controller_runtime_reconcile_total"),
		))
	})
})
