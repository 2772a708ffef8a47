// Command demo runs simple-workflow locally with nothing else set up: a
// throwaway Postgres, a local control plane (kube-apiserver and etcd built by
// `make envtest`), the manager and example workers as local processes. It
// applies config/samples/ with kubectl, shows `kubectl get workflowruns`
// until every sample Succeeded, then keeps running until Ctrl-C and cleans up.
//
// With -env-only it starts only Postgres and the control plane.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/devenv"
	"github.com/simple-workflow/simple-workflow/internal/pgtest"
)

func main() {
	var stopped []string
	err := run(&stopped)
	if len(stopped) > 0 {
		// The deferred clean-ups ran in reverse order of start.
		say("All stopped: %s", strings.Join(stopped, "; "))
	}
	if errors.Is(err, context.Canceled) {
		return // interrupted while starting: what started was stopped
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func say(format string, args ...any) { fmt.Printf("==> "+format+"\n", args...) }

// run starts everything, and appends to stopped what its clean-ups stopped
// or removed. Ctrl-C (SIGINT) or SIGTERM ends it without an error.
func run(stopped *[]string) error {
	envOnly := flag.Bool("env-only", false, "start only Postgres and the control plane")
	bin := flag.String("bin", "bin", "directory with manager and example-worker")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	dir, err := os.MkdirTemp("", "simple-workflow-demo-")
	if err != nil {
		return err
	}
	defer func() {
		_ = os.RemoveAll(dir)
		*stopped = append(*stopped, "removed the working directory "+dir)
	}()
	say("Working directory (logs): %s", dir)

	say("Starting a throwaway Postgres")
	dbURL, stopPG, err := pgtest.StartServer(ctx)
	if err != nil {
		return err
	}
	defer func() {
		stopPG()
		*stopped = append(*stopped, "Postgres stopped and its data directory removed")
	}()

	say("Starting the local control plane (kube-apiserver + etcd)")
	crds, err := pgtest.RepoFile("config/crd/bases")
	if err != nil {
		return err
	}
	cp, err := devenv.StartControlPlane(dir, crds)
	if err != nil {
		return err
	}
	defer func() {
		_ = cp.Stop()
		*stopped = append(*stopped, "control plane (kube-apiserver, etcd) stopped")
	}()
	kubectlPath := filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl")

	printEnv := func() {
		fmt.Println()
		fmt.Println("From another terminal:")
		fmt.Printf("  export KUBECONFIG=%s\n", cp.Kubeconfig)
		fmt.Printf("  export DATABASE_URL='%s'\n", dbURL)
		fmt.Printf("  %s get workflowruns\n", kubectlPath)
		fmt.Println()
	}
	if *envOnly {
		printEnv()
		say("Postgres and the control plane are up. Press Ctrl-C to stop.")
		<-ctx.Done()
		return nil
	}

	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = workflowv1alpha1.AddToScheme(scheme)
	c, err := client.New(cp.Config, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}

	say("Starting the manager")
	managerLog, err := os.Create(filepath.Join(dir, "manager.log"))
	if err != nil {
		return err
	}
	metricsAddr, err := freeLocalAddr()
	if err != nil {
		return err
	}
	manager := exec.Command(filepath.Join(*bin, "manager"), "--metrics-bind-address="+metricsAddr,
		"--health-probe-bind-address=0", "--autoscale-interval=2s")
	manager.Env = append(os.Environ(), "KUBECONFIG="+cp.Kubeconfig, "DATABASE_URL="+dbURL)
	manager.Stdout, manager.Stderr = managerLog, managerLog
	// Its own process group: Ctrl-C reaches the demo, which stops the
	// manager in order (SIGTERM, after the workers).
	manager.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := manager.Start(); err != nil {
		return fmt.Errorf("start manager (run `make build` first): %w", err)
	}
	defer func() {
		_ = manager.Process.Signal(syscall.SIGTERM)
		_ = manager.Wait()
		*stopped = append(*stopped, "manager stopped (SIGTERM)")
	}()
	say("Manager metrics: http://%s/metrics", metricsAddr)

	say("Creating the example-worker Deployment; worker processes follow its replicas (no kubelet here)")
	if err := createWorkerDeployment(ctx, c); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	follower := &devenv.ReplicaFollower{
		Client: c, Namespace: "default", Name: "example-worker",
		Command: func(i int) *exec.Cmd {
			cmd := exec.Command(filepath.Join(*bin, "example-worker"), "--type-prefixes=demo.",
				fmt.Sprintf("--worker-id=example-worker-%d", i), "--shutdown-grace-period=5s")
			cmd.Env = append(os.Environ(), "DATABASE_URL="+dbURL)
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if f, err := os.Create(filepath.Join(dir, fmt.Sprintf("example-worker-%d.log", i))); err == nil {
				cmd.Stdout, cmd.Stderr = f, f
			}
			return cmd
		},
		Log: slog.New(slog.NewTextHandler(os.Stdout, nil)),
	}
	followCtx, stopFollow := context.WithCancel(context.Background())
	followDone := make(chan struct{})
	go func() {
		defer close(followDone)
		_ = follower.Run(followCtx)
	}()
	defer func() {
		stopFollow()
		<-followDone
		*stopped = append(*stopped, "example-worker processes stopped (SIGTERM)")
	}()

	kubectl := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, kubectlPath, args...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+cp.Kubeconfig)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	samples, err := pgtest.RepoFile("config/samples")
	if err != nil {
		return err
	}
	say("kubectl apply -k config/samples/")
	out, err := kubectl("apply", "-k", samples)
	fmt.Print(out)
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		return fmt.Errorf("kubectl apply: %w", err)
	}

	deadline := time.Now().Add(3 * time.Minute)
	approved := false
	for {
		out, err := kubectl("get", "workflowruns", "-o", "wide")
		if ctx.Err() != nil {
			return nil // Ctrl-C while waiting for the samples
		}
		if err != nil {
			return fmt.Errorf("kubectl get workflowruns: %w: %s", err, out)
		}
		say("kubectl get workflowruns -o wide")
		fmt.Print(out)
		if allSucceeded(out) {
			break
		}
		// order-1 (demo.order.v1) parks in a durable sleep, then waits for an
		// "approve" signal: send it the way a user would.
		if !approved && waiting(out, "order-1") {
			const patch = `[{"op":"add","path":"/spec/signals/-","value":{"name":"approve","payload":{"by":"demo"}}}]`
			say("kubectl patch wfr order-1 --type=json -p '" + patch + "'")
			out, err := kubectl("patch", "wfr", "order-1", "--type=json", "-p", patch)
			fmt.Print(out)
			if ctx.Err() != nil {
				return nil
			}
			if err != nil {
				return fmt.Errorf("approve order-1: %w", err)
			}
			approved = true
		}
		if time.Now().After(deadline) {
			return errors.New("the samples did not all succeed within 3 minutes; see the logs in " + dir)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(2 * time.Second):
		}
	}
	say("Every sample WorkflowRun Succeeded.")
	for _, name := range []string{"fail-twice", "order-1"} {
		if out, err := kubectl("describe", "workflowrun", name); err == nil {
			say("kubectl describe workflowrun " + name)
			fmt.Print(out)
		}
	}
	printEnv()
	say("Running until Ctrl-C. Try: kubectl apply -f - with your own WorkflowRun, or kubectl get wfreg demo -o yaml")
	<-ctx.Done()
	return nil
}

// waiting reports whether the row of WorkflowRun name shows phase Waiting.
func waiting(out, name string) bool {
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 2 && f[0] == name && strings.Contains(l, " Waiting ") {
			return true
		}
	}
	return false
}

// allSucceeded reports whether every row of `kubectl get workflowruns` shows
// Succeeded.
func allSucceeded(out string) bool {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 2 {
		return false
	}
	for _, l := range lines[1:] {
		if !strings.Contains(l, " Succeeded ") {
			return false
		}
	}
	return true
}

func createWorkerDeployment(ctx context.Context, c client.Client) error {
	labels := map[string]string{"app": "example-worker"}
	zero := int32(0)
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "example-worker"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &zero,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: int64p(30),
					Containers: []corev1.Container{{Name: "worker", Image: "ghcr.io/simple-workflow/example-worker:v0.1.0",
						Args: []string{"--type-prefixes=demo.", "--shutdown-grace-period=20s"}}},
				},
			},
		},
	}
	return c.Create(ctx, d)
}

func int64p(v int64) *int64 { return &v }

// freeLocalAddr returns a loopback address with a port free at this moment.
func freeLocalAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}
