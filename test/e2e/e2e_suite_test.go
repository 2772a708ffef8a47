// Package e2e runs simple-workflow end to end against real processes: the
// local control plane, Postgres, the built manager and example-worker
// binaries, and the real kubectl and helm CLIs. The manager runs with exactly
// the chart's RBAC, by impersonating the chart's ServiceAccount.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/devenv"
	"github.com/simple-workflow/simple-workflow/internal/engine"
	"github.com/simple-workflow/simple-workflow/internal/pgtest"
	"github.com/simple-workflow/simple-workflow/pkg/simpleworkflow"
)

const (
	chartNamespace = "simple-workflow-system"
	releaseName    = "sw"
	// The chart's ServiceAccount: the manager acts as it.
	serviceAccount = "system:serviceaccount:" + chartNamespace + ":" + releaseName + "-simple-workflow"
)

var (
	ctx        context.Context
	cancel     context.CancelFunc
	workDir    string
	binDir     string
	dbURL      string
	pg         *pgtest.Cluster
	cp         *devenv.ControlPlane
	k8sClient  client.Client
	sdk        *simpleworkflow.Client
	manager    *process
	managerKC  string
	kubectlBin string
	helmBin    string
)

func TestE2E(t *testing.T) {
	RegisterFailHandler(Fail)
	SetDefaultEventuallyTimeout(90 * time.Second)
	SetDefaultEventuallyPollingInterval(200 * time.Millisecond)
	RunSpecs(t, "e2e suite")
}

// process is a child process with its output in a log file.
type process struct {
	cmd *exec.Cmd
	log string
}

func start(name string, env []string, bin string, args ...string) *process {
	logPath := filepath.Join(workDir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	Expect(err).NotTo(HaveOccurred())
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	Expect(cmd.Start()).To(Succeed())
	return &process{cmd: cmd, log: logPath}
}

func (p *process) stop(sig syscall.Signal) {
	_ = p.cmd.Process.Signal(sig)
	_, _ = p.cmd.Process.Wait()
}

// alive reports whether the process still runs (not exited, not a zombie).
func (p *process) alive() bool { return devenv.Alive(p.cmd.Process.Pid) }

// tail returns the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// httpGet returns the status code and body of a GET, or 0 and the error.
func httpGet(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (p *process) output() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// kubectl runs the real kubectl as the administrator.
func kubectl(args ...string) (string, error) {
	// No request may hang a spec, even one sent as the API server stops.
	cmd := exec.CommandContext(ctx, kubectlBin, append([]string{"--request-timeout=30s"}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+cp.Kubeconfig)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// crdNotYetServed is what the API server answers (503) while a part of it,
// such as the admission policies' view of the kinds, has not yet learnt a
// CRD that is Established: a moment later the same request passes.
const crdNotYetServed = "There can be a delay between when CustomResourceDefinitions are created and when they are available"

// mustKubectl runs kubectl and fails the spec if it fails. An apply the API
// server refused with crdNotYetServed is sent again for up to 30 seconds,
// as a client should retry a 503 (an apply is idempotent); the suite's
// probe before the specs (waitWorkflowRunsAdmitted) saw the kind served,
// but the view can be rebuilt after it.
func mustKubectl(args ...string) string {
	out, err := kubectl(args...)
	for deadline := time.Now().Add(30 * time.Second); err != nil && len(args) > 0 && args[0] == "apply" &&
		strings.Contains(out, crdNotYetServed) && time.Now().Before(deadline); {
		time.Sleep(250 * time.Millisecond)
		out, err = kubectl(args...)
	}
	ExpectWithOffset(1, err).NotTo(HaveOccurred(), "kubectl %s:\n%s", strings.Join(args, " "), out)
	return out
}

// freePort returns a loopback address with a port nobody listens on.
func freePort() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	defer l.Close()
	return l.Addr().String()
}

var metricsAddr, healthAddr, consoleAddr string

func startManager() *process {
	if metricsAddr == "" {
		metricsAddr, healthAddr, consoleAddr = freePort(), freePort(), freePort()
	}
	return start("manager", []string{"KUBECONFIG=" + managerKC, "DATABASE_URL=" + dbURL},
		filepath.Join(binDir, "manager"), "--leader-elect", "--leader-election-namespace="+chartNamespace,
		"--metrics-bind-address="+metricsAddr, "--health-probe-bind-address="+healthAddr,
		"--autoscale-interval=1s", "--resync-period=5s", "--console-bind-address="+consoleAddr)
}

// apiserverStarting holds the windows in which the API server was
// restarting, during which it refuses every request.
var apiserverStarting [][2]time.Time

// whileAPIServerStarting reports whether a JSON log line was written within
// a second of a window in apiserverStarting.
func whileAPIServerStarting(line string) bool {
	var l struct {
		TS time.Time `json:"ts"`
	}
	if json.Unmarshal([]byte(line), &l) != nil {
		return false
	}
	for _, w := range apiserverStarting {
		if !l.TS.Before(w[0].Add(-time.Second)) && !l.TS.After(w[1].Add(time.Second)) {
			return true
		}
	}
	return false
}

// superviseManager plays the kubelet for the manager until the spec ends:
// like a Deployment's restartPolicy Always, it starts the manager again
// whenever the process has exited, and counts how often it did.
func superviseManager() (restarts func() int) {
	var mu sync.Mutex
	n := 0
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			mu.Lock()
			if !manager.alive() {
				_, _ = manager.cmd.Process.Wait()
				manager = startManager()
				n++
			}
			mu.Unlock()
		}
	}()
	DeferCleanup(func() {
		close(done)
		<-stopped
	})
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return n
	}
}

