package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/simple-workflow/simple-workflow/internal/pgtest"
)

// containerEngine runs the images; CONTAINER_ENGINE overrides it, as for
// make image.
func containerEngine() string {
	if e := os.Getenv("CONTAINER_ENGINE"); e != "" {
		return e
	}
	return "podman"
}

// cannotRun reports whether a `podman run` (or docker run) failed because
// the engine cannot start containers on this machine, rather than because of
// the image: the exit status is the engine's own (125: the container could
// not be created; 126 and 127: the runtime refused or is missing, e.g.
// "error setting rlimit type 7: operation not permitted: OCI permission
// denied") and the error does not name the image's entry point.
func cannotRun(err error, out, entrypoint string) bool {
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		return false
	}
	switch exit.ExitCode() {
	case 125, 126, 127:
		return !strings.Contains(out, entrypoint)
	}
	return false
}

// podman runs the container engine and returns its combined output.
func podman(args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, containerEngine(), args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// podSpecArgs translates a Deployment's pod into container engine flags the
// way the kubelet would run it: the pod's and container's security context
// (user, group, read-only root filesystem, dropped capabilities, no privilege
// escalation; RuntimeDefault seccomp is the engine's default), the host
// network (the control plane and Postgres listen on loopback), each volume
// mount from mounts (volume name to host directory), and env with
// fieldRef values taken from fields.
func podSpecArgs(pod corev1.PodSpec, c corev1.Container, mounts map[string]string, fields map[string]string) []string {
	args := []string{"--network=host", "--pull=never"}
	user, group := int64(-1), int64(-1)
	if sc := pod.SecurityContext; sc != nil {
		if sc.RunAsUser != nil {
			user = *sc.RunAsUser
		}
		if sc.RunAsGroup != nil {
			group = *sc.RunAsGroup
		}
	}
	sc := c.SecurityContext
	Expect(sc).NotTo(BeNil(), "the chart sets a container securityContext")
	if sc.RunAsUser != nil {
		user = *sc.RunAsUser
	}
	if sc.RunAsGroup != nil {
		group = *sc.RunAsGroup
	}
	Expect(user).To(BeNumerically(">", 0), "the chart runs as a numeric non-root user")
	args = append(args, fmt.Sprintf("--user=%d:%d", user, max(group, user)))
	if sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem {
		args = append(args, "--read-only")
	}
	if sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
		args = append(args, "--security-opt=no-new-privileges")
	}
	if sc.Capabilities != nil {
		for _, cp := range sc.Capabilities.Drop {
			args = append(args, "--cap-drop="+string(cp))
		}
		for _, cp := range sc.Capabilities.Add {
			args = append(args, "--cap-add="+string(cp))
		}
	}
	for _, m := range c.VolumeMounts {
		dir, ok := mounts[m.Name]
		Expect(ok).To(BeTrue(), "no host directory for the volume %q", m.Name)
		opt := "rw"
		if m.ReadOnly {
			opt = "ro"
		}
		args = append(args, fmt.Sprintf("--volume=%s:%s:%s", dir, m.MountPath, opt))
	}
	for _, e := range c.Env {
		v := e.Value
		if e.ValueFrom != nil {
			Expect(e.ValueFrom.FieldRef).NotTo(BeNil(), "env %s: only fieldRef values are supported", e.Name)
			f, ok := fields[e.ValueFrom.FieldRef.FieldPath]
			Expect(ok).To(BeTrue(), "env %s: no value for %s", e.Name, e.ValueFrom.FieldRef.FieldPath)
			v = f
		}
		args = append(args, "--env="+e.Name+"="+v)
	}
	return args
}

// secretDir writes files into a new directory as a Secret volume would hold
// them: readable by the pod's user only, the directory itself traversable.
func secretDir(name string, uid int, files map[string]string) string {
	dir := filepath.Join(workDir, name)
	Expect(os.MkdirAll(dir, 0o755)).To(Succeed())
	Expect(os.Chmod(dir, 0o755)).To(Succeed())
	for f, body := range files {
		path := filepath.Join(dir, f)
		Expect(os.WriteFile(path, []byte(body), 0o400)).To(Succeed())
		// As root, hand the file to the container's user; otherwise (rootless
		// engines map users anyway) let everyone read it.
		if err := os.Chown(path, uid, uid); err != nil {
			Expect(os.Chmod(path, 0o444)).To(Succeed())
		}
	}
	return dir
}

// withFlag replaces the value of --name=... in args (or appends it).
func withFlag(args []string, name, value string) []string {
	out := make([]string, 0, len(args)+1)
	for _, a := range args {
		if !strings.HasPrefix(a, "--"+name+"=") {
			out = append(out, a)
		}
	}
	return append(out, "--"+name+"="+value)
}

