package e2e

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/simple-workflow/simple-workflow/internal/pgtest"
	"github.com/simple-workflow/simple-workflow/pkg/simpleworkflow"
)

var _ = Describe("durable execution across runtimes", Ordered, func() {
	const ns = "e2e-durable"

	It("parks a demo.order.v1 run on Go, moves the type to Python with kubectl patch, and resumes there without re-running Go's steps", func() {
		createNamespace(ns)
		root, err := pgtest.RepoFile(".")
		Expect(err).NotTo(HaveOccurred())
		py, err := exec.Command("bash", filepath.Join(root, "hack", "python-deps.sh")).Output()
		Expect(err).NotTo(HaveOccurred(), "python with psycopg")
		// Both example workers count step executions in this table.
		_, err = sdkPool().Exec(ctx, `create table if not exists public.demo_step_counter (
			run_id uuid not null, step text not null, n integer not null, primary key (run_id, step))`)
		Expect(err).NotTo(HaveOccurred())

		mustKubectl("apply", "-n", ns, "-f", writeManifest("orders.yaml", `
apiVersion: workflow.simpleworkflow.dev/v1alpha1
kind: WorkflowRegistry
metadata: {name: orders}
spec:
  workflows:
  - {name: demo.order.v1, runtime: go, description: Reserve, charge, cool off, wait for approval, ship}
`))
		runtime := func() string {
			var rt string
			_ = sdkPool().QueryRow(ctx, "select runtime from workflow.workflow_registry where workflow_name = 'demo.order.v1'").Scan(&rt)
			return rt
		}
		Eventually(runtime).Should(Equal("go"))
		// Other specs run demo.order.v1 on Go workers: leave the type
		// unregistered again.
		DeferCleanup(func() {
			mustKubectl("delete", "workflowregistry", "orders", "-n", ns)
			Eventually(runtime).Should(BeEmpty())
		})

		goWorker := start("go-order-worker", []string{"DATABASE_URL=" + dbURL}, filepath.Join(binDir, "example-worker"),
			"--type-prefixes=demo.order.", "--runtime=go", "--worker-id=go-order-worker", "--lease-duration=6s", "--namespace="+ns)
		DeferCleanup(func() { goWorker.stop(syscall.SIGTERM) })
		pyWorker := start("py-order-worker", []string{"DATABASE_URL=" + dbURL}, strings.TrimSpace(string(py)),
			filepath.Join(root, "sdk", "python", "examples", "example_worker.py"),
			"--type-prefixes=demo.order.", "--runtime=python", "--worker-id=py-order-worker", "--lease-duration=6", "--namespace="+ns)
		DeferCleanup(func() { pyWorker.stop(syscall.SIGTERM) })

		res, err := sdk.Create(ctx, "demo.order.v1", map[string]any{
			"orderId": "o-xrt", "amount": 42, "sleepSeconds": 4, "approveTimeoutSeconds": 120, "counters": true,
		}, &simpleworkflow.CreateOptions{Namespace: ns})
		Expect(err).NotTo(HaveOccurred())

		// Go records reserve and charge, then parks in the durable sleep.
		Eventually(func() string {
			r, err := sdk.Get(ctx, res.ID)
			if err != nil || r.Wait == nil {
				return ""
			}
			return string(r.Status) + "/" + string(r.Wait.Kind) + "/" + r.Wait.Step
		}).Should(Equal("pending/sleep/cool-off"))
		steps, err := sdk.Steps(ctx, res.ID)
		Expect(err).NotTo(HaveOccurred())
		Expect(steps).To(HaveLen(3))
		Expect(string(steps[0].Output)).To(ContainSubstring(`"by": "go"`))

		// One patch moves the type; the sleeping run wakes on the Python worker.
		mustKubectl("patch", "workflowregistry", "orders", "-n", ns, "--type=merge", "-p",
			`{"spec":{"workflows":[{"name":"demo.order.v1","runtime":"python"}]}}`)
		Eventually(runtime).Should(Equal("python"))
		Eventually(func() string {
			r, err := sdk.Get(ctx, res.ID)
			if err != nil || r.Wait == nil {
				return ""
			}
			return string(r.Wait.Kind) + "/" + r.Wait.Step
		}, 30*time.Second).Should(Equal("signal/approve"))

		sent, err := sdk.Signal(ctx, res.ID, "approve", map[string]any{"by": "e2e"}, &simpleworkflow.SignalOptions{IdempotencyKey: "approve-xrt"})
		Expect(err).NotTo(HaveOccurred())
		Expect(sent.Delivered).To(BeTrue())

		var run *simpleworkflow.Run
		Eventually(func() simpleworkflow.Status {
			run, _ = sdk.Get(ctx, res.ID)
			return run.Status
		}, 30*time.Second).Should(Equal(simpleworkflow.StatusSucceeded))
		Expect(run.LeasedBy).To(Equal("py-order-worker"))

		var result struct {
			Reserve, Charge, Ship map[string]any
		}
		Expect(json.Unmarshal(run.Result, &result)).To(Succeed())
		Expect(result.Reserve["by"]).To(Equal("go"))
		Expect(result.Charge["by"]).To(Equal("go"))
		Expect(result.Ship["by"]).To(Equal("python"))

		counts := map[string]int{}
		rows, err := sdkPool().Query(ctx, "select step, n from public.demo_step_counter where run_id = $1", res.ID)
		Expect(err).NotTo(HaveOccurred())
		for rows.Next() {
			var step string
			var n int
			Expect(rows.Scan(&step, &n)).To(Succeed())
			counts[step] = n
		}
		Expect(counts).To(Equal(map[string]int{"reserve": 1, "charge": 1, "ship": 1}))
		AddReportEntry("durable order across runtimes: journal", steps)
	})
})
