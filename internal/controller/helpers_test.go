package controller_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/controller"
	"github.com/simple-workflow/simple-workflow/internal/engine"
)

func randomSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// newNamespace creates a namespace of the spec's own, with the suite's
// worker for the "test." types of that namespace (a worker serves one
// namespace) until the spec ends.
func newNamespace() string {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "t-" + randomSuffix()}}
	Expect(k8sClient.Create(ctx, ns)).To(Succeed())
	w := newSuiteWorker(ns.Name)
	wctx, stop := context.WithCancel(ctx)
	// Stopped, not awaited: a handler still running (test.sleep.v1) may
	// keep it for the shutdown grace period.
	go func() { _ = w.Run(wctx) }()
	DeferCleanup(stop)
	return ns.Name
}

func payload(v any) *apiextensionsv1.JSON {
	raw, err := json.Marshal(v)
	Expect(err).NotTo(HaveOccurred())
	return &apiextensionsv1.JSON{Raw: raw}
}

func newRun(ns, name, typ string, p any) *workflowv1alpha1.WorkflowRun {
	wfr := &workflowv1alpha1.WorkflowRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       workflowv1alpha1.WorkflowRunSpec{Type: typ},
	}
	if p != nil {
		wfr.Spec.Payload = payload(p)
	}
	return wfr
}

func getRun(ns, name string) func() *workflowv1alpha1.WorkflowRun {
	return func() *workflowv1alpha1.WorkflowRun {
		var wfr workflowv1alpha1.WorkflowRun
		if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &wfr); err != nil {
			return nil
		}
		return &wfr
	}
}

func phase(ns, name string) func() workflowv1alpha1.WorkflowRunPhase {
	return func() workflowv1alpha1.WorkflowRunPhase {
		if wfr := getRun(ns, name)(); wfr != nil {
			return wfr.Status.Phase
		}
		return ""
	}
}

func condition(conds []metav1.Condition, t string) *metav1.Condition {
	return meta.FindStatusCondition(conds, t)
}

func int32p(v int32) *int32 { return &v }

func unstructuredFrom(obj map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: obj}
}

func contextWithCancel() (context.Context, context.CancelFunc) {
	return context.WithCancel(ctx)
}

// acceptedCondition reads the Accepted condition of a WorkflowRun; nil
// while the object or the condition does not exist.
func acceptedCondition(ns, name string) func() *metav1.Condition {
	return func() *metav1.Condition {
		if got := getRun(ns, name)(); got != nil {
			return condition(got.Status.Conditions, workflowv1alpha1.ConditionAccepted)
		}
		return nil
	}
}

// runIDOf waits for the object to be mirrored and returns its run's id.
func runIDOf(ns, name string) string {
	var id string
	EventuallyWithOffset(1, func() string {
		if wfr := getRun(ns, name)(); wfr != nil {
			id = wfr.Status.RunID
		}
		return id
	}).ShouldNot(BeEmpty())
	return id
}

func eventNotes(ns, name, reason string) []string {
	var out []string
	for _, e := range eventsFor(ns, name) {
		if e.Reason == reason {
			out = append(out, e.Note)
		}
	}
	return out
}

// kubectl runs the control plane's kubectl.
func kubectl(args ...string) (string, error) {
	//nolint:staticcheck // the control plane's own admin kubeconfig; AddUser would mint a user per call
	stdout, stderr, err := testEnv.ControlPlane.KubeCtl().Run(args...)
	out, _ := io.ReadAll(stdout)
	errOut, _ := io.ReadAll(stderr)
	return string(out) + string(errOut), err
}

// approveCommand is the documented way to send a signal with kubectl.
func approveCommand(ns, name, value string) []string {
	return []string{"patch", "wfr", name, "-n", ns, "--type=json",
		"-p", `[{"op":"add","path":"/spec/signals/-","value":` + value + `}]`}
}

// Some specs play the worker by hand with the engine's functions, on types
// under "manual." that the suite's worker never claims: claim, journal
// steps, park, start children, complete.
const manualWorker = "manual-worker"

// manualType is a workflow type of the spec's own.
func manualType() string { return "manual.t" + randomSuffix() + ".v1" }

// claimManual claims up to n runs of typ as a worker of namespace ns (the
// namespace whose type it is), waiting until at least one is there.
func claimManual(ns, typ string, n int) []engine.ClaimedRun {
	var got []engine.ClaimedRun
	EventuallyWithOffset(1, func() (int, error) {
		var err error
		got, err = eng.ClaimRuns(ctx, engine.ClaimParams{
			WorkerID: manualWorker, TypePrefixes: []string{typ}, Limit: n, LeaseDuration: time.Minute,
			Namespace: ns,
		})
		return len(got), err
	}).Should(BeNumerically(">", 0))
	return got
}

