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

// runEvents counts a run's audit events by type, read from the inbox.
func (e *env) runEvents(t *testing.T, wfr string) map[string]int {
	t.Helper()
	out := e.run(t, "psql", e.dbURL, "-Atc", fmt.Sprintf(`select e.event_type || ' ' || count(*)
		from workflow.workflow_run r join workflow.run_event e on e.workflow_id = r.id
		where r.namespace = '%s' and r.source_name = '%s' group by e.event_type`, namespace, wfr))
	counts := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var kind string
		var n int
		if _, err := fmt.Sscanf(line, "%s %d", &kind, &n); err == nil {
			counts[kind] = n
		}
	}
	return counts
}

func (e *env) phase(wfr string) string {
	out, _ := e.try(e.kubectl, "get", "wfr", "-n", namespace, wfr, "-o", "jsonpath={.status.phase}")
	return strings.TrimSpace(out)
}

func (e *env) apply(t *testing.T, manifest string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "manifest.yaml")
	if err := os.WriteFile(path, []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	e.k(t, "apply", "-f", path)
}

// wfr is a WorkflowRun in the release's namespace, whose example worker
// serves it (a worker serves its own namespace).
func wfr(name, typ, payload string) string {
	return fmt.Sprintf("---\napiVersion: workflow.simpleworkflow.dev/v1alpha1\nkind: WorkflowRun\n"+
		"metadata: {name: %s, namespace: %s}\nspec: {type: %s, payload: %s}\n", name, namespace, typ, payload)
}

// The README's path, then what goes wrong in clusters, on one install.
func TestOnARealNode(t *testing.T) {
	e := setUp(t)
	t.Run("the user's path", func(t *testing.T) { userPath(t, e) })
	t.Run("a worker pod killed mid-run", func(t *testing.T) { workerKilled(t, e) })
	t.Run("the leader deleted with two replicas", func(t *testing.T) { leaderDeleted(t, e) })
	t.Run("the database lost under the readiness probe", func(t *testing.T) { databaseLost(t, e) })
	t.Run("helm upgrade to a new image while runs are in flight", func(t *testing.T) { upgrade(t, e) })
	t.Run("the console through kubectl port-forward", func(t *testing.T) { console(t, e) })
	t.Run("ten thousand WorkflowRuns within the manager memory limit", func(t *testing.T) { load(t, e) })
	t.Run("uninstall", func(t *testing.T) { uninstall(t, e) })
}

// The README's path: helm install with a Secret and the example worker; runs
// applied with kubectl scale the worker from zero, succeed, and the worker
// goes back to zero.
func userPath(t *testing.T, e *env) {
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
	// The API server's admission policies learn the new kind a moment after
	// the CRD is Established; until then a create is refused (503).
	probe := filepath.Join(t.TempDir(), "probe.yaml")
	if err := os.WriteFile(probe, []byte(wfr("admission-probe", "probe.v1", "{}")), 0o600); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "the API server admits a WorkflowRun", func() bool {
		_, err := e.try(e.kubectl, "create", "--dry-run=server", "-f", probe)
		return err == nil
	})

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
			"metadata: {name: echo-%d, namespace: %s}\nspec: {type: demo.echo.v1, payload: {n: %d}}\n", i, namespace, i)
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
		out, _ := e.try(e.kubectl, "get", "wfr", "-n", namespace, "-o", "jsonpath={range .items[*]}{.status.phase}{\"\\n\"}{end}")
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

}

// workerPod is the name of a Ready example-worker pod, or "".
func (e *env) workerPods() string {
	out, _ := e.try(e.kubectl, "-n", namespace, "get", "pods", "-l", "app.kubernetes.io/component=example-worker",
		"--field-selector=status.phase=Running", "-o", "jsonpath={.items[*].metadata.name}")
	return strings.TrimSpace(out)
}

