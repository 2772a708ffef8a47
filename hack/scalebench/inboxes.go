package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/engine"
	"github.com/simple-workflow/simple-workflow/internal/pgtest"
)

// benchNamespace is the namespace of inbox i's runs.
func benchNamespace(i int) string { return fmt.Sprintf("bench-%d", i) }

// benchInboxes makes the namespaces and, for k > 1, k-1 WorkflowInboxes on
// servers of their own, and waits until the manager serves them. It
// returns a pool per namespace (its inbox's database).
func benchInboxes(ctx context.Context, c client.Client, def *pgxpool.Pool, defURL string, k int) ([]*pgxpool.Pool, []string, error) {
	if k < 1 {
		return nil, nil, fmt.Errorf("-inboxes must be at least 1")
	}
	urls := []string{defURL}
	const secrets = "simple-workflow-system"
	if k > 1 {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: secrets}}); err != nil {
			return nil, nil, err
		}
	}
	pools := []*pgxpool.Pool{def}
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: benchNamespace(0)}}); err != nil {
		return nil, nil, err
	}
	for i := 1; i < k; i++ {
		cl, err := pgtest.StartCluster(ctx)
		if err != nil {
			return nil, nil, err
		}
		go func() { <-ctx.Done(); cl.Stop() }()
		cfg, err := pgxpool.ParseConfig(cl.URL)
		if err != nil {
			return nil, nil, err
		}
		cfg.MaxConns = 32
		p, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return nil, nil, err
		}
		if _, err := engine.Migrate(ctx, p); err != nil {
			return nil, nil, err
		}
		pools = append(pools, p)
		urls = append(urls, cl.URL)
		name := benchNamespace(i)
		if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: secrets, Name: name},
			StringData: map[string]string{"url": cl.URL}}); err != nil {
			return nil, nil, err
		}
		label := map[string]string{"bench-inbox": name}
		if err := c.Create(ctx, &workflowv1alpha1.WorkflowInbox{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: workflowv1alpha1.WorkflowInboxSpec{
				SecretRef:         workflowv1alpha1.InboxSecretRef{Namespace: secrets, Name: name, Key: "url"},
				NamespaceSelector: metav1.LabelSelector{MatchLabels: label},
			}}); err != nil {
			return nil, nil, err
		}
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: label}}); err != nil {
			return nil, nil, err
		}
	}
	deadline := time.Now().Add(time.Minute)
	for i := 1; i < k; i++ {
		for {
			var in workflowv1alpha1.WorkflowInbox
			if err := c.Get(ctx, client.ObjectKey{Name: benchNamespace(i)}, &in); err != nil {
				return nil, nil, err
			}
			if slices.Contains(in.Status.Namespaces, benchNamespace(i)) {
				break
			}
			if time.Now().After(deadline) {
				return nil, nil, fmt.Errorf("WorkflowInbox %s did not take its namespace within a minute: %+v", in.Name, in.Status.Conditions)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return pools, urls, nil
}

// startWorkerProcess builds (once) and starts an example-worker serving a
// namespace of a database; stop ends it.
func startWorkerProcess(ctx context.Context, url, namespace string, concurrency int) (stop func(), err error) {
	bin, err := exampleWorker(ctx)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, bin, "--type-prefixes=demo.", "--namespace="+namespace,
		fmt.Sprintf("--concurrency=%d", concurrency), "--worker-id=bench-"+namespace)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+url)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start example-worker: %w", err)
	}
	return func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }, nil
}

// exampleWorker builds cmd/example-worker into a temporary directory.
func exampleWorker(ctx context.Context) (string, error) {
	root, err := pgtest.RepoFile(".")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(os.TempDir(), "scalebench-example-worker")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/example-worker")
	build.Dir = root
	out, err := build.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("build example-worker in %s: %w\n%s", root, err, out)
	}
	return bin, nil
}

// processCPU is the processor time this process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