func complete(cs ...engine.ClaimedRun) {
	done := make([]engine.Completion, len(cs))
	for i, c := range cs {
		done[i] = engine.Completion{LeaseRef: c.Ref(), Result: json.RawMessage(`{"done":true}`)}
	}
	ids, err := eng.CompleteRuns(ctx, manualWorker, done)
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	ExpectWithOffset(1, ids).To(HaveLen(len(cs)))
}

// dagRegistry is a registry declaring one workflow with steps.
func dagRegistry(ns, name, workflow string, steps ...workflowv1alpha1.WorkflowStep) *workflowv1alpha1.WorkflowRegistry {
	return &workflowv1alpha1.WorkflowRegistry{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: workflowv1alpha1.WorkflowRegistrySpec{Workflows: []workflowv1alpha1.WorkflowDefinition{
			{Name: workflow, Steps: steps}}},
	}
}

func dagStep(name, typ string, deps ...string) workflowv1alpha1.WorkflowStep {
	return workflowv1alpha1.WorkflowStep{Name: name, Type: typ, DependsOn: deps}
}

// The helpers of the type ownership specs below create, change and read
// WorkflowRegistry objects, their registry entries and their worker pools.

// ownEntryIn reads namespace ns's registry entry for a workflow; nil when
// there is none.
func ownEntryIn(ns, name string) func() *engine.RegistryEntry {
	return func() *engine.RegistryEntry {
		e, err := eng.GetRegistryEntry(ctx, ns, name)
		if errors.Is(err, engine.ErrNotFound) {
			return nil
		}
		Expect(err).NotTo(HaveOccurred())
		return &e
	}
}

// ownGet reads a WorkflowRegistry; nil when it does not exist.
func ownGet(ns, name string) *workflowv1alpha1.WorkflowRegistry {
	var reg workflowv1alpha1.WorkflowRegistry
	if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &reg); err != nil {
		return nil
	}
	return &reg
}

func ownGone(ns, name string) func() bool {
	return func() bool {
		return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &workflowv1alpha1.WorkflowRegistry{}))
	}
}

func ownCreate(ns, name string, spec workflowv1alpha1.WorkflowRegistrySpec) {
	Expect(k8sClient.Create(ctx, &workflowv1alpha1.WorkflowRegistry{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec})).To(Succeed())
}

func ownPatch(ns, name string, change func(*workflowv1alpha1.WorkflowRegistrySpec)) {
	cur := ownGet(ns, name)
	Expect(cur).NotTo(BeNil())
	patch := client.MergeFrom(cur.DeepCopy())
	change(&cur.Spec)
	Expect(k8sClient.Patch(ctx, cur, patch)).To(Succeed())
}

// ownScaler is the autoscaler of one namespace, as a manager scoped to it
// runs it.
func ownScaler(ns string) *controller.Autoscaler {
	return &controller.Autoscaler{Client: k8sClient, Engine: eng, Recorder: discardRecorder{},
		Log: ctrl.Log.WithName("autoscaler"), Namespace: ns}
}

// ownPoolSpec is a registry with one Go worker pool scaling Deployment
// target, 10 runs per replica.
func ownPoolSpec(target string, prefixes ...string) workflowv1alpha1.WorkflowRegistrySpec {
	return workflowv1alpha1.WorkflowRegistrySpec{Workers: []workflowv1alpha1.WorkerPool{{
		ScaleTargetRef: workflowv1alpha1.ScaleTargetRef{APIVersion: "apps/v1", Kind: "Deployment", Name: target},
		Runtime:        workflowv1alpha1.RuntimeGo, TypePrefixes: prefixes,
		MinReplicas: int32p(0), MaxReplicas: 10, RunsPerReplica: int32p(10),
		ScaleDownDelay: &metav1.Duration{Duration: time.Hour},
	}}}
}

func ownPoolOf(ns, name string) workflowv1alpha1.WorkerPoolStatus {
	reg := ownGet(ns, name)
	Expect(reg).NotTo(BeNil())
	Expect(reg.Status.Workers).To(HaveLen(1))
	return reg.Status.Workers[0]
}

// ownBurst records n runs of typ belonging to namespace ns (its own type).
func ownBurst(ns, typ string, n int) {
	for range n {
		_, err := eng.CreateRun(ctx, engine.CreateParams{Type: typ, Namespace: ns})
		Expect(err).NotTo(HaveOccurred())
	}
}