// A worker pod killed (no grace) while it holds a run: the run's lease
// expires, the manager reaps it, another pod claims it and it succeeds once.
func workerKilled(t *testing.T, e *env) {
	e.apply(t, wfr("long", "demo.sleep.v1", "{seconds: 6}"))
	eventually(t, time.Minute, "the long run Running", func() bool { return e.phase("long") == "Running" })
	holder := strings.TrimSpace(e.run(t, "psql", e.dbURL, "-Atc",
		"select leased_by from workflow.workflow_run where source_name = 'long' and status = 'leased'"))
	pods := strings.Fields(e.workerPods())
	var victim string
	for _, p := range pods {
		if strings.Contains(holder, p) {
			victim = p
		}
	}
	if victim == "" {
		t.Fatalf("no running pod holds the run (holder %q, pods %v)", holder, pods)
	}
	killed := time.Now()
	e.k(t, "-n", namespace, "delete", "pod", victim, "--grace-period=0", "--force")
	eventually(t, 3*time.Minute, "the long run Succeeded", func() bool { return e.phase("long") == "Succeeded" })
	ev := e.runEvents(t, "long")
	if ev["started"] != 2 || ev["succeeded"] != 1 || ev["retried"] != 1 {
		t.Fatalf("events of the long run: %v, want two attempts started, one retried (lease expired), one success", ev)
	}
	reason := strings.TrimSpace(e.run(t, "psql", e.dbURL, "-Atc", `select e.data->>'reason' from workflow.run_event e
		join workflow.workflow_run r on r.id = e.workflow_id where r.source_name = 'long' and e.event_type = 'retried'`))
	if reason != "lease_expired" {
		t.Fatalf("the run came back with reason %q, want lease_expired", reason)
	}
	t.Logf("killed pod %s; the run succeeded on another attempt %s later", victim, time.Since(killed).Round(time.Millisecond))
}

// The leader deleted while another replica stands by: the other leads, and
// runs applied meanwhile are mirrored and finish once.
func leaderDeleted(t *testing.T, e *env) {
	e.run(t, e.helm, "upgrade", release, "charts/simple-workflow", "-n", namespace, "--reuse-values",
		"--set", "replicaCount=2", "--wait", "--timeout", "3m")
	holder := func() string {
		out, _ := e.try(e.kubectl, "-n", namespace, "get", "leases", "-o", "jsonpath={.items[*].spec.holderIdentity}")
		return out
	}
	managers := func() []string {
		out, _ := e.try(e.kubectl, "-n", namespace, "get", "pods", "-l", "app.kubernetes.io/component=manager",
			"--field-selector=status.phase=Running", "-o", "jsonpath={.items[*].metadata.name}")
		return strings.Fields(out)
	}
	eventually(t, time.Minute, "two managers running", func() bool { return len(managers()) == 2 })
	var leader, standby string
	for _, p := range managers() {
		if strings.Contains(holder(), p) {
			leader = p
		} else {
			standby = p
		}
	}
	if leader == "" || standby == "" {
		t.Fatalf("leader %q, standby %q (lease holder %q)", leader, standby, holder())
	}
	t.Logf("leader %s, standby %s", leader, standby)
	deleted := time.Now()
	e.k(t, "-n", namespace, "delete", "pod", leader, "--wait=false")
	for i := range 3 {
		e.apply(t, wfr(fmt.Sprintf("failover-%d", i), "demo.echo.v1", fmt.Sprintf("{n: %d}", i)))
	}
	// The standby, or the replacement the ReplicaSet starts, whichever takes
	// the Lease first.
	took := eventually(t, 2*time.Minute, "another manager leads", func() bool {
		h := holder()
		return h != "" && !strings.Contains(h, leader)
	})
	for i := range 3 {
		name := fmt.Sprintf("failover-%d", i)
		eventually(t, 2*time.Minute, name+" Succeeded", func() bool { return e.phase(name) == "Succeeded" })
		if ev := e.runEvents(t, name); ev["created"] != 1 || ev["succeeded"] != 1 || ev["started"] != 1 {
			t.Fatalf("%s: events %v, want each once", name, ev)
		}
	}
	t.Logf("%s led %s after the leader was deleted; the runs applied meanwhile finished once (%s in all)",
		holder(), took.Round(time.Millisecond), time.Since(deleted).Round(time.Millisecond))
}

// Postgres frozen: the manager's readiness goes false, it is not restarted,
// and it is Ready again once Postgres answers.
func databaseLost(t *testing.T, e *env) {
	ready := func(want string) func() bool {
		return func() bool {
			out, _ := e.try(e.kubectl, "-n", namespace, "get", "pods", "-l", "app.kubernetes.io/component=manager",
				"-o", "jsonpath={.items[*].status.conditions[?(@.type==\"Ready\")].status}")
			f := strings.Fields(out)
			if len(f) == 0 {
				return false
			}
			for _, s := range f {
				if s != want {
					return false
				}
			}
			return true
		}
	}
	restarts := func() string {
		out, _ := e.try(e.kubectl, "-n", namespace, "get", "pods", "-l", "app.kubernetes.io/component=manager",
			"-o", "jsonpath={.items[*].status.containerStatuses[*].restartCount}")
		return strings.TrimSpace(out)
	}
	before := restarts()
	done := make(chan error, 1)
	go func() {
		_, err := e.try("hack/pg.sh", "pause", e.pgDir, "45")
		done <- err
	}()
	eventually(t, 40*time.Second, "the managers not Ready while Postgres is frozen", ready("False"))
	if err := <-done; err != nil {
		t.Fatalf("hack/pg.sh pause: %v", err)
	}
	eventually(t, 90*time.Second, "the managers Ready again", ready("True"))
	if after := restarts(); after != before {
		t.Fatalf("restart counts went from %q to %q: the liveness probe killed a manager that only lost its database", before, after)
	}
}

