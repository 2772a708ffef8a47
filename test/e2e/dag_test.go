package e2e

import (
	"path/filepath"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

var _ = Describe("DAG workflows defined in a WorkflowRegistry", Ordered, func() {
	const ns = "e2e-dag"

	dagSteps := func(name string) func() string {
		return func() string {
			out, _ := kubectl("get", "workflowrun", name, "-n", ns, "-o",
				`jsonpath={range .status.dagSteps[*]}{.name}={.phase}{" "}{end}`)
			return strings.TrimSpace(out)
		}
	}

	// A diamond runs to completion from kubectl apply with its
	// progress in kubectl get; a run cancelled mid-DAG with kubectl patch
	// cancels its running step and starts nothing after; what CEL can check
	// is refused at admission, and a cycle or an unknown dependency is
	// reported on the registry.
	It("runs a diamond, shows its progress, cancels one mid-DAG, and refuses bad definitions", func() {
		createNamespace(ns)
		worker := start("dag-worker", []string{"DATABASE_URL=" + dbURL}, filepath.Join(binDir, "example-worker"),
			"--type-prefixes=demo.echo.,demo.sleep.", "--runtime=go", "--worker-id=dag-worker", "--namespace="+ns)
		DeferCleanup(func() { worker.stop(syscall.SIGTERM) })
		mustKubectl("apply", "-n", ns, "-f", writeManifest("dag.yaml", `
apiVersion: workflow.simpleworkflow.dev/v1alpha1
kind: WorkflowRegistry
metadata: {name: dag}
spec:
  workflows:
  - name: e2edag.diamond.v1
    description: a, then b and c together, then d
    steps:
    - {name: a, type: demo.echo.v1}
    - {name: b, type: demo.sleep.v1, dependsOn: [a], payload: {seconds: 1}}
    - {name: c, type: demo.echo.v1, dependsOn: [a], payload: {tag: c}}
    - {name: d, type: demo.echo.v1, dependsOn: [b, c]}
  - name: e2edag.slow.v1
    steps:
    - {name: first, type: demo.echo.v1}
    - {name: hold, type: demo.sleep.v1, dependsOn: [first], payload: {seconds: 600}}
    - {name: never, type: demo.echo.v1, dependsOn: [hold]}
`))
		Eventually(func() int {
			var n int
			_ = sdkPool().QueryRow(ctx, `select count(*) from workflow.workflow_registry
                where workflow_name like 'e2edag.%' and definition is not null and runtime is null`).Scan(&n)
			return n
		}).Should(Equal(2))
		mustKubectl("apply", "-n", ns, "-f", writeManifest("dag-runs.yaml", `
apiVersion: workflow.simpleworkflow.dev/v1alpha1
kind: WorkflowRun
metadata: {name: diamond-1}
spec: {type: e2edag.diamond.v1, payload: {orderId: 7}}
---
apiVersion: workflow.simpleworkflow.dev/v1alpha1
kind: WorkflowRun
metadata: {name: slow-1}
spec: {type: e2edag.slow.v1}
`))
		Eventually(dagSteps("diamond-1"), 60*time.Second).Should(Equal("a=Succeeded b=Succeeded c=Succeeded d=Succeeded"))
		Eventually(phases(ns)).Should(ContainSubstring("diamond-1=Succeeded"))
		Expect(mustKubectl("get", "workflowrun", "diamond-1", "-n", ns)).To(MatchRegexp(`diamond-1\s+e2edag.diamond.v1\s+Succeeded\s.*4/4`))
		result := mustKubectl("get", "workflowrun", "diamond-1", "-n", ns, "-o", "jsonpath={.status.result}")
		Expect(result).To(And(ContainSubstring(`"orderId":7`), ContainSubstring(`"tag":"c"`)))

		By("cancelling slow-1 with kubectl patch while its second step runs")
		Eventually(dagSteps("slow-1"), 60*time.Second).Should(Equal("first=Succeeded hold=Running never=Pending"))
		Expect(phases(ns)()).To(ContainSubstring("slow-1=Running"))
		mustKubectl("patch", "workflowrun", "slow-1", "-n", ns, "--type=merge", "-p", `{"spec":{"cancel":true}}`)
		Eventually(phases(ns)).Should(ContainSubstring("slow-1=Cancelled"))
		Eventually(dagSteps("slow-1")).Should(Equal("first=Succeeded hold=Cancelled never=Skipped"))
		Eventually(func() string { return worker.output() }).Should(MatchRegexp(`"msg":"Run stopped".*"reason":"run cancelled"`))
		var started int
		Expect(sdkPool().QueryRow(ctx, `select count(*) from workflow.workflow_run c
            join workflow.workflow_run p on p.id = c.parent_id
            where p.source_namespace = $1 and p.source_name = 'slow-1' and c.parent_step = 'never'`, ns).Scan(&started)).To(Succeed())
		Expect(started).To(BeZero())

		By("refusing bad definitions")
		// What CEL can afford is refused at admission: a step depending on itself.
		out, err := kubectl("apply", "-n", ns, "-f", writeManifest("dag-self.yaml", `
apiVersion: workflow.simpleworkflow.dev/v1alpha1
kind: WorkflowRegistry
metadata: {name: dag-self}
spec:
  workflows:
  - name: e2edag.self.v1
    steps:
    - {name: a, type: demo.echo.v1, dependsOn: [a]}
`))
		Expect(err).To(HaveOccurred())
		Expect(out).To(ContainSubstring("a step cannot depend on itself"))
		// An unknown dependency (a reference check over every step is beyond
		// CEL's cost budget) and a cycle are refused by the database and
		// reported on the registry, naming the problem; neither is stored.
		mustKubectl("apply", "-n", ns, "-f", writeManifest("dag-bad.yaml", `
apiVersion: workflow.simpleworkflow.dev/v1alpha1
kind: WorkflowRegistry
metadata: {name: dag-bad}
spec:
  workflows:
  - name: e2edag.bad.v1
    steps:
    - {name: a, type: demo.echo.v1, dependsOn: [nope]}
`))
		Eventually(func() string { return mustKubectl("describe", "workflowregistry", "dag-bad", "-n", ns) }).
			Should(ContainSubstring(`step "a" depends on "nope", which is not a step of this workflow`))
		mustKubectl("apply", "-n", ns, "-f", writeManifest("dag-cycle.yaml", `
apiVersion: workflow.simpleworkflow.dev/v1alpha1
kind: WorkflowRegistry
metadata: {name: dag-cycle}
spec:
  workflows:
  - name: e2edag.cycle.v1
    steps:
    - {name: a, type: demo.echo.v1, dependsOn: [b]}
    - {name: b, type: demo.echo.v1, dependsOn: [a]}
`))
		Eventually(func() string { return mustKubectl("describe", "workflowregistry", "dag-cycle", "-n", ns) }).
			Should(ContainSubstring("cycle: a → b → a"))
		var stored int
		Expect(sdkPool().QueryRow(ctx, "select count(*) from workflow.workflow_registry where workflow_name in ('e2edag.cycle.v1', 'e2edag.bad.v1')").Scan(&stored)).To(Succeed())
		Expect(stored).To(BeZero())
	})
})