// rbacDenials returns the "forbidden" lines of a manager's log, except those
// written while a restarted API server was loading its RBAC roles.
func rbacDenials(log string) []string {
	var denials []string
	for line := range strings.Lines(log) {
		if strings.Contains(line, "forbidden") && !whileAPIServerStarting(line) {
			denials = append(denials, line)
		}
	}
	return denials
}

// The images make image builds run the manager and the
// example worker as the chart runs them, against the suite's control plane
// and Postgres. The image's manager takes over from the suite's manager
// process the way a rolling update does (it waits as standby for the same
// leader election Lease, the process steps down on SIGTERM), so the two never
// reconcile at once; at the end a new manager process takes the Lease back.
var _ = Describe("the manager and example worker images", Ordered, func() {
	const ns = "e2e-image"
	var managerImage, workerImage string

	BeforeAll(func() {
		engine := containerEngine()
		if _, err := exec.LookPath(engine); err != nil {
			Skip(fmt.Sprintf("no container engine: %s is not on PATH (make test installs podman with hack/podman.sh on Debian as root)", engine))
		}
		if out, err := podman("info"); err != nil {
			Skip(fmt.Sprintf("no container engine: `%s info` failed (see docs/images.md for the settings that work): %v\n%s", engine, err, tail(out, 2000)))
		}
		root, err := pgtest.RepoFile(".")
		Expect(err).NotTo(HaveOccurred())
		By("building the images with hack/image.sh, as make image does")
		build := exec.CommandContext(ctx, filepath.Join(root, "hack", "image.sh"))
		build.Dir = root
		build.Env = append(os.Environ(), "CONTAINER_ENGINE="+engine)
		start := time.Now()
		out, err := build.CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), "hack/image.sh:\n%s", tail(string(out), 4000))
		AddReportEntry("images built in", time.Since(start).String())
		// hack/image.sh ends with one line per image: reference, id, size.
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		AddReportEntry("images", strings.Join(lines[max(0, len(lines)-2):], "; "))

		chart, err := os.ReadFile(filepath.Join(root, "charts", "simple-workflow", "Chart.yaml"))
		Expect(err).NotTo(HaveOccurred())
		var meta struct {
			AppVersion string `json:"appVersion"`
		}
		Expect(yaml.Unmarshal(chart, &meta)).To(Succeed())
		managerImage = "ghcr.io/simple-workflow/manager:" + meta.AppVersion
		workerImage = "ghcr.io/simple-workflow/example-worker:" + meta.AppVersion
		Expect(string(out)).To(And(ContainSubstring(managerImage), ContainSubstring(workerImage)))

		// A container engine that cannot start containers here (cgroups,
		// rlimits, runtime) fails before the image's binary runs.
		out2, err := podman("run", "--rm", "--network=host", "--pull=never", workerImage, "-version")
		if cannotRun(err, out2, "/example-worker") {
			Skip(fmt.Sprintf("no container engine can run here: %s cannot start a container (hack/podman.sh writes the settings that work, docs/images.md): %v: %s",
				engine, err, strings.TrimSpace(tail(out2, 2000))))
		}
		Expect(err).NotTo(HaveOccurred(), out2)
		Expect(out2).To(HavePrefix("example-worker " + meta.AppVersion + " (revision "))
	})

	It("labels the images and runs them as user 65532 with nothing but the binary, CA certificates and /etc/passwd", func() {
		for _, img := range []string{managerImage, workerImage} {
			out, err := podman("image", "inspect", "--format",
				`{{.Config.User}}|{{index .Config.Labels "org.opencontainers.image.version"}}|{{index .Config.Labels "org.opencontainers.image.revision"}}|{{index .Config.Labels "org.opencontainers.image.source"}}|{{index .Config.Labels "org.opencontainers.image.licenses"}}|{{len .RootFS.Layers}}`, img)
			Expect(err).NotTo(HaveOccurred(), out)
			f := strings.Split(strings.TrimSpace(out), "|")
			Expect(f).To(HaveLen(6), out)
			Expect(f[0]).To(Equal("65532:65532"), img)
			Expect(img).To(HaveSuffix(":" + f[1]))
			Expect(f[2]).To(MatchRegexp(`^[0-9a-f]{40}$`), img)
			Expect(f[3]).To(Equal("https://github.com/simple-workflow/simple-workflow"))
			Expect(f[4]).To(Equal("Apache-2.0"))
			// FROM scratch: passwd+group, certificates, the binary.
			Expect(f[5]).To(Equal("3"), img)
		}
	})

	It("runs the chart's manager and example worker from the images; runs reach Succeeded", func() {
		createNamespace(ns)
		var dep appsv1.Deployment
		Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: chartNamespace, Name: releaseName + "-simple-workflow"}, &dep)).To(Succeed())
		pod := dep.Spec.Template.Spec
		Expect(pod.Containers).To(HaveLen(1))
		mc := pod.Containers[0]
		Expect(mc.Image).To(Equal(managerImage), "the chart's default image is the one make image builds")
		uid := int(*pod.SecurityContext.RunAsUser)

		By("rendering the chart's example worker")
		root, err := pgtest.RepoFile(".")
		Expect(err).NotTo(HaveOccurred())
		rendered, err := exec.CommandContext(ctx, helmBin, "template", releaseName, filepath.Join(root, "charts", "simple-workflow"),
			"--namespace", chartNamespace, "--set", "database.existingSecret=db", "--set", "exampleWorker.enabled=true",
			"--show-only", "templates/example-worker.yaml").Output()
		Expect(err).NotTo(HaveOccurred())
		var wdep appsv1.Deployment
		Expect(yaml.UnmarshalStrict([]byte(strings.Split(string(rendered), "\n---")[0]), &wdep)).To(Succeed())
		Expect(wdep.Kind).To(Equal("Deployment"))
		wc := wdep.Spec.Template.Spec.Containers[0]
		Expect(wc.Image).To(Equal(workerImage), "the chart's default example-worker image is the one make image builds")

		// The Secret volume the chart mounts, and (no in-cluster config
		// without a kubelet) the chart ServiceAccount's kubeconfig.
		kc, err := os.ReadFile(managerKC)
		Expect(err).NotTo(HaveOccurred())
		mounts := map[string]string{
			"database": secretDir("image-database", uid, map[string]string{"url": dbURL}),
		}
		kcDir := secretDir("image-kubeconfig", uid, map[string]string{"config": string(kc)})

		By("starting the manager image as a standby of the suite's manager")
		imgMetrics, imgHealth := freePort(), freePort()
		margs := withFlag(withFlag(mc.Args, "metrics-bind-address", imgMetrics), "health-probe-bind-address", imgHealth)
		margs = withFlag(margs, "kubeconfig", "/etc/simple-workflow/kubeconfig/config")
		Expect(margs).To(ContainElements("--leader-elect", "--leader-election-namespace="+chartNamespace))
		run := append([]string{"run", "--rm", "--name=e2e-image-manager", "--stop-timeout=15",
			"--volume=" + kcDir + ":/etc/simple-workflow/kubeconfig:ro"}, podSpecArgs(pod, mc, mounts, nil)...)
		_, _ = podman("rm", "--force", "--ignore", "e2e-image-manager")
		imgManager := start("image-manager", nil, containerEngine(), append(append(run, mc.Image), margs...)...)
		DeferCleanup(func() { _, _ = podman("rm", "--force", "--ignore", "--time=0", "e2e-image-manager") })
		Eventually(imgManager.output, 60*time.Second).Should(MatchRegexp(`(?i)attempting to acquire leader lease`))

		By("stepping the suite's manager down: the image's manager leads")
		old := manager
		old.stop(syscall.SIGTERM)
		handover := time.Now()
		// Whatever happens below, a manager process leads again afterwards,
		// for the suite's later specs and its clean-up.
		DeferCleanup(func() {
			By("handing leadership back to a manager process; the image's manager exits 0 on SIGTERM")
			metricsAddr, healthAddr = freePort(), freePort()
			manager = startManager()
			Eventually(manager.output, 30*time.Second).Should(MatchRegexp(`(?i)attempting to acquire leader lease`))
			// podman run passes SIGTERM on to the container's process.
			Expect(imgManager.cmd.Process.Signal(syscall.SIGTERM)).To(Succeed())
			state, err := imgManager.cmd.Process.Wait()
			Expect(err).NotTo(HaveOccurred())
			Expect(state.ExitCode()).To(Equal(0), "the image's manager exits 0 on SIGTERM:\n%s", tail(imgManager.output(), 4000))
			Eventually(manager.output, 30*time.Second).Should(MatchRegexp(`(?i)successfully acquired lease`))
			Expect(rbacDenials(imgManager.output())).To(BeEmpty(), "the image's manager hit an RBAC denial")
		})
		Eventually(imgManager.output, 30*time.Second).Should(MatchRegexp(`(?i)successfully acquired lease`))
		AddReportEntry("image manager leading after", time.Since(handover).String())
		// The suite's AfterSuite only sees the manager process that leads at
		// the end: the one stopped here is checked now.
		Expect(rbacDenials(old.output())).To(BeEmpty(), "the suite's manager hit an RBAC denial")

		By("the container's process is user 65532 without capabilities, on a read-only root")
		out, err := podman("inspect", "--format", "{{.State.Pid}}", "e2e-image-manager")
		Expect(err).NotTo(HaveOccurred(), out)
		pid, err := strconv.Atoi(strings.TrimSpace(out))
		Expect(err).NotTo(HaveOccurred(), out)
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		Expect(err).NotTo(HaveOccurred())
		Expect(string(status)).To(And(
			MatchRegexp(`(?m)^Uid:\s+65532\s+65532\s+65532\s+65532$`),
			MatchRegexp(`(?m)^Gid:\s+65532\s+65532\s+65532\s+65532$`),
			MatchRegexp(`(?m)^CapEff:\s+0+$`), MatchRegexp(`(?m)^CapPrm:\s+0+$`), MatchRegexp(`(?m)^CapBnd:\s+0+$`),
			MatchRegexp(`(?m)^NoNewPrivs:\s+1$`),
		))
		mountinfo, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
		Expect(err).NotTo(HaveOccurred())
		Expect(string(mountinfo)).To(MatchRegexp(`(?m)^\S+ \S+ \S+ \S+ / ro[, ]`), "the root filesystem is mounted read-only")

		Eventually(func() int { code, _ := httpGet("http://" + imgHealth + "/readyz"); return code }).Should(Equal(http.StatusOK))
		version := strings.TrimPrefix(managerImage, "ghcr.io/simple-workflow/manager:")
		Eventually(func() string { _, body := httpGet("http://" + imgMetrics + "/metrics"); return body }).Should(
			MatchRegexp(`simpleworkflow_build_info\{goversion="go[^"]+",revision="[0-9a-f]{40}",version="` + version + `"\} 1`))

		By("starting the chart's example worker from its image")
		// The pod's namespace is the one its runs are recorded in: the
		// worker serves it (the chart sets NAMESPACE from it).
		wargs := podSpecArgs(wdep.Spec.Template.Spec, wc, mounts,
			map[string]string{"metadata.name": "image-worker-0", "metadata.namespace": ns})
		_, _ = podman("rm", "--force", "--ignore", "e2e-image-worker")
		worker := start("image-worker", nil, containerEngine(),
			append(append(append([]string{"run", "--rm", "--name=e2e-image-worker", "--stop-timeout=30"}, wargs...), wc.Image), wc.Args...)...)
		DeferCleanup(func() {
			worker.stop(syscall.SIGTERM)
			_, _ = podman("rm", "--force", "--ignore", "--time=0", "e2e-image-worker")
		})
		Eventually(worker.output, 60*time.Second).Should(ContainSubstring(`"msg":"Starting example-worker","version":"` + version + `"`))

		var manifest strings.Builder
		for i := range 3 {
			fmt.Fprintf(&manifest, "---\napiVersion: workflow.simpleworkflow.dev/v1alpha1\nkind: WorkflowRun\n"+
				"metadata: {name: image-echo-%d}\nspec: {type: demo.echo.v1, payload: {i: %d}}\n", i, i)
		}
		manifest.WriteString("---\napiVersion: workflow.simpleworkflow.dev/v1alpha1\nkind: WorkflowRun\n" +
			"metadata: {name: image-fail-once}\nspec: {type: demo.fail.v1, payload: {failTimes: 1}, maxAttempts: 2, retryPolicy: {baseDelay: 1s}}\n")
		By("creating WorkflowRuns: they reach Succeeded through the image's manager and worker")
		mustKubectl("apply", "-n", ns, "-f", writeManifest("image-runs.yaml", manifest.String()))
		Eventually(phases(ns)).Should(Equal("image-echo-0=Succeeded image-echo-1=Succeeded image-echo-2=Succeeded image-fail-once=Succeeded"))
		Expect(mustKubectl("get", "workflowrun", "image-echo-1", "-n", ns, "-o", "jsonpath={.status.result}")).To(MatchJSON(`{"i":1}`))
		Expect(mustKubectl("describe", "workflowrun", "image-fail-once", "-n", ns)).To(And(
			ContainSubstring("Attempt 1 failed: planned failure"), ContainSubstring("Succeeded on attempt 2 (worker image-worker-0)")))
		Expect(imgManager.alive()).To(BeTrue(), tail(imgManager.output(), 4000))
		Expect(worker.alive()).To(BeTrue(), tail(worker.output(), 4000))
	})
})