// waitWorkflowRunsAdmitted waits until the API server admits a new
// WorkflowRun. An Established CRD is not yet enough: the API server's
// mutating admission policies learn the new kind's schema a moment later and
// refuse creates with ServiceUnavailable until then (failurePolicy Ignore
// does not cover it), so the first spec to apply one could fail.
func waitWorkflowRunsAdmitted() {
	probe := writeManifest("admission-probe.yaml", `
apiVersion: workflow.simpleworkflow.dev/v1alpha1
kind: WorkflowRun
metadata: {name: admission-probe, namespace: default}
spec: {type: probe.v1}
`)
	EventuallyWithOffset(1, func() error {
		out, err := kubectl("create", "--dry-run=server", "-f", probe)
		if err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
		return nil
	}).WithTimeout(60 * time.Second).Should(Succeed())
}

var _ = BeforeSuite(func() {
	ctx, cancel = context.WithCancel(context.Background())
	DeferCleanup(cancel)
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	Expect(assets).NotTo(BeEmpty(), "run through `make test`, which builds the control plane, kubectl and helm")
	kubectlBin = filepath.Join(assets, "kubectl")
	helmBin = os.Getenv("HELM")
	Expect(helmBin).NotTo(BeEmpty(), "run through `make test`, which builds helm and exports HELM")

	workDir = GinkgoT().TempDir()
	binDir = filepath.Join(workDir, "bin")
	root, err := pgtest.RepoFile(".")
	Expect(err).NotTo(HaveOccurred())
	for out, pkg := range map[string]string{"manager": "./cmd", "example-worker": "./cmd/example-worker"} {
		// Built as the images' binaries are (hack/image.sh): static and
		// -trimpath, so the image spec's build finds every package compiled.
		cmd := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(binDir, out), pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		cmd.Dir = root
		b, err := cmd.CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), "go build %s: %s", pkg, b)
	}

	// A Postgres cluster of the suite's own: the outage specs crash-restart it.
	pg, err = pgtest.StartCluster(ctx)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(pg.Stop)
	dbURL = pg.URL
	sdk, err = simpleworkflow.Connect(ctx, dbURL)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(sdk.Close)
	Expect(sdk.Migrate(ctx)).To(Succeed())
	// The roles the console (workflow_reader) and the chart's users act as.
	owner, err := pgxpool.New(ctx, dbURL)
	Expect(err).NotTo(HaveOccurred())
	Expect(engine.CreateRoles(ctx, owner)).To(Succeed())
	owner.Close()

	cp, err = devenv.StartControlPlane(workDir, "")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(cp.Stop)
	scheme := runtime.NewScheme()
	Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	Expect(workflowv1alpha1.AddToScheme(scheme)).To(Succeed())
	k8sClient, err = client.New(cp.Config, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())

	By("installing the chart with helm")
	helm := func(args ...string) string {
		cmd := exec.CommandContext(ctx, helmBin, args...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+cp.Kubeconfig)
		out, err := cmd.CombinedOutput()
		ExpectWithOffset(1, err).NotTo(HaveOccurred(), "helm %s:\n%s", strings.Join(args, " "), out)
		return string(out)
	}
	out := helm("install", releaseName, filepath.Join(root, "charts", "simple-workflow"),
		"--namespace", chartNamespace, "--create-namespace", "--set", "database.url="+dbURL)
	Expect(out).To(ContainSubstring("STATUS: deployed"))
	Expect(helm("status", releaseName, "--namespace", chartNamespace)).To(ContainSubstring("STATUS: deployed"))
	mustKubectl("wait", "--for=condition=Established", "crd/workflowruns.workflow.simpleworkflow.dev",
		"crd/workflowregistries.workflow.simpleworkflow.dev", "crd/workflowinboxes.workflow.simpleworkflow.dev", "--timeout=60s")
	waitWorkflowRunsAdmitted()
	// No kubelet runs the chart's Deployment here; its objects are what the
	// manager process below is configured from.
	mustKubectl("get", "deployment", releaseName+"-simple-workflow", "-n", chartNamespace)
	mustKubectl("get", "secret", releaseName+"-simple-workflow-database", "-n", chartNamespace)

	By("running the manager as the chart's ServiceAccount")
	managerKC = filepath.Join(workDir, "manager.kubeconfig")
	Expect(cp.ImpersonatingKubeconfig(managerKC, serviceAccount)).To(Succeed())
	// The impersonating identity really is confined to the chart's RBAC.
	can := func(args ...string) string {
		out, _ := kubectl(append([]string{"--kubeconfig", managerKC, "auth", "can-i"}, args...)...)
		return strings.TrimSpace(out)
	}
	Expect(can("patch", "workflowruns.workflow.simpleworkflow.dev", "--subresource=status", "-n", "default")).To(Equal("yes"))
	// Secrets: get in its own namespace only (WorkflowInboxes' URLs).
	Expect(can("get", "secrets", "-n", chartNamespace)).To(Equal("yes"))
	Expect(can("list", "secrets", "-n", chartNamespace)).To(Equal("no"))
	Expect(can("get", "secrets", "-n", "default")).To(Equal("no"))
	Expect(can("delete", "deployments", "-n", "default")).To(Equal("no"))
	manager = startManager()
	DeferCleanup(func() { manager.stop(syscall.SIGTERM) })
})

