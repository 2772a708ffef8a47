package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

var _ = Describe("a kube-apiserver restart", Ordered, func() {
	const (
		ns = "e2e-apiserver"
		n  = 40
	)

	// Kube-apiserver is stopped and started again while
	// runs are in flight (etcd stays, as in a control-plane upgrade). The
	// workers go on through Postgres. An outage longer than the leader
	// election's renew deadline makes the manager exit ("leader election
	// lost") and its Deployment start it again, played here by
	// superviseManager; either way every WorkflowRun's status converges and
	// no inbox row is inserted twice.
	It("converges every status after kube-apiserver restarts mid-flight", func() {
		createNamespace(ns)
		worker := start("apiserver-worker", []string{"DATABASE_URL=" + dbURL}, filepath.Join(binDir, "example-worker"),
			"--type-prefixes=demo.sleep.", "--runtime=go", "--worker-id=apiserver-worker", "--concurrency=50", "--namespace="+ns)
		DeferCleanup(func() { worker.stop(syscall.SIGTERM) })

		var manifest strings.Builder
		for i := range n {
			fmt.Fprintf(&manifest, "---\napiVersion: workflow.simpleworkflow.dev/v1alpha1\nkind: WorkflowRun\n"+
				"metadata: {name: api-%02d}\nspec: {type: demo.sleep.v1, payload: {seconds: 3}}\n", i)
		}
		mustKubectl("apply", "-n", ns, "-f", writeManifest("apiserver.yaml", manifest.String()))
		// Restart once some runs are running and the others not yet mirrored or started.
		Eventually(func() int { return strings.Count(phases(ns)(), "=Running") }, 30*time.Second, 50*time.Millisecond).
			Should(BeNumerically(">", 0))
		restarts := superviseManager()
		down := time.Now()
		rctx, cancelRestart := context.WithTimeout(ctx, 2*time.Minute)
		defer cancelRestart()
		Expect(cp.RestartAPIServer(rctx, 5*time.Second)).To(Succeed())
		// Until its RBAC roles are loaded, a starting API server refuses
		// everyone: the suite's check for RBAC denials skips this window.
		apiserverStarting = append(apiserverStarting, [2]time.Time{down, time.Now()})
		AddReportEntry("kube-apiserver: stopped and serving again after", time.Since(down).String())
		Eventually(func() error { _, err := kubectl("get", "workflowruns", "-n", ns); return err }, 60*time.Second).Should(Succeed())

		Eventually(func() int { return strings.Count(phases(ns)(), "=Succeeded") }, 120*time.Second).Should(Equal(n),
			func() string {
				return "phases: " + phases(ns)() + "\nmanager log (tail):\n" + tail(manager.output(), 4000)
			})
		var rows int
		Expect(sdkPool().QueryRow(ctx, "select count(*) from workflow.workflow_run where source_namespace = $1", ns).Scan(&rows)).To(Succeed())
		Expect(rows).To(Equal(n), "inbox rows for %d WorkflowRuns", n)
		AddReportEntry("kube-apiserver: manager restarts by its supervisor", restarts())
	})
})
