package controller_test

import (
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
)

// Every class of bad input is refused at admission, with a message a user
// understands, and nothing reaches the inbox.
var _ = Describe("Admission validation", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	dur := func(s string) *metav1.Duration {
		d, err := time.ParseDuration(s)
		Expect(err).NotTo(HaveOccurred())
		return &metav1.Duration{Duration: d}
	}

	DescribeTable("WorkflowRun create",
		func(mutate func(*workflowv1alpha1.WorkflowRun), message string) {
			wfr := newRun(ns, "bad", "test.echo.v1", nil)
			mutate(wfr)
			err := k8sClient.Create(ctx, wfr)
			Expect(err).To(HaveOccurred())
			Expect(err.Error()).To(ContainSubstring(message))
		},
		Entry("type without version", func(w *workflowv1alpha1.WorkflowRun) { w.Spec.Type = "content.thumbnail" },
			"type must be dot-separated lowercase segments"),
		Entry("type with capitals", func(w *workflowv1alpha1.WorkflowRun) { w.Spec.Type = "Content.thumb.v1" },
			"type must be dot-separated lowercase segments"),
		Entry("type too long", func(w *workflowv1alpha1.WorkflowRun) { w.Spec.Type = string(make([]byte, 300)) + ".v1" },
			"spec.type"),
		Entry("payload is an array", func(w *workflowv1alpha1.WorkflowRun) {
			w.Spec.Payload = &apiextensionsv1.JSON{Raw: []byte(`[1,2]`)}
		}, "spec.payload: Invalid value: \"array\": spec.payload in body must be of type object"),
		Entry("payload is a string", func(w *workflowv1alpha1.WorkflowRun) {
			w.Spec.Payload = &apiextensionsv1.JSON{Raw: []byte(`"hello"`)}
		}, "must be of type object"),
		Entry("priority negative", func(w *workflowv1alpha1.WorkflowRun) { w.Spec.Priority = int32p(-1) },
			"spec.priority"),
		Entry("maxAttempts zero", func(w *workflowv1alpha1.WorkflowRun) { w.Spec.MaxAttempts = int32p(0) },
			"spec.maxAttempts"),
		Entry("maxAttempts too large", func(w *workflowv1alpha1.WorkflowRun) { w.Spec.MaxAttempts = int32p(5000) },
			"spec.maxAttempts"),
		Entry("idempotencyKey too long", func(w *workflowv1alpha1.WorkflowRun) {
			w.Spec.IdempotencyKey = string(make([]byte, 300))
		}, "spec.idempotencyKey"),
		Entry("retry base delay too short", func(w *workflowv1alpha1.WorkflowRun) {
			w.Spec.RetryPolicy = &workflowv1alpha1.RetryPolicy{BaseDelay: dur("10ms")}
		}, "retryPolicy.baseDelay must be a duration such as 30s or 5m, between 1s and 24h"),
		Entry("retry max below base", func(w *workflowv1alpha1.WorkflowRun) {
			w.Spec.RetryPolicy = &workflowv1alpha1.RetryPolicy{BaseDelay: dur("1m"), MaxDelay: dur("10s")}
		}, "retryPolicy.maxDelay must be at least retryPolicy.baseDelay"),
		Entry("negative TTL", func(w *workflowv1alpha1.WorkflowRun) { w.Spec.TTLSecondsAfterFinished = int32p(-5) },
			"spec.ttlSecondsAfterFinished"),
		Entry("zero deadline", func(w *workflowv1alpha1.WorkflowRun) { w.Spec.Deadline = dur("0s") },
			"spec.deadline must be a duration such as 30s, 5m or 2h, between 1s and 8760h"),
		Entry("negative deadline", func(w *workflowv1alpha1.WorkflowRun) { w.Spec.Deadline = dur("-5m") },
			"spec.deadline must be a duration such as 30s, 5m or 2h, between 1s and 8760h"),
		Entry("deadline too long", func(w *workflowv1alpha1.WorkflowRun) { w.Spec.Deadline = dur("9000h") },
			"spec.deadline must be a duration such as 30s, 5m or 2h, between 1s and 8760h"),
		Entry("signal name with a space", func(w *workflowv1alpha1.WorkflowRun) {
			w.Spec.Signals = []workflowv1alpha1.WorkflowSignal{{Name: "approve"}, {Name: "not ok"}}
		}, "spec.signals[1].name: Invalid value: \"not ok\": signal name must be 1 to 128 characters of letters, digits and . _ : -"),
		Entry("signal name with a slash", func(w *workflowv1alpha1.WorkflowRun) {
			w.Spec.Signals = []workflowv1alpha1.WorkflowSignal{{Name: "a/b"}}
		}, "signal name must be 1 to 128 characters"),
		Entry("empty signal name", func(w *workflowv1alpha1.WorkflowRun) {
			w.Spec.Signals = []workflowv1alpha1.WorkflowSignal{{Name: ""}}
		}, "spec.signals[0].name"),
		Entry("signal name too long", func(w *workflowv1alpha1.WorkflowRun) {
			w.Spec.Signals = []workflowv1alpha1.WorkflowSignal{{Name: strings.Repeat("a", 129)}}
		}, "spec.signals[0].name"),
		Entry("too many signals", func(w *workflowv1alpha1.WorkflowRun) {
			w.Spec.Signals = make([]workflowv1alpha1.WorkflowSignal, 101)
			for i := range w.Spec.Signals {
				w.Spec.Signals[i].Name = "s"
			}
		}, "spec.signals: Too many: 101: must have at most 100 items"),
	)

	DescribeTable("WorkflowRun deadline that is not a duration",
		func(deadline any) {
			u := map[string]any{
				"apiVersion": "workflow.simpleworkflow.dev/v1alpha1", "kind": "WorkflowRun",
				"metadata": map[string]any{"name": "bad-deadline", "namespace": ns},
				"spec":     map[string]any{"type": "test.echo.v1", "deadline": deadline},
			}
			err := k8sClient.Create(ctx, unstructuredFrom(u))
			Expect(err).To(HaveOccurred())
			Expect(err.Error()).To(ContainSubstring("spec.deadline"))
			if _, ok := deadline.(string); ok {
				// What a duration looks like, not a
				// conversion error.
				Expect(err.Error()).To(ContainSubstring("spec.deadline must be a duration such as 30s, 5m or 2h"))
				Expect(err.Error()).NotTo(ContainSubstring("conversion"))
				Expect(err.Error()).NotTo(ContainSubstring("compilation"))
			}
		},
		Entry("words", "tomorrow"),
		Entry("days are not a unit", "1d"),
		Entry("a unit alone", "h"),
		Entry("a sign", "-5m"),
		Entry("a number", 30),
	)

	DescribeTable("durations that are not durations, elsewhere",
		func(kind string, spec map[string]any, message string) {
			err := k8sClient.Create(ctx, unstructuredFrom(map[string]any{
				"apiVersion": "workflow.simpleworkflow.dev/v1alpha1", "kind": kind,
				"metadata": map[string]any{"name": "bad-duration", "namespace": ns},
				"spec":     spec,
			}))
			Expect(err).To(HaveOccurred())
			Expect(err.Error()).To(ContainSubstring(message))
			Expect(err.Error()).NotTo(ContainSubstring("conversion"))
		},
		Entry("retryPolicy.baseDelay", "WorkflowRun",
			map[string]any{"type": "test.echo.v1", "retryPolicy": map[string]any{"baseDelay": "5 minutes", "maxDelay": "1h"}},
			"retryPolicy.baseDelay must be a duration such as 30s or 5m"),
		Entry("retryPolicy.maxDelay", "WorkflowRun",
			map[string]any{"type": "test.echo.v1", "retryPolicy": map[string]any{"maxDelay": "1w"}},
			"retryPolicy.maxDelay must be a duration such as 30s or 5m"),
		Entry("scaleDownDelay", "WorkflowRegistry",
			map[string]any{"workers": []any{map[string]any{
				"scaleTargetRef": map[string]any{"name": "w"}, "runtime": "go", "typePrefixes": []any{"a."},
				"maxReplicas": 1, "scaleDownDelay": "soon",
			}}},
			"scaleDownDelay must be a duration such as 30s or 5m"),
		Entry("a DAG step's retryPolicy.baseDelay", "WorkflowRegistry",
			map[string]any{"workflows": []any{map[string]any{
				"name": "dag.bad.v1", "steps": []any{map[string]any{
					"name": "a", "type": "test.echo.v1", "retryPolicy": map[string]any{"baseDelay": "2 days"},
				}},
			}}},
			"retryPolicy.baseDelay must be a duration such as 30s or 5m"),
	)

	It("refuses a runAt that is not a timestamp", func() {
		u := map[string]any{
			"apiVersion": "workflow.simpleworkflow.dev/v1alpha1", "kind": "WorkflowRun",
			"metadata": map[string]any{"name": "bad-time", "namespace": ns},
			"spec":     map[string]any{"type": "test.echo.v1", "runAt": "tomorrow at noon"},
		}
		err := k8sClient.Create(ctx, unstructuredFrom(u))
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("spec.runAt"))
	})

	DescribeTable("WorkflowRun update",
		func(mutate func(*workflowv1alpha1.WorkflowRun), message string) {
			wfr := newRun(ns, "imm-"+randomSuffix(), "test.sleep.v1", map[string]any{"a": 1})
			wfr.Spec.Cancel = false
			wfr.Spec.Signals = []workflowv1alpha1.WorkflowSignal{{Name: "approve"}, {Name: "note", Payload: payload(map[string]any{"by": "ann"})}}
			Expect(k8sClient.Create(ctx, wfr)).To(Succeed())
			patch := client.MergeFrom(wfr.DeepCopy())
			mutate(wfr)
			err := k8sClient.Patch(ctx, wfr, patch)
			Expect(err).To(HaveOccurred())
			Expect(err.Error()).To(ContainSubstring(message))
			// Stop the long run.
			var cur workflowv1alpha1.WorkflowRun
			Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(wfr), &cur)).To(Succeed())
			p := client.MergeFrom(cur.DeepCopy())
			cur.Spec.Cancel = true
			Expect(k8sClient.Patch(ctx, &cur, p)).To(Succeed())
		},
		Entry("type changed", func(w *workflowv1alpha1.WorkflowRun) { w.Spec.Type = "test.echo.v1" }, "spec.type is immutable"),
		Entry("payload changed", func(w *workflowv1alpha1.WorkflowRun) { w.Spec.Payload = payload(map[string]any{"a": 2}) },
			"spec.payload is immutable"),
		Entry("payload removed", func(w *workflowv1alpha1.WorkflowRun) { w.Spec.Payload = nil }, "spec.payload is immutable"),
		Entry("priority changed", func(w *workflowv1alpha1.WorkflowRun) { w.Spec.Priority = int32p(1) }, "spec.priority is immutable"),
		Entry("maxAttempts changed", func(w *workflowv1alpha1.WorkflowRun) { w.Spec.MaxAttempts = int32p(9) }, "spec.maxAttempts is immutable"),
		Entry("idempotencyKey added", func(w *workflowv1alpha1.WorkflowRun) { w.Spec.IdempotencyKey = "k" }, "spec.idempotencyKey is immutable"),
		Entry("runAt added", func(w *workflowv1alpha1.WorkflowRun) { w.Spec.RunAt = &metav1.Time{Time: time.Now()} }, "spec.runAt is immutable"),
		Entry("deadline added", func(w *workflowv1alpha1.WorkflowRun) { w.Spec.Deadline = dur("1h") }, "spec.deadline is immutable"),
		Entry("retryPolicy added", func(w *workflowv1alpha1.WorkflowRun) {
			w.Spec.RetryPolicy = &workflowv1alpha1.RetryPolicy{BaseDelay: dur("1m")}
		}, "spec.retryPolicy is immutable"),
		Entry("ttlSecondsAfterFinished added", func(w *workflowv1alpha1.WorkflowRun) { w.Spec.TTLSecondsAfterFinished = int32p(60) },
			"spec.ttlSecondsAfterFinished is immutable"),
		Entry("signal renamed", func(w *workflowv1alpha1.WorkflowRun) { w.Spec.Signals[0].Name = "reject" },
			"spec.signals is append-only: existing entries cannot change or be removed"),
		Entry("signal payload changed", func(w *workflowv1alpha1.WorkflowRun) {
			w.Spec.Signals[1].Payload = payload(map[string]any{"by": "eve"})
		},
			"spec.signals is append-only"),
		Entry("signal payload removed", func(w *workflowv1alpha1.WorkflowRun) { w.Spec.Signals[1].Payload = nil },
			"spec.signals is append-only"),
		Entry("signal removed", func(w *workflowv1alpha1.WorkflowRun) { w.Spec.Signals = w.Spec.Signals[1:] },
			"spec.signals is append-only"),
		Entry("signal inserted before the others", func(w *workflowv1alpha1.WorkflowRun) {
			w.Spec.Signals = append([]workflowv1alpha1.WorkflowSignal{{Name: "first"}}, w.Spec.Signals...)
		}, "spec.signals is append-only"),
		Entry("signals cleared", func(w *workflowv1alpha1.WorkflowRun) { w.Spec.Signals = []workflowv1alpha1.WorkflowSignal{} },
			"spec.signals is append-only"),
	)

	It("keeps a deadline written another way but equal", func() {
		wfr := newRun(ns, "deadline-same", "test.echo.v1", nil)
		wfr.Spec.Deadline = dur("90m")
		Expect(k8sClient.Create(ctx, wfr)).To(Succeed())
		// The Go client writes 1h30m0s back: the same duration.
		patch := []byte(`[{"op":"replace","path":"/spec/deadline","value":"1h30m0s"}]`)
		Expect(k8sClient.Patch(ctx, wfr, client.RawPatch(types.JSONPatchType, patch))).To(Succeed())
		patch = []byte(`[{"op":"replace","path":"/spec/deadline","value":"91m"}]`)
		err := k8sClient.Patch(ctx, wfr, client.RawPatch(types.JSONPatchType, patch))
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("spec.deadline is immutable"))
	})

	It("appends signals with a JSON patch to /spec/signals/-, even when the object was created without any", func() {
		wfr := newRun(ns, "appendable", "test.echo.v1", nil)
		wfr.Spec.Cancel = true
		Expect(k8sClient.Create(ctx, wfr)).To(Succeed())
		// The list defaults to empty, so the JSON patch finds it.
		Expect(getRun(ns, "appendable")().Spec.Signals).To(BeEmpty())
		appendSignal := func(value string) error {
			patch := []byte(`[{"op":"add","path":"/spec/signals/-","value":` + value + `}]`)
			return k8sClient.Patch(ctx, getRun(ns, "appendable")(), client.RawPatch(types.JSONPatchType, patch))
		}
		Expect(appendSignal(`{"name":"approve"}`)).To(Succeed())
		Expect(appendSignal(`{"name":"note","payload":{"by":"ann","n":[1,2]}}`)).To(Succeed())
		Expect(appendSignal(`{"name":"scalar","payload":"just text"}`)).To(Succeed())
		got := getRun(ns, "appendable")().Spec.Signals
		Expect(got).To(HaveLen(3))
		Expect(got[0].Name).To(Equal("approve"))
		Expect(got[0].Payload).To(BeNil())
		Expect(string(got[1].Payload.Raw)).To(MatchJSON(`{"by":"ann","n":[1,2]}`))
		Expect(string(got[2].Payload.Raw)).To(MatchJSON(`"just text"`))
		Expect(appendSignal(`{"name":"bad name"}`)).To(MatchError(ContainSubstring("signal name must be")))

		// Removing the whole list is refused too.
		err := k8sClient.Patch(ctx, getRun(ns, "appendable")(), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"signals":null}}`)))
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("spec.signals is append-only"))
	})

	It("refuses to un-cancel a run", func() {
		wfr := newRun(ns, "uncancel", "test.sleep.v1", nil)
		wfr.Spec.Cancel = true
		Expect(k8sClient.Create(ctx, wfr)).To(Succeed())
		patch := client.MergeFrom(wfr.DeepCopy())
		wfr.Spec.Cancel = false
		err := k8sClient.Patch(ctx, wfr, patch)
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("spec.cancel can only change from false to true"))
	})

	DescribeTable("WorkflowRegistry",
		func(spec workflowv1alpha1.WorkflowRegistrySpec, message string) {
			reg := &workflowv1alpha1.WorkflowRegistry{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bad"}, Spec: spec}
			err := k8sClient.Create(ctx, reg)
			Expect(err).To(HaveOccurred())
			Expect(err.Error()).To(ContainSubstring(message))
		},
		Entry("unknown runtime", workflowv1alpha1.WorkflowRegistrySpec{Workflows: []workflowv1alpha1.WorkflowDefinition{
			{Name: "a.b.v1", Runtime: "ruby"}}}, `supported values: "go", "python"`),
		Entry("bad workflow name", workflowv1alpha1.WorkflowRegistrySpec{Workflows: []workflowv1alpha1.WorkflowDefinition{
			{Name: "a.b", Runtime: "go"}}}, "workflow name must be dot-separated lowercase segments"),
		Entry("duplicate workflow names", workflowv1alpha1.WorkflowRegistrySpec{Workflows: []workflowv1alpha1.WorkflowDefinition{
			{Name: "a.b.v1", Runtime: "go"}, {Name: "a.b.v1", Runtime: "python"}}}, "Duplicate value"),
		Entry("minReplicas above maxReplicas", workflowv1alpha1.WorkflowRegistrySpec{Workers: []workflowv1alpha1.WorkerPool{{
			ScaleTargetRef: workflowv1alpha1.ScaleTargetRef{Name: "w"}, Runtime: "go", TypePrefixes: []string{"a."},
			MinReplicas: int32p(5), MaxReplicas: 2}}}, "minReplicas must not exceed maxReplicas"),
		Entry("runsPerReplica zero", workflowv1alpha1.WorkflowRegistrySpec{Workers: []workflowv1alpha1.WorkerPool{{
			ScaleTargetRef: workflowv1alpha1.ScaleTargetRef{Name: "w"}, Runtime: "go", TypePrefixes: []string{"a."},
			MaxReplicas: 2, RunsPerReplica: int32p(0)}}}, "runsPerReplica"),
		Entry("no prefixes", workflowv1alpha1.WorkflowRegistrySpec{Workers: []workflowv1alpha1.WorkerPool{{
			ScaleTargetRef: workflowv1alpha1.ScaleTargetRef{Name: "w"}, Runtime: "go", TypePrefixes: []string{},
			MaxReplicas: 2}}}, "typePrefixes"),
		Entry("empty prefix", workflowv1alpha1.WorkflowRegistrySpec{Workers: []workflowv1alpha1.WorkerPool{{
			ScaleTargetRef: workflowv1alpha1.ScaleTargetRef{Name: "w"}, Runtime: "go", TypePrefixes: []string{""},
			MaxReplicas: 2}}}, "typePrefixes[0]"),
		Entry("two pools on one target", workflowv1alpha1.WorkflowRegistrySpec{Workers: []workflowv1alpha1.WorkerPool{
			{ScaleTargetRef: workflowv1alpha1.ScaleTargetRef{Name: "w"}, Runtime: "go", TypePrefixes: []string{"a."}, MaxReplicas: 2},
			{ScaleTargetRef: workflowv1alpha1.ScaleTargetRef{Name: "w"}, Runtime: "go", TypePrefixes: []string{"b."}, MaxReplicas: 2},
		}}, "each worker pool must scale a different target"),
	)
})