// helm upgrade to a newly built image tag, with the README's CRD step,
// while runs are in flight: every run succeeds once; a run a stopping
// worker was running is handed back (reason released) and run again, never
// lost to a lease.
func upgrade(t *testing.T, e *env) {
	const n = 8
	tag := "v0.0.0-upgrade"
	cmd := exec.Command("hack/image.sh")
	cmd.Dir, cmd.Env = e.root, append(os.Environ(), "VERSION="+tag)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/image.sh with VERSION=%s: %v\n%s", tag, err, out)
	}
	e.run(t, "hack/localnode.sh", "import",
		"ghcr.io/simple-workflow/manager:"+tag, "ghcr.io/simple-workflow/example-worker:"+tag)
	var manifest strings.Builder
	for i := range n {
		// Longer than the worker's shutdown grace period (20 s): the runs a
		// replaced worker holds are handed back and run again.
		manifest.WriteString(wfr(fmt.Sprintf("inflight-%d", i), "demo.sleep.v1", "{seconds: 25}"))
	}
	e.apply(t, manifest.String())
	eventually(t, time.Minute, "runs in flight", func() bool { return e.phase("inflight-0") == "Running" })
	e.k(t, "apply", "--server-side", "-f", "charts/simple-workflow/crds/")
	e.run(t, e.helm, "upgrade", release, "charts/simple-workflow", "-n", namespace, "--reuse-values",
		"--set", "image.tag="+tag, "--set", "exampleWorker.image.tag="+tag, "--wait", "--timeout", "3m")
	images := e.k(t, "-n", namespace, "get", "deploy", "-o", "jsonpath={.items[*].spec.template.spec.containers[*].image}")
	if strings.Count(images, ":"+tag) != 2 {
		t.Fatalf("after the upgrade the Deployments run %s", images)
	}
	handedBack := 0
	for i := range n {
		name := fmt.Sprintf("inflight-%d", i)
		eventually(t, 3*time.Minute, name+" Succeeded", func() bool { return e.phase(name) == "Succeeded" })
		ev := e.runEvents(t, name)
		if ev["succeeded"] != 1 || ev["failed"] != 0 || ev["started"] != 1+ev["retried"] {
			t.Fatalf("%s: events %v", name, ev)
		}
		if ev["retried"] > 0 {
			handedBack++
			reasons := e.run(t, "psql", e.dbURL, "-Atc", fmt.Sprintf(`select string_agg(e.data->>'reason', ',')
				from workflow.run_event e join workflow.workflow_run r on r.id = e.workflow_id
				where r.source_name = '%s' and e.event_type = 'retried'`, name))
			if strings.Trim(strings.TrimSpace(reasons), "released,") != "" {
				t.Fatalf("%s came back by %q, want only released (a stopping worker's hand-back)", name, reasons)
			}
		}
	}
	if handedBack == 0 {
		t.Fatalf("no run was in flight when its worker was replaced; the case did not happen")
	}
	t.Logf("%d runs in flight across the upgrade; %d handed back by a stopping worker and run again, none lost or doubled",
		n, handedBack)
}

// The console, turned on with the chart's defaults, answers through
// kubectl port-forward of its Service.
func console(t *testing.T, e *env) {
	e.run(t, e.helm, "upgrade", release, "charts/simple-workflow", "-n", namespace, "--reuse-values",
		"--set", "console.enabled=true", "--wait", "--timeout", "3m")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pf := exec.CommandContext(ctx, e.kubectl, "-n", namespace, "port-forward",
		"svc/"+release+"-simple-workflow-console", "18082:8082")
	pf.Env = append(os.Environ(), "KUBECONFIG="+e.kubeconfig)
	if err := pf.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = pf.Wait() }()
	eventually(t, time.Minute, "the console's login page through the port-forward", func() bool {
		out, err := e.try("curl", "-fsS", "http://127.0.0.1:18082/login")
		return err == nil && strings.Contains(strings.ToLower(out), "token")
	})
}

