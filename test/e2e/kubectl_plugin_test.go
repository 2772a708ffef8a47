package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/simple-workflow/simple-workflow/internal/pgtest"
)

// lockedBuffer is a process's output that a spec reads while it runs.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

var _ = Describe("kubectl workflow plugin", Ordered, func() {
	const ns = "e2e-kubectl-plugin"
	var bin, userKC string

	// plugin runs kubectl-workflow as a user holding only the chart's
	// -edit ClusterRole in ns, and returns its stdout, stderr and exit code.
	plugin := func(args ...string) (string, string, int) {
		return runPlugin(bin, userKC, append(args, "-n", ns)...)
	}
	// watch starts `kubectl workflow watch name` and returns its output and
	// a channel with its exit code.
	watch := func(name string) (*lockedBuffer, *lockedBuffer, <-chan int) {
		cmd := exec.CommandContext(ctx, bin, "watch", name, "-n", ns, "--timeout", "120s")
		cmd.Env = []string{"KUBECONFIG=" + userKC, "HOME=" + workDir}
		out, errOut := &lockedBuffer{}, &lockedBuffer{}
		cmd.Stdout, cmd.Stderr = out, errOut
		Expect(cmd.Start()).To(Succeed())
		code := make(chan int, 1)
		go func() {
			_ = cmd.Wait()
			code <- cmd.ProcessState.ExitCode()
		}()
		return out, errOut, code
	}
	phase := func(name string) func() string {
		return func() string {
			out, _ := kubectl("get", "wfr", name, "-n", ns, "-o", "jsonpath={.status.phase}/{.status.waitingFor.signal}")
			return out
		}
	}

	BeforeAll(func() {
		bin = buildPlugin()

		createNamespace(ns)
		// What docs/kubectl-plugin.md says the plugin needs, and no more:
		// the chart's -edit ClusterRole, bound in ns.
		mustKubectl("create", "rolebinding", "plugin-user", "-n", ns,
			"--clusterrole="+releaseName+"-simple-workflow-edit", "--user=plugin-user")
		userKC = filepath.Join(workDir, "plugin-user.kubeconfig")
		Expect(cp.ImpersonatingKubeconfig(userKC, "plugin-user")).To(Succeed())
		worker := start("plugin-order-worker", []string{"DATABASE_URL=" + dbURL}, filepath.Join(binDir, "example-worker"),
			"--type-prefixes=demo.order.", "--worker-id=plugin-order-worker", "--lease-duration=6s", "--namespace="+ns)
		DeferCleanup(func() { worker.stop(syscall.SIGTERM) })
	})

	It("approves a run waiting for its signal, which succeeds, and cancels another", func() {
		mustKubectl("apply", "-n", ns, "-f", writeManifest("plugin-orders.yaml", `
apiVersion: workflow.simpleworkflow.dev/v1alpha1
kind: WorkflowRun
metadata: {name: order-approved}
spec:
  type: demo.order.v1
  payload: {orderId: o-plugin-1, amount: 7, sleepSeconds: 0, approveTimeoutSeconds: 600}
---
apiVersion: workflow.simpleworkflow.dev/v1alpha1
kind: WorkflowRun
metadata: {name: order-cancelled}
spec:
  type: demo.order.v1
  payload: {orderId: o-plugin-2, amount: 8, sleepSeconds: 0, approveTimeoutSeconds: 600}
`))
		Eventually(phase("order-approved")).Should(Equal("Waiting/approve"))
		Eventually(phase("order-cancelled")).Should(Equal("Waiting/approve"))

		out, errOut, code := plugin("list")
		Expect(code).To(Equal(0), errOut)
		Expect(out).To(MatchRegexp(`(?m)^order-approved\s+demo\.order\.v1\s+Waiting\s+\S+\s+\d+s$`))
		out, errOut, code = plugin("get", "order-approved")
		Expect(code).To(Equal(0), errOut)
		Expect(out).To(MatchRegexp(`(?m)^Waiting for:\s+signal "approve" at step approve, until `))

		By("approving with the plugin while another follows the run")
		watchOut, watchErr, watchCode := watch("order-approved")
		Eventually(watchOut.String).Should(ContainSubstring("order-approved   Waiting     for signal:approve at step approve\n"))
		out, errOut, code = plugin("approve", "order-approved", "--payload", `{"by":"e2e-plugin"}`)
		Expect(code).To(Equal(0), errOut)
		Expect(out).To(Equal("workflowrun.workflow.simpleworkflow.dev/order-approved approved (signal approve sent)\n"))
		Eventually(watchCode).Should(Receive(Equal(0)), func() string { return watchOut.String() + watchErr.String() })
		Expect(watchOut.String()).To(HaveSuffix("order-approved   Succeeded\n"))
		result, err := kubectl("get", "wfr", "order-approved", "-n", ns, "-o", "jsonpath={.status.result}")
		Expect(err).NotTo(HaveOccurred())
		var r struct {
			Approval map[string]any `json:"approval"`
		}
		Expect(json.Unmarshal([]byte(result), &r)).To(Succeed())
		Expect(r.Approval).To(Equal(map[string]any{"by": "e2e-plugin"}))
		_, errOut, code = plugin("approve", "order-approved")
		Expect(code).To(Equal(1))
		Expect(errOut).To(ContainSubstring("waits for no signal (phase Succeeded): nothing to approve"))

		By("cancelling the other with the plugin")
		out, errOut, code = plugin("cancel", "order-cancelled")
		Expect(code).To(Equal(0), errOut)
		Expect(out).To(Equal("workflowrun.workflow.simpleworkflow.dev/order-cancelled cancel requested\n"))
		watchOut, watchErr, watchCode = watch("order-cancelled")
		Eventually(watchCode).Should(Receive(Equal(1)), func() string { return watchOut.String() + watchErr.String() })
		Expect(watchOut.String()).To(HaveSuffix("order-cancelled   Cancelled\n"))
		Expect(watchErr.String()).To(HavePrefix("error: workflowrun " + ns + "/order-cancelled ended Cancelled: cancelled by spec.cancel of WorkflowRun " +
			ns + "/order-cancelled"))
		_, errOut, code = plugin("retry", "order-cancelled")
		Expect(code).To(Equal(1))
		Expect(errOut).To(ContainSubstring("it was cancelled through spec.cancel; create a new WorkflowRun"))

		out, errOut, code = plugin("list", "-o", "name")
		Expect(code).To(Equal(0), errOut)
		Expect(strings.Fields(out)).To(ConsistOf("workflowrun.workflow.simpleworkflow.dev/order-approved",
			"workflowrun.workflow.simpleworkflow.dev/order-cancelled"))
	})
})

// runPlugin runs the kubectl-workflow binary bin with kubeconfig and
// returns its stdout, stderr and exit code.
func runPlugin(bin, kubeconfig string, args ...string) (string, string, int) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = []string{"KUBECONFIG=" + kubeconfig, "HOME=" + workDir}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		Fail("run kubectl-workflow: " + err.Error())
	}
	return out.String(), errOut.String(), cmd.ProcessState.ExitCode()
}

// buildPlugin builds kubectl-workflow into the suite's bin folder and
// returns its path.
func buildPlugin() string {
	root, err := pgtest.RepoFile(".")
	Expect(err).NotTo(HaveOccurred())
	bin := filepath.Join(binDir, "kubectl-workflow")
	build := exec.Command("go", "build", "-o", bin, "./cmd/kubectl-workflow")
	build.Dir = root
	out, err := build.CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), "go build ./cmd/kubectl-workflow: %s", out)
	return bin
}
