//go:build localnode

// Package localnode runs the user's path on a real node (hack/localnode.sh):
// the images built by make image and imported into the node's containerd,
// Postgres reachable from pods, helm install of the chart as the README says,
// WorkflowRuns applied with kubectl, the example worker scaled from zero by
// the manager's autoscaler and back. Run it with `make test-localnode`
// (root, Linux; it starts and stops the node itself).
package localnode

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const (
	namespace = "simple-workflow-system"
	release   = "sw"
	runs      = 5
)

// env is what the spec runs against.
type env struct {
	root, kubectl, helm, kubeconfig, pgDir, dbURL, nodeIP, tag string
}

func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "hack", "localnode.sh")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("repository root not found")
		}
		dir = parent
	}
}

// run runs a command and returns its standard output; it fails the test
// with the command's output on error.
func (e *env) run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := e.try(name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

func (e *env) try(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = e.root
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.kubeconfig)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	err := cmd.Run()
	if err != nil {
		return out.String() + stderr.String(), err
	}
	return out.String(), nil
}

func (e *env) k(t *testing.T, args ...string) string { t.Helper(); return e.run(t, e.kubectl, args...) }

// eventually polls cond every 100 ms until it holds, failing after bound.
func eventually(t *testing.T, bound time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > bound {
			t.Fatalf("%s: not within %s", what, bound)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return time.Since(start)
}

func setUp(t *testing.T) *env {
	t.Helper()
	e := &env{root: repoRoot(t)}
	e.kubectl = filepath.Join(e.root, "bin/k8s/v1.37.2/kubectl")
	e.helm = filepath.Join(e.root, "bin/helm-v3.22.0")
	t.Log("starting the node (hack/localnode.sh up)")
	e.kubeconfig = strings.TrimSpace(e.run(t, "hack/localnode.sh", "up"))
	t.Cleanup(func() {
		if out, err := e.try("hack/localnode.sh", "down"); err != nil {
			t.Errorf("hack/localnode.sh down: %v\n%s", err, out)
		}
	})
	e.nodeIP = strings.TrimSpace(e.k(t, "get", "node", "-o", "jsonpath={.items[0].status.addresses[?(@.type==\"InternalIP\")].address}"))

	t.Log("building the images (make image) and importing them into the node")
	e.run(t, "make", "image")
	e.tag = strings.TrimSpace(e.run(t, "sh", "-c", "sed -n 's/^appVersion: *//p' charts/simple-workflow/Chart.yaml | tr -d '\"'"))
	e.run(t, "hack/localnode.sh", "import",
		"ghcr.io/simple-workflow/manager:"+e.tag, "ghcr.io/simple-workflow/example-worker:"+e.tag)

	// Postgres on the node's address, open to the pods' range.
	e.pgDir = t.TempDir()
	cmd := exec.Command("hack/pg.sh", "start", e.pgDir)
	cmd.Dir = e.root
	cmd.Env = append(os.Environ(), "PG_EXTRA_OPTS=-c listen_addresses=127.0.0.1,"+e.nodeIP)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hack/pg.sh start: %v", err)
	}
	local := strings.TrimSpace(string(out))
	t.Cleanup(func() { _, _ = e.try("hack/pg.sh", "stop", e.pgDir) })
	cluster := strings.TrimSpace(e.run(t, "cat", filepath.Join(e.pgDir, "cluster")))
	hba := fmt.Sprintf("host all all 10.244.0.0/16 trust\nhost all all %s/32 trust\n", e.nodeIP)
	f, err := os.OpenFile(filepath.Join(cluster, "data", "pg_hba.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(hba); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	e.run(t, "psql", local, "-qc", "select pg_reload_conf()")
	e.dbURL = strings.Replace(local, "127.0.0.1", e.nodeIP, 1)
	return e
}

// The README's path: helm install with a Secret and the example worker; runs
// applied with kubectl scale the worker from zero, succeed, and the worker
// goes back to zero.
func TestUserPathOnARealNode(t *testing.T) {
	e := setUp(t)
	port := e.dbURL[strings.LastIndex(e.dbURL, ":")+1:]
	port = port[:strings.Index(port, "/")]

	e.k(t, "create", "namespace", namespace)
	e.k(t, "-n", namespace, "create", "secret", "generic", "simple-workflow-database", "--from-literal=url="+e.dbURL)
	t0 := time.Now()
	e.run(t, e.helm, "install", release, "charts/simple-workflow", "-n", namespace, "--wait", "--timeout", "3m",
		"--set", "database.existingSecret=simple-workflow-database",
		"--set", "exampleWorker.enabled=true",
		"--set", "image.repository=ghcr.io/simple-workflow/manager", "--set", "image.tag="+e.tag,
		"--set", "exampleWorker.image.repository=ghcr.io/simple-workflow/example-worker",
		"--set", "exampleWorker.image.tag="+e.tag,
		"--set", "resources.requests.memory=96Mi", "--set", "resources.limits.memory=384Mi",
		"--set", "networkPolicy.databasePort="+port,
		"--set", "manager.createDatabaseRoles=true",
		"--set", "exampleWorker.scaleDownDelay=10s")
	installed := time.Since(t0)

	// The manager is Ready, leads, installed the schema and created the roles.
	manager := "deploy/" + release + "-simple-workflow"
	pod := strings.TrimSpace(e.k(t, "-n", namespace, "get", "pods", "-l", "app.kubernetes.io/component=manager",
		"-o", "jsonpath={.items[0].metadata.name}"))
	eventually(t, time.Minute, "the manager pod holds the leader Lease", func() bool {
		out, _ := e.try(e.kubectl, "-n", namespace, "get", "leases", "-o", "jsonpath={.items[*].spec.holderIdentity}")
		return pod != "" && strings.Contains(out, pod)
	})
	if out, err := e.try(e.kubectl, "-n", namespace, "logs", manager); err != nil {
		t.Logf("the manager's log could not be read through the kubelet: %v\n%s", err, out)
	}
	version := strings.TrimSpace(e.run(t, "psql", e.dbURL, "-Atc", "select max(version) from workflow.schema_version"))
	roles := strings.TrimSpace(e.run(t, "psql", e.dbURL, "-Atc",
		"select count(*) from pg_roles where rolname in ('workflow_worker', 'workflow_producer', 'workflow_reader')"))
	if version == "" || roles != "3" {
		t.Fatalf("schema version %q, %s of 3 roles", version, roles)
	}
	worker := "deploy/" + release + "-simple-workflow-example-worker"
	replicas := func() string {
		out, _ := e.try(e.kubectl, "-n", namespace, "get", worker, "-o", "jsonpath={.spec.replicas}")
		return strings.TrimSpace(out)
	}
	if r := replicas(); r != "0" {
		t.Fatalf("the example worker starts with %s replicas, want 0", r)
	}

	var manifest strings.Builder
	for i := range runs {
		fmt.Fprintf(&manifest, "---\napiVersion: workflow.simpleworkflow.dev/v1alpha1\nkind: WorkflowRun\n"+
			"metadata: {name: echo-%d, namespace: default}\nspec: {type: demo.echo.v1, payload: {n: %d}}\n", i, i)
	}
	path := filepath.Join(t.TempDir(), "runs.yaml")
	if err := os.WriteFile(path, []byte(manifest.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	applied := time.Now()
	e.k(t, "apply", "-f", path)
	eventually(t, time.Minute, "a worker pod Ready", func() bool {
		out, _ := e.try(e.kubectl, "-n", namespace, "get", "pods", "-l", "app.kubernetes.io/component=example-worker",
			"-o", "jsonpath={.items[*].status.conditions[?(@.type==\"Ready\")].status}")
		return strings.Contains(out, "True")
	})
	podReady := time.Since(applied)
	succeeded := func() int {
		out, _ := e.try(e.kubectl, "get", "wfr", "-n", "default", "-o", "jsonpath={range .items[*]}{.status.phase}{\"\\n\"}{end}")
		return strings.Count(out, "Succeeded")
	}
	eventually(t, time.Minute, "the first run Succeeded", func() bool { return succeeded() >= 1 })
	first := time.Since(applied)
	eventually(t, time.Minute, "every run Succeeded", func() bool { return succeeded() == runs })
	all := time.Since(applied)
	zero := eventually(t, 2*time.Minute, "the worker back at zero replicas", func() bool { return replicas() == "0" })

	t.Logf("timings on this node: helm install --wait %s; apply to first worker pod Ready %s; to first run Succeeded %s; "+
		"to all %d Succeeded %s; then to zero replicas %s (scaleDownDelay 10s)",
		installed.Round(time.Millisecond), podReady.Round(time.Millisecond), first.Round(time.Millisecond), runs,
		all.Round(time.Millisecond), zero.Round(time.Millisecond))
	fmt.Printf("localnode timings: install %s, first pod Ready %s, first Succeeded %s, all Succeeded %s, back to zero %s\n",
		installed.Round(time.Millisecond), podReady.Round(time.Millisecond), first.Round(time.Millisecond),
		all.Round(time.Millisecond), zero.Round(time.Millisecond))

	// The manager removes the finalizers of WorkflowRuns and WorkflowRegistries:
	// they go while it runs, before the chart does (docs/localnode.md).
	e.k(t, "delete", "wfr", "-n", "default", "--all", "--wait", "--timeout=60s")
	e.k(t, "delete", "workflowregistries", "-A", "--all", "--wait", "--timeout=60s")
	e.run(t, e.helm, "uninstall", release, "-n", namespace, "--wait", "--timeout", "2m")
}
