package e2e

import (
	"encoding/json"
	"path/filepath"
	"strconv"
	"syscall"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

var _ = Describe("durable WorkflowRun from kubectl", Ordered, func() {
	const ns = "e2e-durable-k8s"

	It("waits for the approve signal, takes it from kubectl patch on spec.signals, and succeeds with every step in status", func() {
		createNamespace(ns)
		worker := start("k8s-order-worker", []string{"DATABASE_URL=" + dbURL}, filepath.Join(binDir, "example-worker"),
			"--type-prefixes=demo.order.", "--worker-id=k8s-order-worker", "--lease-duration=6s", "--namespace="+ns)
		DeferCleanup(func() { worker.stop(syscall.SIGTERM) })

		mustKubectl("apply", "-n", ns, "-f", writeManifest("order-k8s.yaml", `
apiVersion: workflow.simpleworkflow.dev/v1alpha1
kind: WorkflowRun
metadata: {name: order-k8s}
spec:
  type: demo.order.v1
  payload: {orderId: o-k8s, amount: 42, sleepSeconds: 1, approveTimeoutSeconds: 600}
  deadline: 10m
`))
		get := func(jsonpath string) func() string {
			return func() string {
				out, _ := kubectl("get", "wfr", "order-k8s", "-n", ns, "-o", "jsonpath="+jsonpath)
				return out
			}
		}
		Eventually(get("{.status.phase}/{.status.waitingFor.kind}/{.status.waitingFor.signal}")).Should(
			Equal("Waiting/signal/approve"))
		// reserve, charge and the durable sleep are journaled.
		Expect(get("{.status.stepsDone}/{.status.lastStep}")()).To(Equal("3/cool-off"))
		Expect(mustKubectl("get", "wfr", "order-k8s", "-n", ns)).To(MatchRegexp(`order-k8s\s+demo.order.v1\s+Waiting\s+0/3\s+3\s`))

		mustKubectl("patch", "wfr", "order-k8s", "-n", ns, "--type=json",
			"-p", `[{"op":"add","path":"/spec/signals/-","value":{"name":"approve","payload":{"by":"e2e"}}}]`)
		Eventually(get("{.status.phase}")).Should(Equal("Succeeded"))
		steps, err := strconv.Atoi(get("{.status.stepsDone}")())
		Expect(err).NotTo(HaveOccurred())
		Expect(steps).To(BeNumerically(">=", 5))
		Expect(get("{.status.lastStep}/{.status.signalsSent}")()).To(Equal("ship/1"))
		Expect(get(`{.status.conditions[?(@.type=="SignalsSent")].status}`)()).To(Equal("True"))

		var result struct {
			OrderID  string         `json:"orderId"`
			Approval map[string]any `json:"approval"`
		}
		Expect(json.Unmarshal([]byte(get("{.status.result}")()), &result)).To(Succeed())
		Expect(result.OrderID).To(Equal("o-k8s"))
		Expect(result.Approval).To(Equal(map[string]any{"by": "e2e"}))

		describe := mustKubectl("describe", "wfr", "order-k8s", "-n", ns)
		Expect(describe).To(ContainSubstring("Sleeping at step cool-off until "))
		Expect(describe).To(ContainSubstring("Woken: the sleep at step cool-off ended"))
		Expect(describe).To(ContainSubstring("Waiting for signal approve at step approve until "))
		Expect(describe).To(ContainSubstring("Received signal approve (spec.signals[0])"))
		Expect(describe).To(ContainSubstring("Woken: signal approve arrived for step approve"))
		Expect(describe).To(ContainSubstring("Succeeded on attempt 1 (worker "))
	})
})
