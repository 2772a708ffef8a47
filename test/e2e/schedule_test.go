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

// A WorkflowSchedule fires each tick once, across a SIGKILLed leader and
// the standby that takes over: the ticks are made to come by moving the
// database's clock a minute at a time, not by waiting for them.
var _ = Describe("a WorkflowSchedule across a manager kill", Ordered, func() {
	const ns, name = "e2e-schedule", "every-minute"

	// advance moves the database clock (workflow.now()) to a second past
	// the next whole minute, so the schedule's next tick is due and the one
	// after it is 59 s of real time away: the test's own time (a failover
	// takes seconds) never brings a tick of its own. (Moving it by 61 s
	// from wherever it was could leave it just short of the following
	// minute, which real time then reached.)
	advance := func() {
		_, err := sdkPool().Exec(ctx, `update workflow.workflow_settings
			set clock_offset = clock_offset
				+ (date_trunc('minute', workflow.now()) + interval '61 seconds' - workflow.now())`)
		Expect(err).NotTo(HaveOccurred())
	}
	// scheduled lists the schedule's WorkflowRuns as name=runID.
	scheduled := func() []string {
		out, _ := kubectl("get", "wfr", "-n", ns, "-l", "workflow.simpleworkflow.dev/schedule="+name, "-o",
			`jsonpath={range .items[*]}{.metadata.name}={.status.runID}={.status.phase}{" "}{end}`)
		return strings.Fields(out)
	}
	succeeded := func() int {
		n := 0
		for _, s := range scheduled() {
			if strings.HasSuffix(s, "=Succeeded") {
				n++
			}
		}
		return n
	}

	It("fires every tick exactly once while the leader is killed and the standby takes over", func() {
		createNamespace(ns)
		var offset string
		Expect(sdkPool().QueryRow(ctx, "select clock_offset::text from workflow.workflow_settings").Scan(&offset)).To(Succeed())
		DeferCleanup(func() {
			_, err := sdkPool().Exec(ctx, "update workflow.workflow_settings set clock_offset = $1::interval", offset)
			Expect(err).NotTo(HaveOccurred())
		})
		worker := start("schedule-worker", []string{"DATABASE_URL=" + dbURL}, filepath.Join(binDir, "example-worker"),
			"--type-prefixes=demo.echo.", "--worker-id=schedule-worker", "--namespace="+ns)
		DeferCleanup(func() { worker.stop(syscall.SIGTERM) })

		mustKubectl("apply", "-n", ns, "-f", writeManifest("schedule.yaml", fmt.Sprintf(`
apiVersion: workflow.simpleworkflow.dev/v1alpha1
kind: WorkflowSchedule
metadata: {name: %s}
spec:
  schedule: "* * * * *"
  timeZone: Europe/Berlin
  successfulRunsHistoryLimit: 10
  runTemplate: {type: demo.echo.v1, payload: {from: schedule}}
`, name)))
		Eventually(func() string {
			out, _ := kubectl("get", "wfs", name, "-n", ns, "-o", "jsonpath={.status.nextScheduleTime}")
			return out
		}).ShouldNot(BeEmpty())

		advance()
		Eventually(succeeded, 60*time.Second).Should(Equal(1))

		standbyMetrics, standbyHealth, standbyConsole := freePort(), freePort(), freePort()
		standby := start("manager-schedule-standby", []string{"KUBECONFIG=" + managerKC, "DATABASE_URL=" + dbURL},
			filepath.Join(binDir, "manager"), "--leader-elect", "--leader-election-namespace="+chartNamespace,
			"--metrics-bind-address="+standbyMetrics, "--health-probe-bind-address="+standbyHealth,
			"--autoscale-interval=1s", "--resync-period=5s", "--console-bind-address="+standbyConsole)
		Eventually(standby.output, 30*time.Second).Should(MatchRegexp(`(?i)attempting to acquire leader lease`))

		// The next tick comes due as the leader dies: whichever of the two
		// fires it, it fires once.
		advance()
		manager.stop(syscall.SIGKILL)
		manager = standby // the suite's later specs and its clean-up use the survivor
		metricsAddr, healthAddr, consoleAddr = standbyMetrics, standbyHealth, standbyConsole
		Eventually(standby.output, 60*time.Second, 100*time.Millisecond).Should(MatchRegexp(`(?i)successfully acquired lease`))
		Eventually(succeeded, 60*time.Second).Should(Equal(2))

		advance()
		Eventually(succeeded, 60*time.Second).Should(Equal(3))
		Consistently(func() int { return len(scheduled()) }, 3*time.Second).Should(Equal(3))

		// One run per tick in the inbox, each created once, each the run
		// of exactly one WorkflowRun.
		rows, err := sdkPool().Query(ctx, `select r.id::text, r.idempotency_key,
				(select count(*) from workflow.workflow_event e where e.workflow_id = r.id and e.event_type = 'created')
			from workflow.workflow_run r
			where r.source_namespace = $1 and starts_with(r.idempotency_key, $2)
			order by r.idempotency_key`, ns, "k8s:"+ns+":schedule/"+name+"/")
		Expect(err).NotTo(HaveOccurred())
		defer rows.Close()
		runs := map[string]bool{}
		for rows.Next() {
			var id, key string
			var created int
			Expect(rows.Scan(&id, &key, &created)).To(Succeed())
			Expect(created).To(Equal(1), "run %s (%s) created %d times", id, key, created)
			runs[id] = true
		}
		Expect(rows.Err()).NotTo(HaveOccurred())
		Expect(runs).To(HaveLen(3), "one run per tick")
		for _, s := range scheduled() {
			parts := strings.Split(s, "=")
			Expect(runs).To(HaveKey(parts[1]), "WorkflowRun %s shows a run of the schedule", parts[0])
			delete(runs, parts[1])
		}
		Expect(runs).To(BeEmpty(), "every run has its own WorkflowRun")
	})
})
