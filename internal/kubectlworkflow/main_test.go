package kubectlworkflow

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/devenv"
	"github.com/simple-workflow/simple-workflow/internal/pgtest"
)

// cluster is the real kube-apiserver (with the repository's CRDs) and the
// built plugin that the tests of this package share; each test works in a
// namespace of its own.
type cluster struct {
	cp  *devenv.ControlPlane
	kc  client.Client
	bin string
}

// testCluster is set by TestMain before any test runs and never changed.
var testCluster *cluster

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		fmt.Fprintln(os.Stderr, "KUBEBUILDER_ASSETS is not set: run through `make test`, or point it at bin/k8s/<version>")
		return 1
	}
	dir, err := os.MkdirTemp("", "kubectl-workflow-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	c, err := startCluster(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = c.cp.Stop() }()
	testCluster = c
	return m.Run()
}

// startCluster builds the plugin and starts the control plane.
func startCluster(dir string) (*cluster, error) {
	root, err := pgtest.RepoFile(".")
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(dir, "kubectl-workflow")
	build := exec.Command("go", "build", "-o", bin, "./cmd/kubectl-workflow")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build ./cmd/kubectl-workflow: %v\n%s", err, out)
	}
	cp, err := devenv.StartControlPlane(dir, filepath.Join(root, "config", "crd", "bases"))
	if err != nil {
		return nil, err
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := workflowv1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	kc, err := client.New(cp.Config, client.Options{Scheme: scheme})
	if err != nil {
		_ = cp.Stop()
		return nil, fmt.Errorf("client: %w", err)
	}
	return &cluster{cp: cp, kc: kc, bin: bin}, nil
}

// env is one test's view of the cluster: a namespace of its own.
type env struct {
	*cluster
	t   *testing.T
	ctx context.Context
	ns  string
}

// newEnv creates a namespace for the test, named after it.
func newEnv(t *testing.T) *env {
	t.Helper()
	t.Parallel()
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(name) > 50 {
		name = name[:50]
	}
	e := &env{cluster: testCluster, t: t, ctx: t.Context(), ns: strings.TrimRight(name, "-")}
	e.namespace(e.ns)
	return e
}

// namespace creates namespace ns.
func (e *env) namespace(ns string) {
	e.t.Helper()
	if err := e.kc.Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
		e.t.Fatalf("create namespace %s: %v", ns, err)
	}
}

// result is what a run of the plugin printed and its exit code.
type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit code %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// plugin runs the built plugin with args and the administrator's
// kubeconfig in KUBECONFIG, for at most a minute.
func (e *env) plugin(args ...string) result {
	e.t.Helper()
	return e.pluginWith([]string{"KUBECONFIG=" + e.cp.Kubeconfig}, args...)
}

// pluginWith runs the plugin with the environment variables env (HOME is a
// directory of the test's, so no ~/.kube/config is read).
func (e *env) pluginWith(env []string, args ...string) result {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.bin, args...)
	cmd.Env = append([]string{"HOME=" + e.t.TempDir(), "PATH=" + os.Getenv("PATH")}, env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errOut.String()}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	default:
		e.t.Fatalf("run %s: %v", strings.Join(args, " "), err)
	}
	return r
}

// background starts the plugin with args and returns its output so far
// and a channel with its exit code; it is killed when the test ends.
func (e *env) background(args ...string) (*syncBuffer, *syncBuffer, <-chan int) {
	e.t.Helper()
	out, errOut, code, _ := e.backgroundProcess(args...)
	return out, errOut, code
}

// backgroundProcess is background, with the process (to signal it).
func (e *env) backgroundProcess(args ...string) (*syncBuffer, *syncBuffer, <-chan int, *os.Process) {
	e.t.Helper()
	cmd := exec.CommandContext(e.ctx, e.bin, args...)
	cmd.Env = []string{"HOME=" + e.t.TempDir(), "KUBECONFIG=" + e.cp.Kubeconfig}
	out, errOut := &syncBuffer{}, &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, errOut
	if err := cmd.Start(); err != nil {
		e.t.Fatalf("start %s: %v", strings.Join(args, " "), err)
	}
	code := make(chan int, 1)
	go func() {
		_ = cmd.Wait()
		code <- cmd.ProcessState.ExitCode()
	}()
	return out, errOut, code, cmd.Process
}

// syncBuffer is a bytes.Buffer safe for a process's writer and a test's
// reader.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// eventually polls cond every 50 ms until it holds or 30 seconds passed.
func (e *env) eventually(what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out after 30s waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// createRun creates a WorkflowRun of type typ in the test's namespace.
func (e *env) createRun(name, typ string) *workflowv1alpha1.WorkflowRun {
	e.t.Helper()
	run := &workflowv1alpha1.WorkflowRun{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec:       workflowv1alpha1.WorkflowRunSpec{Type: typ},
	}
	if err := e.kc.Create(e.ctx, run); err != nil {
		e.t.Fatalf("create workflowrun %s/%s: %v", e.ns, name, err)
	}
	return run
}

// setStatus changes the run's status through the status subresource, as
// the operator does.
func (e *env) setStatus(name string, change func(*workflowv1alpha1.WorkflowRunStatus)) {
	e.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		run := e.run(name)
		change(&run.Status)
		return e.kc.Status().Update(e.ctx, run)
	})
	if err != nil {
		e.t.Fatalf("update status of workflowrun %s/%s: %v", e.ns, name, err)
	}
}

// run reads the run from the API server.
func (e *env) run(name string) *workflowv1alpha1.WorkflowRun {
	e.t.Helper()
	var run workflowv1alpha1.WorkflowRun
	if err := e.kc.Get(e.ctx, client.ObjectKey{Namespace: e.ns, Name: name}, &run); err != nil {
		e.t.Fatalf("get workflowrun %s/%s: %v", e.ns, name, err)
	}
	return &run
}

// kubeconfigIn writes a copy of the administrator's kubeconfig whose
// current context defaults to namespace ns, with a second context "other"
// defaulting to namespace other, and returns its path.
func (e *env) kubeconfigIn(ns, other string) string {
	e.t.Helper()
	cfg, err := clientcmd.LoadFromFile(e.cp.Kubeconfig)
	if err != nil {
		e.t.Fatal(err)
	}
	cur := cfg.Contexts[cfg.CurrentContext]
	cur.Namespace = ns
	o := cur.DeepCopy()
	o.Namespace = other
	cfg.Contexts["other"] = o
	path := filepath.Join(e.t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		e.t.Fatal(err)
	}
	return path
}

// wantCode fails the test unless the plugin exited with code.
func wantCode(t *testing.T, r result, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("want exit code %d, got %s", code, r)
	}
}

// wantIn fails the test unless s holds every one of subs.
func wantIn(t *testing.T, what, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			t.Errorf("%s lacks %q:\n%s", what, sub, s)
		}
	}
}
