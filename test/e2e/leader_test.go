package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

var _ = Describe("two manager replicas", Ordered, func() {
	const ns = "e2e-leader"

	// With leader election, killing the leader with
	// SIGKILL hands the work to the standby once the lease has run out; no
	// run is inserted twice and statuses converge.
	//
	// How long that takes, with the manager's default timings (lease 15 s,
	// retry period 2 s): a standby looks at the Lease every 2 s to 4.4 s
	// (client-go's jitter factor 1.2), and counts the lease from the moment
	// it saw the last renewal, so the takeover can come up to one look after
	// the leader's last renewal, plus the lease, plus one more look:
	// 15 s + 2 × 4.4 s = 23.8 s, and an API request or two on a busy machine.
	It("fails over to the standby when the leader is SIGKILLed", func() {
		createNamespace(ns)
		// demo.fail.v1 with failTimes 0 succeeds at once; it is a type no
		// other spec moves to another runtime (specs run in random order).
		worker := start("leader-worker", []string{"DATABASE_URL=" + dbURL}, filepath.Join(binDir, "example-worker"),
			"--type-prefixes=demo.fail.", "--worker-id=leader-worker", "--namespace="+ns)
		DeferCleanup(func() { worker.stop(syscall.SIGTERM) })

		standbyMetrics, standbyHealth, standbyConsole := freePort(), freePort(), freePort()
		standby := start("manager-standby", []string{"KUBECONFIG=" + managerKC, "DATABASE_URL=" + dbURL},
			filepath.Join(binDir, "manager"), "--leader-elect", "--leader-election-namespace="+chartNamespace,
			"--metrics-bind-address="+standbyMetrics, "--health-probe-bind-address="+standbyHealth,
			"--autoscale-interval=1s", "--resync-period=5s", "--console-bind-address="+standbyConsole)
		Eventually(standby.output, 30*time.Second).Should(MatchRegexp(`(?i)attempting to acquire leader lease`))
		Consistently(standby.output, 2*time.Second).ShouldNot(MatchRegexp(`(?i)successfully acquired lease`))

		var manifest strings.Builder
		for i := range 20 {
			fmt.Fprintf(&manifest, "---\napiVersion: workflow.simpleworkflow.dev/v1alpha1\nkind: WorkflowRun\n"+
				"metadata: {name: failover-%02d}\nspec: {type: demo.fail.v1, payload: {failTimes: 0, i: %d}}\n", i, i)
		}
		mustKubectl("apply", "-n", ns, "-f", writeManifest("failover.yaml", manifest.String()))

		killed := time.Now()
		manager.stop(syscall.SIGKILL)
		manager = standby // the suite's later specs and its clean-up use the survivor
		metricsAddr, healthAddr, consoleAddr = standbyMetrics, standbyHealth, standbyConsole
		const lease, retry, jitter = 15 * time.Second, 2 * time.Second, 1.2
		worst := lease + 2*time.Duration((1+jitter)*float64(retry)) // 23.8 s
		Eventually(standby.output, worst+20*time.Second, 100*time.Millisecond).Should(MatchRegexp(`(?i)successfully acquired lease`))
		takeover := time.Since(killed)
		AddReportEntry("leader failover: standby leading after", takeover.String())
		Expect(takeover).To(BeNumerically("<", worst+3*time.Second), "the standby must lead once the lease has run out, not later")

		Eventually(func() int { return strings.Count(phases(ns)(), "=Succeeded") }, 60*time.Second).Should(Equal(20))
		var rows int
		Expect(sdkPool().QueryRow(ctx, "select count(*) from workflow.workflow_run where source_namespace = $1", ns).Scan(&rows)).To(Succeed())
		Expect(rows).To(Equal(20))
	})

	// A normal SIGTERM steps down at once (the lease is
	// released, a standby leads without waiting for it to expire), exits 0
	// and logs no error: no "leader election lost", no stack trace.
	It("steps down at once on SIGTERM and logs nothing alarming", func() {
		nextMetrics, nextHealth, nextConsole := freePort(), freePort(), freePort()
		next := start("manager-next", []string{"KUBECONFIG=" + managerKC, "DATABASE_URL=" + dbURL},
			filepath.Join(binDir, "manager"), "--leader-elect", "--leader-election-namespace="+chartNamespace,
			"--metrics-bind-address="+nextMetrics, "--health-probe-bind-address="+nextHealth,
			"--autoscale-interval=1s", "--resync-period=5s", "--console-bind-address="+nextConsole)
		Eventually(next.output, 30*time.Second).Should(MatchRegexp(`(?i)attempting to acquire leader lease`))

		leader := manager
		before := len(leader.output())
		stopped := time.Now()
		Expect(leader.cmd.Process.Signal(syscall.SIGTERM)).To(Succeed())
		// The suite's later specs use the survivor, whatever this one finds.
		manager = next
		metricsAddr, healthAddr, consoleAddr = nextMetrics, nextHealth, nextConsole
		state, err := leader.cmd.Process.Wait()
		Expect(err).NotTo(HaveOccurred())
		Expect(state.ExitCode()).To(Equal(0), tail(leader.output(), 4000))
		shutdown := leader.output()[before:]
		Expect(shutdown).NotTo(ContainSubstring("leader election lost"))
		Expect(shutdown).NotTo(MatchRegexp(`(?i)"level":"error"|\tERROR\t|stacktrace|panic`))

		Eventually(next.output, 10*time.Second, 100*time.Millisecond).Should(MatchRegexp(`(?i)successfully acquired lease`))
		handover := time.Since(stopped)
		AddReportEntry("leader handover on SIGTERM", handover.String())
		// Released: the standby leads at its next look (2 s to 4.4 s apart)
		// after the leader's shutdown; left to expire, the lease would hold it
		// off for at least 13 s (15 s from a renewal at most 2 s old).
		Expect(handover).To(BeNumerically("<", 10*time.Second), "released, not left to expire (15 s)")
	})
})
