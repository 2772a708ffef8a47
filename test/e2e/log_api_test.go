package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	logsv1alpha1 "github.com/simple-workflow/simple-workflow/internal/logapi/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/pgtest"
)

// The log API end to end: the chart's logAPI turned on (its APIService,
// Service, generated serving certificate and RBAC), a standby manager
// replica serving it (every replica does), the real kube-apiserver's
// aggregator proxying to it with its front-proxy client certificate, and
// the plugin reading through the API server as users of the chart's roles.
// No kube-proxy runs here, so the chart's Service is made an ExternalName
// Service pointing at localhost, where the manager listens: the aggregator
// resolves such a Service to externalName:port and checks the serving
// certificate against <service>.<namespace>.svc, as in a cluster.
var _ = Describe("the log API", Ordered, func() {
	const ns, other = "e2e-logs", "e2e-logs-other"
	svcName := releaseName + "-simple-workflow-log-api"
	var (
		bin, addr, caPEM string
		standby          *process
		kubeconfigs      = map[string]string{}
	)

	// plugin runs kubectl-workflow as user and returns its stdout, stderr
	// and exit code.
	plugin := func(user string, args ...string) (string, string, int) {
		return runPlugin(bin, kubeconfigs[user], args...)
	}
	helmSet := func(set ...string) {
		chart, err := pgtest.RepoFile("charts/simple-workflow")
		Expect(err).NotTo(HaveOccurred())
		args := []string{"upgrade", releaseName, chart, "--namespace", chartNamespace, "--reuse-values"}
		for _, kv := range set {
			args = append(args, "--set", kv)
		}
		cmd := exec.CommandContext(ctx, helmBin, args...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+cp.Kubeconfig)
		out, err := cmd.CombinedOutput()
		ExpectWithOffset(1, err).NotTo(HaveOccurred(), "helm %s:\n%s", strings.Join(args, " "), out)
	}
	// direct sends a GET to the manager's log API port itself, as whoever
	// holds cert (none when nil), naming user in X-Remote-User.
	direct := func(cert *tls.Certificate, user, path string) (int, metav1.Status) {
		roots := x509.NewCertPool()
		Expect(roots.AppendCertsFromPEM([]byte(caPEM))).To(BeTrue())
		tc := &tls.Config{RootCAs: roots, ServerName: svcName + "." + chartNamespace + ".svc"}
		if cert != nil {
			tc.Certificates = []tls.Certificate{*cert}
		}
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: 10 * time.Second}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+path, nil)
		Expect(err).NotTo(HaveOccurred())
		if user != "" {
			req.Header.Set("X-Remote-User", user)
		}
		resp, err := c.Do(req)
		Expect(err).NotTo(HaveOccurred())
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		var st metav1.Status
		if resp.StatusCode != http.StatusOK {
			Expect(json.Unmarshal(body, &st)).To(Succeed(), string(body))
		}
		return resp.StatusCode, st
	}

	BeforeAll(func() {
		bin = buildPlugin()

		addr = freePort()
		_, port, err := net.SplitHostPort(addr)
		Expect(err).NotTo(HaveOccurred())
		// Cleanups run last first: the chart's log API goes while the
		// replica serving it still answers, then the replica stops.
		DeferCleanup(func() {
			if standby != nil {
				standby.stop(syscall.SIGTERM)
				Expect(standby.output()).NotTo(ContainSubstring("forbidden"), "the log API replica hit an RBAC denial")
			}
		})
		By("turning the chart's logAPI on")
		helmSet("logAPI.enabled=true", "logAPI.service.port="+port)
		DeferCleanup(func() {
			helmSet("logAPI.enabled=false")
			Eventually(func() string {
				out, _ := kubectl("get", "apiservice", "v1alpha1.logs.simpleworkflow.dev")
				return out
			}).Should(ContainSubstring("NotFound"))
		})
		mustKubectl("patch", "service", svcName, "-n", chartNamespace, "--type=merge",
			"-p", `{"spec":{"type":"ExternalName","externalName":"localhost"}}`)

		By("running a standby manager replica with the chart's serving certificate")
		var sec corev1.Secret
		Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: chartNamespace, Name: svcName + "-tls"}, &sec)).To(Succeed())
		caPEM = string(sec.Data["ca.crt"])
		certDir := filepath.Join(workDir, "log-api-tls")
		Expect(os.MkdirAll(certDir, 0o700)).To(Succeed())
		for _, k := range []string{"tls.crt", "tls.key"} {
			Expect(os.WriteFile(filepath.Join(certDir, k), sec.Data[k], 0o600)).To(Succeed())
		}
		standby = start("manager-log-api", []string{"KUBECONFIG=" + managerKC, "DATABASE_URL=" + dbURL},
			filepath.Join(binDir, "manager"), "--leader-elect", "--leader-election-namespace="+chartNamespace,
			"--skip-migrations", "--metrics-bind-address=0", "--health-probe-bind-address="+freePort(),
			"--log-api-bind-address="+addr, "--log-api-cert-dir="+certDir)
		Eventually(func() string {
			out, _ := kubectl("get", "apiservice", "v1alpha1.logs.simpleworkflow.dev",
				"-o", `jsonpath={.status.conditions[?(@.type=="Available")].status} {.status.conditions[?(@.type=="Available")].message}`)
			return out
		}).WithTimeout(30*time.Second).Should(HavePrefix("True "), func() string { return tail(standby.output(), 3000) })

		By("users: -view in the namespace, only get workflowruns, -view in another namespace")
		createNamespace(ns)
		createNamespace(other)
		mustKubectl("create", "rolebinding", "log-reader", "-n", ns, "--clusterrole="+releaseName+"-simple-workflow-view", "--user=log-reader")
		mustKubectl("create", "role", "runs-only", "-n", ns, "--verb=get,list,watch", "--resource=workflowruns.workflow.simpleworkflow.dev")
		mustKubectl("create", "rolebinding", "runs-only", "-n", ns, "--role=runs-only", "--user=runs-only")
		mustKubectl("create", "rolebinding", "other-reader", "-n", other, "--clusterrole="+releaseName+"-simple-workflow-view", "--user=other-reader")
		for _, u := range []string{"log-reader", "runs-only", "other-reader"} {
			kubeconfigs[u] = filepath.Join(workDir, u+".kubeconfig")
			Expect(cp.ImpersonatingKubeconfig(kubeconfigs[u], u)).To(Succeed())
		}
		kubeconfigs["admin"] = cp.Kubeconfig

		worker := start("log-api-worker", []string{"DATABASE_URL=" + dbURL}, filepath.Join(binDir, "example-worker"),
			"--type-prefixes=demo.fail.", "--worker-id=log-api-worker", "--lease-duration=6s", "--namespace="+ns)
		DeferCleanup(func() { worker.stop(syscall.SIGTERM) })
		for _, n := range []string{ns, other} {
			mustKubectl("apply", "-n", n, "-f", writeManifest("log-api-run-"+n+".yaml",
				"apiVersion: workflow.simpleworkflow.dev/v1alpha1\nkind: WorkflowRun\n"+
					"metadata: {name: fail-once}\nspec: {type: demo.fail.v1, payload: {failTimes: 1}, maxAttempts: 2, retryPolicy: {baseDelay: 1s}}\n"))
		}
	})

	It("prints what a run's handlers logged, per attempt, through the API server", func() {
		By("the latest attempt by default")
		Eventually(func() string {
			out, _, _ := plugin("log-reader", "logs", "fail-once", "-n", ns)
			return out
		}).Should(MatchRegexp(`^\d{4}-\d\d-\d\dT[\d:.]+Z INFO  succeeding attempt=2\n$`))
		_, errOut, code := plugin("log-reader", "logs", "fail-once", "-n", ns)
		Expect(code).To(Equal(0))
		Expect(errOut).To(Equal("Attempt 2 of workflowrun " + ns + "/fail-once (attempts that logged: 1, 2; pick one with --attempt).\n"))

		By("an earlier attempt, and the object as JSON")
		out, errOut, code := plugin("log-reader", "logs", "fail-once", "-n", ns, "--attempt", "1")
		Expect(code).To(Equal(0), errOut)
		Expect(out).To(MatchRegexp(`^\S+Z ERROR failing as planned attempt=1 failTimes=1\n$`))
		out, errOut, code = plugin("log-reader", "logs", "fail-once", "-n", ns, "-o", "json")
		Expect(code).To(Equal(0), errOut)
		var log logsv1alpha1.WorkflowRunLog
		Expect(json.Unmarshal([]byte(out), &log)).To(Succeed(), out)
		var wfr workflowv1alpha1.WorkflowRun
		Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "fail-once"}, &wfr)).To(Succeed())
		Expect(log.APIVersion).To(Equal("logs.simpleworkflow.dev/v1alpha1"))
		Expect(log.Kind).To(Equal("WorkflowRunLog"))
		Expect(log.Metadata).To(Equal(logsv1alpha1.LogMeta{Name: "fail-once", Namespace: ns}))
		Expect(log.RunID).To(Equal(wfr.Status.RunID))
		Expect(log.Attempts).To(Equal([]logsv1alpha1.AttemptSummary{{Attempt: 1, Lines: 1}, {Attempt: 2, Lines: 1}}))
		Expect(log.Attempt).To(Equal(2))
		Expect(log.Lines).To(HaveLen(1))
		Expect(log.Lines[0].Level).To(Equal("info"))
		Expect(log.Lines[0].Message).To(Equal("succeeding attempt=2"))

		By("discovery, as kubectl reads it through the aggregator")
		raw := mustKubectl("get", "--raw", "/apis/logs.simpleworkflow.dev/v1alpha1")
		var list metav1.APIResourceList
		Expect(json.Unmarshal([]byte(raw), &list)).To(Succeed(), raw)
		Expect(list.APIResources).To(HaveLen(1))
		Expect(list.APIResources[0].Name).To(Equal("workflowrunlogs"))
		Expect(list.APIResources[0].Namespaced).To(BeTrue())
		Expect([]string(list.APIResources[0].Verbs)).To(Equal([]string{"get"}))
		Eventually(func() string {
			out, _ := kubectl("api-resources", "--api-group=logs.simpleworkflow.dev", "--no-headers")
			return out
		}).Should(MatchRegexp(`(?m)^workflowrunlogs\s+logs.simpleworkflow.dev/v1alpha1\s+true\s+WorkflowRunLog\s*$`))

		By("bad parameters and a missing run")
		out, err := kubectl("get", "--raw", "/apis/logs.simpleworkflow.dev/v1alpha1/namespaces/"+ns+"/workflowrunlogs/fail-once?tail=0")
		Expect(err).To(HaveOccurred())
		Expect(out).To(ContainSubstring("BadRequest"))
		Expect(out).To(ContainSubstring("tail must be a whole number from 1 to 10000"))
		out, err = kubectl("get", "--raw", "/apis/logs.simpleworkflow.dev/v1alpha1/namespaces/"+ns+"/workflowrunlogs/fail-once?attempt=x")
		Expect(err).To(HaveOccurred())
		Expect(out).To(ContainSubstring("attempt must be a whole number from 1"))
		_, errOut, code = plugin("log-reader", "logs", "fail-once", "-n", ns, "--attempt", "7")
		Expect(code).To(Equal(1))
		Expect(errOut).To(Equal("Error from server (NotFound): read the log of workflowrun " + ns + "/fail-once: attempt 7 of workflowrun " +
			ns + "/fail-once logged nothing\n"))
		_, errOut, code = plugin("log-reader", "logs", "nope", "-n", ns)
		Expect(code).To(Equal(1))
		Expect(errOut).To(ContainSubstring("(NotFound): read the log of workflowrun " + ns + "/nope: workflowrun " + ns + "/nope not found"))
	})

	It("gives nothing to users who may not get workflowrunlogs in the namespace", func() {
		Eventually(func() int {
			_, _, code := plugin("log-reader", "logs", "fail-once", "-n", ns)
			return code
		}).Should(Equal(0))
		out, errOut, code := plugin("runs-only", "logs", "fail-once", "-n", ns)
		Expect(code).To(Equal(1))
		Expect(out).To(BeEmpty())
		Expect(errOut).To(ContainSubstring("Error from server (Forbidden)"))
		Expect(errOut).To(ContainSubstring(`"runs-only" cannot get resource "workflowrunlogs" in API group "logs.simpleworkflow.dev"`))
		_, errOut, code = plugin("runs-only", "get", "fail-once", "-n", ns)
		Expect(code).To(Equal(0), errOut)

		By("a user of another namespace")
		out, errOut, code = plugin("other-reader", "logs", "fail-once", "-n", ns)
		Expect(code).To(Equal(1))
		Expect(out).To(BeEmpty())
		Expect(errOut).To(ContainSubstring("Error from server (Forbidden)"))
		// Its own namespace's run of the same name is another run (no
		// worker serves that namespace: it has logged nothing).
		Eventually(func() string {
			out, errOut, _ := plugin("other-reader", "logs", "fail-once", "-n", other)
			return out + errOut
		}).Should(Equal("No log lines: the handlers of workflowrun " + other + "/fail-once have logged nothing yet.\n"))

		By("the manager's port itself: only the API server's client certificate, and its own authorization")
		path := "/apis/logs.simpleworkflow.dev/v1alpha1/namespaces/" + ns + "/workflowrunlogs/fail-once"
		proxy, err := tls.LoadX509KeyPair(cp.FrontProxy.ClientCertFile, cp.FrontProxy.ClientKeyFile)
		Expect(err).NotTo(HaveOccurred())
		code, _ = direct(&proxy, "log-reader", path)
		Expect(code).To(Equal(http.StatusOK))
		code, st := direct(&proxy, "runs-only", path)
		Expect(code).To(Equal(http.StatusForbidden))
		Expect(st.Reason).To(Equal(metav1.StatusReasonForbidden))
		code, st = direct(&proxy, "other-reader", path)
		Expect(code).To(Equal(http.StatusForbidden))
		code, st = direct(nil, "log-reader", path)
		Expect(code).To(Equal(http.StatusUnauthorized))
		Expect(st.Reason).To(Equal(metav1.StatusReasonUnauthorized))
		// A client certificate of another CA (the chart's serving one).
		dir := filepath.Join(workDir, "log-api-tls")
		serving, err := tls.LoadX509KeyPair(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
		Expect(err).NotTo(HaveOccurred())
		code, _ = direct(&serving, "log-reader", path)
		Expect(code).To(Equal(http.StatusUnauthorized))
		fmt.Fprintln(GinkgoWriter, tail(standby.output(), 2000))
	})
})