var _ = AfterSuite(func() {
	if manager == nil {
		return
	}
	// A permission the chart lacks shows up as "forbidden" in the manager's
	// log, except while a restarted API server was loading its RBAC roles.
	var denials []string
	for line := range strings.Lines(manager.output()) {
		if strings.Contains(line, "forbidden") && !whileAPIServerStarting(line) {
			denials = append(denials, line)
		}
	}
	Expect(denials).To(BeEmpty(), "the manager hit an RBAC denial")
})

// follow runs example-worker processes matching a Deployment's replicas until
// the spec ends.
func follow(ns, name, prefixes string) *devenv.ReplicaFollower {
	f := &devenv.ReplicaFollower{
		Client: k8sClient, Namespace: ns, Name: name, StopTimeout: 20 * time.Second,
		Command: func(i int) *exec.Cmd {
			cmd := exec.Command(filepath.Join(binDir, "example-worker"), "--type-prefixes="+prefixes, "--namespace="+ns,
				fmt.Sprintf("--worker-id=%s-%d", name, i), "--shutdown-grace-period=5s", "--lease-duration=6s")
			cmd.Env = append(os.Environ(), "DATABASE_URL="+dbURL)
			if f, err := os.Create(filepath.Join(workDir, fmt.Sprintf("%s-%d.log", name, i))); err == nil {
				cmd.Stdout, cmd.Stderr = f, f
			}
			return cmd
		},
		Log: slog.New(slog.NewTextHandler(GinkgoWriter, nil)),
	}
	fctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = f.Run(fctx)
	}()
	DeferCleanup(func() {
		stop()
		<-done
	})
	return f
}

func workerLogs(name string) string {
	var all strings.Builder
	files, _ := filepath.Glob(filepath.Join(workDir, name+"-*.log"))
	for _, f := range files {
		b, _ := os.ReadFile(f)
		all.Write(b)
	}
	return all.String()
}

// sdkPool is the inbox connection pool, for assertions on the rows.
func sdkPool() *pgxpool.Pool { return sdk.Pool() }