// 10,000 WorkflowRuns applied at once (make bench-operator's load): every
// run succeeds and no manager is killed for memory (its limit is the one the
// install set, 384Mi). They are namespace load's runs of demo.echo.v1, a
// type the release namespace's demo registry shares with load: they run
// among the release's example workers.
func load(t *testing.T, e *env) {
	const total, chunk = 10000, 1000
	e.k(t, "create", "namespace", "load")
	e.k(t, "-n", namespace, "patch", "workflowregistry", release+"-simple-workflow-demo", "--type=json", "-p",
		`[{"op": "add", "path": "/spec/workflows/0/sharedWith", "value": ["load"]}]`)
	eventually(t, time.Minute, "the release shares demo.echo.v1 with namespace load", func() bool {
		out, _ := e.try("psql", e.dbURL, "-Atc", fmt.Sprintf(`select 'load' = any (shared_with) from workflow.workflow_registry
			where namespace = '%s' and workflow_name = 'demo.echo.v1'`, namespace))
		return strings.TrimSpace(out) == "t"
	})
	start := time.Now()
	for c := 0; c < total; c += chunk {
		var manifest strings.Builder
		for i := c; i < c+chunk; i++ {
			fmt.Fprintf(&manifest, "---\napiVersion: workflow.simpleworkflow.dev/v1alpha1\nkind: WorkflowRun\n"+
				"metadata: {name: load-%05d, namespace: load}\nspec: {type: demo.echo.v1, typeNamespace: %s, payload: {n: %d}}\n",
				i, namespace, i)
		}
		path := filepath.Join(t.TempDir(), "load.yaml")
		if err := os.WriteFile(path, []byte(manifest.String()), 0o600); err != nil {
			t.Fatal(err)
		}
		e.k(t, "create", "-f", path) // one POST per object, no client-side apply
	}
	applied := time.Since(start)
	succeeded := func() bool {
		out, _ := e.try("psql", e.dbURL, "-Atc",
			"select count(*) from workflow.workflow_run where source_namespace = 'load' and status = 'succeeded'")
		return strings.TrimSpace(out) == fmt.Sprint(total)
	}
	eventually(t, 10*time.Minute, "every run succeeded in the inbox", succeeded)
	inbox := time.Since(start)
	eventually(t, 10*time.Minute, "every WorkflowRun shows Succeeded", func() bool {
		out, _ := e.try(e.kubectl, "get", "wfr", "-n", "load", "-o", "jsonpath={range .items[*]}{.status.phase}{\"\\n\"}{end}")
		return strings.Count(out, "Succeeded") == total
	})
	statuses := time.Since(start)
	out := e.k(t, "-n", namespace, "get", "pods", "-l", "app.kubernetes.io/component=manager", "-o",
		"jsonpath={range .items[*]}{.metadata.uid} {.status.containerStatuses[0].restartCount} {.status.containerStatuses[0].lastState.terminated.reason}{\"\\n\"}{end}")
	var peaks []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[1] != "0" {
			t.Fatalf("a manager restarted under load: %q", line)
		}
		// The pod's peak memory, from its cgroup (v1), when the path is there.
		for _, qos := range []string{"burstable", "guaranteed", "besteffort"} {
			if b, err := os.ReadFile("/sys/fs/cgroup/memory/kubepods/" + qos + "/pod" + f[0] + "/memory.max_usage_in_bytes"); err == nil {
				var n int64
				fmt.Sscan(strings.TrimSpace(string(b)), &n)
				peaks = append(peaks, fmt.Sprintf("%d MiB", n>>20))
			}
		}
	}
	t.Logf("%d WorkflowRuns applied in %s; all succeeded in the inbox %s after the first apply, all shown Succeeded %s after; "+
		"managers not restarted, peak memory per manager pod %v (limit 384Mi)", total, applied.Round(time.Millisecond),
		inbox.Round(time.Millisecond), statuses.Round(time.Millisecond), peaks)
	e.k(t, "delete", "namespace", "load", "--wait", "--timeout=5m")
}

// Uninstall: the runs and registries go first, while the manager removes
// their finalizers (docs/localnode.md); then nothing of the release is left
// but the CRDs (helm never deletes them) and the database's schema.
func uninstall(t *testing.T, e *env) {
	e.k(t, "delete", "wfr", "-n", namespace, "--all", "--wait", "--timeout=60s")
	e.k(t, "delete", "workflowregistries", "-A", "--all", "--wait", "--timeout=60s")
	e.run(t, e.helm, "uninstall", release, "-n", namespace, "--wait", "--timeout", "2m")
	// helm waits for what it deleted; their pods end after their grace period.
	e.k(t, "-n", namespace, "wait", "--for=delete", "pod", "-l", "app.kubernetes.io/instance="+release, "--timeout=90s")
	if left := strings.TrimSpace(e.k(t, "-n", namespace, "get", "all,leases,roles,rolebindings,serviceaccounts,configmaps",
		"-l", "app.kubernetes.io/instance="+release, "-o", "name")); left != "" {
		t.Fatalf("left after uninstall: %s", left)
	}
	if crds := e.k(t, "get", "crd", "-o", "name"); !strings.Contains(crds, "workflowruns.workflow.simpleworkflow.dev") {
		t.Fatalf("the CRDs are gone: %s", crds)
	}
}
