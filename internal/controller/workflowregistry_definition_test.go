package controller_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/engine"
)

func getRegistry(ns, name string) *workflowv1alpha1.WorkflowRegistry {
	var reg workflowv1alpha1.WorkflowRegistry
	if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &reg); err != nil {
		return nil
	}
	return &reg
}

// registryEntry reads a workflow's registry row; nil when there is none.
func registryEntry(ns, name string) func() *engine.RegistryEntry {
	return func() *engine.RegistryEntry {
		e, err := eng.GetRegistryEntry(ctx, ns, name)
		if errors.Is(err, engine.ErrNotFound) {
			return nil
		}
		Expect(err).NotTo(HaveOccurred())
		return &e
	}
}

var _ = Describe("WorkflowRegistry controller, workflows with steps", func() {
	var ns, prefix string
	BeforeEach(func() {
		ns = newNamespace()
		prefix = "dag" + randomSuffix()
	})

	It("mirrors a workflow's steps as its definition, with no runtime", func() {
		name := prefix + ".diamond.v1"
		b := dagStep("b", "test.echo.v1", "a")
		b.Payload = payload(map[string]any{"greeting": "hi", "n": 1})
		b.MaxAttempts = int32p(7)
		b.RetryPolicy = &workflowv1alpha1.StepRetryPolicy{
			BaseDelay: &metav1.Duration{Duration: 1500 * time.Millisecond}, MaxDelay: &metav1.Duration{Duration: time.Minute}}
		reg := dagRegistry(ns, "dags", name, dagStep("a", "test.echo.v1"), b, dagStep("c", "test.fail.v1", "a"),
			dagStep("d", "test.echo.v1", "b", "c"))
		reg.Spec.Workflows[0].Description = "a diamond"
		reg.Spec.Workflows = append(reg.Spec.Workflows, workflowv1alpha1.WorkflowDefinition{
			Name: prefix + ".plain.v1", Runtime: workflowv1alpha1.RuntimeGo})
		Expect(k8sClient.Create(ctx, reg)).To(Succeed())

		Eventually(registryEntry(ns, name)).ShouldNot(BeNil())
		e := registryEntry(ns, name)()
		Expect(e.Runtime).To(BeEmpty())
		Expect(e.Description).To(Equal("a diamond"))
		Expect(e.OwnerNamespace + "/" + e.OwnerName).To(Equal(ns + "/dags"))
		Expect(e.Definition).NotTo(BeNil())
		Expect(e.Definition.Steps).To(HaveLen(4))
		Expect(e.Definition.Steps[0]).To(Equal(engine.DAGStepDefinition{Name: "a", Type: "test.echo.v1"}))
		got := e.Definition.Steps[1]
		Expect(got.Name).To(Equal("b"))
		Expect(got.DependsOn).To(Equal([]string{"a"}))
		Expect(got.Payload).To(MatchJSON(`{"greeting":"hi","n":1}`))
		Expect(got.MaxAttempts).To(Equal(7))
		Expect(got.RetryBaseDelayMs).To(BeEquivalentTo(1500))
		Expect(got.RetryMaxDelayMs).To(BeEquivalentTo(60000))
		Expect(e.Definition.Steps[3].DependsOn).To(Equal([]string{"b", "c"}))
		// The entries of one registry are written one by one.
		Eventually(registryEntry(ns, prefix+".plain.v1")).Should(HaveField("Runtime", "go"))

		Eventually(func(g Gomega) {
			got := getRegistry(ns, "dags")
			g.Expect(got.Status.RegisteredWorkflows).To(BeEquivalentTo(2))
			g.Expect(got.Status.DefinedWorkflows).To(BeEquivalentTo(1))
			ready := condition(got.Status.Conditions, workflowv1alpha1.ConditionReady)
			g.Expect(ready).NotTo(BeNil())
			g.Expect(ready.Status).To(Equal(metav1.ConditionTrue))
			valid := condition(got.Status.Conditions, workflowv1alpha1.ConditionDefinitionsValid)
			g.Expect(valid).NotTo(BeNil())
			g.Expect(valid.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(valid.Message).To(Equal("the database accepted the steps of 1 workflow(s)"))
		}).Should(Succeed())
		out, err := kubectl("get", "wfreg", "dags", "-n", ns)
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(MatchRegexp(`NAME\s+WORKFLOWS\s+WORKERS\s+READY\s+DAGS\s+AGE`))
		Expect(out).To(MatchRegexp(`dags\s+2\s+True\s+1\s`)) // no workers: the column is empty
	})

	It("reports the workflows whose steps the database refuses, naming the cycle, and registers the others", func() {
		cyclic, unknown, good, plain := prefix+".cyclic.v1", prefix+".unknown.v1", prefix+".good.v1", prefix+".plain.v1"
		reg := dagRegistry(ns, "mixed", cyclic,
			dagStep("start", "test.echo.v1"), dagStep("a", "test.echo.v1", "start", "b"), dagStep("b", "test.echo.v1", "a"))
		reg.Spec.Workflows = append(reg.Spec.Workflows,
			workflowv1alpha1.WorkflowDefinition{Name: unknown, Steps: []workflowv1alpha1.WorkflowStep{
				dagStep("a", "test.echo.v1"), dagStep("b", "test.echo.v1", "a", "x")}},
			workflowv1alpha1.WorkflowDefinition{Name: good, Steps: []workflowv1alpha1.WorkflowStep{dagStep("only", "test.echo.v1")}},
			workflowv1alpha1.WorkflowDefinition{Name: plain, Runtime: workflowv1alpha1.RuntimePython},
		)
		Expect(k8sClient.Create(ctx, reg)).To(Succeed())

		cycleMsg := "invalid definition of " + cyclic + ": cycle: a → b → a (each step depends on the next); " + cyclic + " was not registered"
		unknownMsg := "invalid definition of " + unknown + `: step "b" depends on "x", which is not a step of this workflow; ` + unknown + " was not registered"
		Eventually(func(g Gomega) {
			got := getRegistry(ns, "mixed")
			g.Expect(got.Status.ObservedGeneration).To(Equal(got.Generation))
			g.Expect(got.Status.InvalidWorkflows).To(Equal([]string{cyclic, unknown}))
			g.Expect(got.Status.RegisteredWorkflows).To(BeEquivalentTo(2))
			g.Expect(got.Status.DefinedWorkflows).To(BeEquivalentTo(1))
			valid := condition(got.Status.Conditions, workflowv1alpha1.ConditionDefinitionsValid)
			g.Expect(valid).NotTo(BeNil())
			g.Expect(valid.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(valid.Reason).To(Equal(workflowv1alpha1.ReasonInvalidDefinition))
			g.Expect(valid.Message).To(Equal(cycleMsg + "; " + unknownMsg))
			ready := condition(got.Status.Conditions, workflowv1alpha1.ConditionReady)
			g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(ready.Reason).To(Equal(workflowv1alpha1.ReasonInvalidDefinition))
			g.Expect(ready.Message).To(Equal(valid.Message))
		}).Should(Succeed())
		Expect(registryEntry(ns, cyclic)()).To(BeNil())
		Expect(registryEntry(ns, unknown)()).To(BeNil())
		Expect(registryEntry(ns, good)()).NotTo(BeNil())
		Expect(registryEntry(ns, plain)().Runtime).To(Equal("python"))
		Eventually(func() []string { return eventNotes(ns, "mixed", workflowv1alpha1.ReasonInvalidDefinition) }).Should(Equal([]string{
			"I" + cycleMsg[1:] + "; " + unknownMsg}))

		// A fix registers it; a later break leaves the accepted definition
		// in force and says so.
		cur := getRegistry(ns, "mixed")
		patch := client.MergeFrom(cur.DeepCopy())
		cur.Spec.Workflows[0].Steps[1].DependsOn = []string{"start"}
		cur.Spec.Workflows = cur.Spec.Workflows[:1]
		Expect(k8sClient.Patch(ctx, cur, patch)).To(Succeed())
		Eventually(func(g Gomega) {
			got := getRegistry(ns, "mixed")
			g.Expect(got.Status.ObservedGeneration).To(Equal(got.Generation))
			g.Expect(got.Status.InvalidWorkflows).To(BeEmpty())
			g.Expect(condition(got.Status.Conditions, workflowv1alpha1.ConditionDefinitionsValid).Status).To(Equal(metav1.ConditionTrue))
			g.Expect(condition(got.Status.Conditions, workflowv1alpha1.ConditionReady).Status).To(Equal(metav1.ConditionTrue))
		}).Should(Succeed())
		Expect(registryEntry(ns, cyclic)()).NotTo(BeNil())
		Eventually(registryEntry(ns, good)).Should(BeNil())

		cur = getRegistry(ns, "mixed")
		patch = client.MergeFrom(cur.DeepCopy())
		cur.Spec.Workflows[0].Steps[0].DependsOn = []string{"b"}
		Expect(k8sClient.Patch(ctx, cur, patch)).To(Succeed())
		Eventually(func(g Gomega) {
			got := getRegistry(ns, "mixed")
			g.Expect(got.Status.ObservedGeneration).To(Equal(got.Generation))
			valid := condition(got.Status.Conditions, workflowv1alpha1.ConditionDefinitionsValid)
			g.Expect(valid.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(valid.Message).To(Equal("invalid definition of " + cyclic + ": cycle: start → b → a → start (each step depends on the next); " +
				cyclic + " was not registered (the definition registered before stays in force)"))
		}).Should(Succeed())
		def := registryEntry(ns, cyclic)().Definition
		Expect(def.Steps[0].DependsOn).To(BeEmpty())
		raw, err := json.Marshal(def)
		Expect(err).NotTo(HaveOccurred())
		Expect(string(raw)).NotTo(ContainSubstring(`"dependsOn":["b"]`))
	})

	It("refuses a step whose type has steps of its own", func() {
		inner, outer := prefix+".inner.v1", prefix+".outer.v1"
		reg := dagRegistry(ns, "nested", inner, dagStep("x", "test.echo.v1"))
		reg.Spec.Workflows = append(reg.Spec.Workflows, workflowv1alpha1.WorkflowDefinition{
			Name: outer, Steps: []workflowv1alpha1.WorkflowStep{dagStep("call", inner)}})
		Expect(k8sClient.Create(ctx, reg)).To(Succeed())
		Eventually(func(g Gomega) {
			got := getRegistry(ns, "nested")
			g.Expect(got.Status.InvalidWorkflows).To(Equal([]string{outer}))
			g.Expect(condition(got.Status.Conditions, workflowv1alpha1.ConditionDefinitionsValid).Message).To(Equal(
				"invalid definition of " + outer + `: step "call" runs ` + inner + ", which has steps of its own; a step is a type that workers run; " +
					outer + " was not registered"))
		}).Should(Succeed())
		Expect(registryEntry(ns, inner)()).NotTo(BeNil())
		Expect(registryEntry(ns, outer)()).To(BeNil())
	})
})

// What admission can check of a workflow's steps within the CEL cost budget
// is refused there, with a message naming the field; the graph (unknown
// dependencies, cycles) is the database's to check (see the registry
// controller's specs).
var _ = Describe("Admission validation of workflows with steps", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	DescribeTable("WorkflowRegistry create",
		func(mutate func(*workflowv1alpha1.WorkflowDefinition), message string) {
			reg := dagRegistry(ns, "bad", "dag.bad.v1", dagStep("a", "test.echo.v1"), dagStep("b", "test.echo.v1", "a"))
			mutate(&reg.Spec.Workflows[0])
			err := k8sClient.Create(ctx, reg)
			Expect(err).To(HaveOccurred())
			Expect(err.Error()).To(ContainSubstring(message))
		},
		Entry("both a runtime and steps", func(w *workflowv1alpha1.WorkflowDefinition) { w.Runtime = workflowv1alpha1.RuntimeGo },
			"a workflow has either a runtime (its workers run it) or steps (the database runs them), not both"),
		Entry("neither a runtime nor steps", func(w *workflowv1alpha1.WorkflowDefinition) { w.Steps = nil },
			"a workflow has either a runtime (its workers run it) or steps (the database runs them), not both"),
		Entry("a duplicate step name", func(w *workflowv1alpha1.WorkflowDefinition) {
			w.Steps = append(w.Steps, dagStep("a", "test.fail.v1"))
		}, `spec.workflows[0].steps[2]: Duplicate value: {"name":"a"}`),
		Entry("a step depending on itself", func(w *workflowv1alpha1.WorkflowDefinition) {
			w.Steps[1].DependsOn = []string{"a", "b"}
		}, "spec.workflows[0].steps[1]: Invalid value: a step cannot depend on itself"),
		Entry("a dependency named twice", func(w *workflowv1alpha1.WorkflowDefinition) {
			w.Steps[1].DependsOn = []string{"a", "a"}
		}, "spec.workflows[0].steps[1].dependsOn[1]: Duplicate value"),
		Entry("a step name with a slash", func(w *workflowv1alpha1.WorkflowDefinition) { w.Steps[0].Name = "a/b" },
			"spec.workflows[0].steps[0].name in body should match '^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$'"),
		Entry("a step name too long", func(w *workflowv1alpha1.WorkflowDefinition) { w.Steps[0].Name = strings.Repeat("a", 64) },
			"spec.workflows[0].steps[0].name"),
		Entry("a dependency that is not a step name", func(w *workflowv1alpha1.WorkflowDefinition) {
			w.Steps[1].DependsOn = []string{"-a"}
		}, "spec.workflows[0].steps[1].dependsOn[0] in body should match"),
		Entry("a step type without a version", func(w *workflowv1alpha1.WorkflowDefinition) { w.Steps[0].Type = "test.echo" },
			`spec.workflows[0].steps[0].type in body should match '^[a-z0-9_]+(\.[a-z0-9_]+)*\.v[0-9]+$'`),
		Entry("a step without a type", func(w *workflowv1alpha1.WorkflowDefinition) { w.Steps[0].Type = "" },
			"spec.workflows[0].steps[0].type"),
		Entry("a step payload that is an array", func(w *workflowv1alpha1.WorkflowDefinition) {
			w.Steps[0].Payload = &apiextensionsv1.JSON{Raw: []byte(`[1]`)}
		}, "spec.workflows[0].steps[0].payload in body must be of type object"),
		Entry("a step's maxAttempts of 0", func(w *workflowv1alpha1.WorkflowDefinition) { w.Steps[0].MaxAttempts = int32p(0) },
			"spec.workflows[0].steps[0].maxAttempts"),
		Entry("a step's maxAttempts above 1000", func(w *workflowv1alpha1.WorkflowDefinition) { w.Steps[0].MaxAttempts = int32p(1001) },
			"spec.workflows[0].steps[0].maxAttempts"),
		Entry("a step's retry delay below 1s", func(w *workflowv1alpha1.WorkflowDefinition) {
			w.Steps[0].RetryPolicy = &workflowv1alpha1.StepRetryPolicy{BaseDelay: &metav1.Duration{Duration: 10 * time.Millisecond}}
		}, "retryPolicy.baseDelay must be a duration such as 30s or 5m, between 1s and 24h"),
		Entry("two final steps", func(w *workflowv1alpha1.WorkflowDefinition) {
			w.Steps[1].DependsOn = nil
			w.Steps[0].Final, w.Steps[1].Final = true, true
			w.Steps = append(w.Steps, dagStep("c", "test.echo.v1"))
		}, "a workflow has at most one final step"),
		Entry("only a final step", func(w *workflowv1alpha1.WorkflowDefinition) {
			w.Steps = w.Steps[:1]
			w.Steps[0].Final = true
		}, "a workflow needs a step besides its final step"),
		Entry("a final step with dependencies", func(w *workflowv1alpha1.WorkflowDefinition) { w.Steps[1].Final = true },
			"spec.workflows[0].steps[1]: Invalid value: a final step runs after all the others and depends on none"),
		Entry("a final step with a condition", func(w *workflowv1alpha1.WorkflowDefinition) {
			w.Steps[1].DependsOn = nil
			w.Steps[1].Final, w.Steps[1].When = true, "$.x == 1"
		}, "a final step always runs; it takes no when"),
		Entry("a condition over 1024 characters", func(w *workflowv1alpha1.WorkflowDefinition) {
			w.Steps[0].When = strings.Repeat("x", 1025)
		}, "spec.workflows[0].steps[0].when: Too long"),
		Entry("forEachFailure without forEach", func(w *workflowv1alpha1.WorkflowDefinition) { w.Steps[0].ForEachFailure = "continue" },
			"forEachFailure applies to a step with forEach"),
		Entry("an unknown forEachFailure", func(w *workflowv1alpha1.WorkflowDefinition) {
			w.Steps[0].ForEach, w.Steps[0].ForEachFailure = "$.payload.items", "sometimes"
		}, `spec.workflows[0].steps[0].forEachFailure: Unsupported value: "sometimes"`),
		Entry("a final step with forEach", func(w *workflowv1alpha1.WorkflowDefinition) {
			w.Steps[1].DependsOn = nil
			w.Steps[1].Final, w.Steps[1].ForEach = true, "$.payload.items"
		}, "a final step runs once; it takes no forEach"),
		Entry("a forEach step named too long for its elements", func(w *workflowv1alpha1.WorkflowDefinition) {
			w.Steps[0].Name, w.Steps[0].ForEach = strings.Repeat("a", 58), "$.payload.items"
			w.Steps[1].DependsOn = []string{w.Steps[0].Name}
		}, "a step with forEach has a name of at most 57 characters"),
		Entry("a step's typeNamespace that is not a namespace name", func(w *workflowv1alpha1.WorkflowDefinition) {
			w.Steps[0].TypeNamespace = "Payments"
		}, `spec.workflows[0].steps[0].typeNamespace in body should match`),
		Entry("more than 100 steps", func(w *workflowv1alpha1.WorkflowDefinition) {
			w.Steps = nil
			for i := range 101 {
				w.Steps = append(w.Steps, dagStep(fmt.Sprintf("s%d", i), "test.echo.v1"))
			}
		}, "spec.workflows[0].steps: Too many: 101: must have at most 100 items"),
	)

	It("refuses an empty list of steps", func() {
		u := map[string]any{
			"apiVersion": "workflow.simpleworkflow.dev/v1alpha1", "kind": "WorkflowRegistry",
			"metadata": map[string]any{"name": "empty-steps", "namespace": ns},
			"spec": map[string]any{"workflows": []any{
				map[string]any{"name": "dag.empty.v1", "runtime": "go", "steps": []any{}}}},
		}
		err := k8sClient.Create(ctx, unstructuredFrom(u))
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("spec.workflows[0].steps: Invalid value: 0: spec.workflows[0].steps in body should have at least 1 items"))
	})

	It("admits the largest workflow: 100 steps, each depending on every earlier one, in a registry of many", func() {
		var steps []workflowv1alpha1.WorkflowStep
		for i := range 100 {
			s := dagStep(fmt.Sprintf("step-%02d", i), "test.echo.v1")
			for j := range i {
				s.DependsOn = append(s.DependsOn, fmt.Sprintf("step-%02d", j))
			}
			s.Payload = payload(map[string]any{"i": i})
			s.MaxAttempts = int32p(5)
			s.RetryPolicy = &workflowv1alpha1.StepRetryPolicy{BaseDelay: &metav1.Duration{Duration: time.Second}}
			steps = append(steps, s)
		}
		reg := dagRegistry(ns, "big", "dag.big"+randomSuffix()+".v1", steps...)
		for i := range 20 {
			reg.Spec.Workflows = append(reg.Spec.Workflows, workflowv1alpha1.WorkflowDefinition{
				Name: fmt.Sprintf("dag.big%d%s.v1", i, randomSuffix()), Steps: steps[:10]})
		}
		Expect(k8sClient.Create(ctx, reg)).To(Succeed())
		Eventually(func(g Gomega) {
			got := getRegistry(ns, "big")
			g.Expect(got.Status.ObservedGeneration).To(Equal(got.Generation))
			g.Expect(got.Status.DefinedWorkflows).To(BeEquivalentTo(21))
			g.Expect(got.Status.InvalidWorkflows).To(BeEmpty())
		}).Should(Succeed())
	})
})

// Flow limits declared on a WorkflowRegistry and concurrency keys on
// WorkflowRuns: refused at admission when malformed, mirrored into the
// inbox, and a run held back shown as waiting on its limit.
var _ = Describe("Flow limits from Kubernetes", func() {
	var ns, prefix string
	BeforeEach(func() {
		ns = newNamespace()
		prefix = "flow" + randomSuffix()
	})

	flowRegistry := func(name string, wf workflowv1alpha1.WorkflowDefinition) *workflowv1alpha1.WorkflowRegistry {
		return &workflowv1alpha1.WorkflowRegistry{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec:       workflowv1alpha1.WorkflowRegistrySpec{Workflows: []workflowv1alpha1.WorkflowDefinition{wf}},
		}
	}
	period := func(d time.Duration) metav1.Duration { return metav1.Duration{Duration: d} }

	DescribeTable("admission refuses malformed limits",
		func(wf workflowv1alpha1.WorkflowDefinition, message string) {
			err := k8sClient.Create(ctx, flowRegistry("bad", wf))
			Expect(err).To(HaveOccurred())
			Expect(err.Error()).To(ContainSubstring(message))
		},
		Entry("an empty concurrency", workflowv1alpha1.WorkflowDefinition{
			Name: "flow.bad.v1", Runtime: "go", Concurrency: &workflowv1alpha1.ConcurrencyLimit{},
		}, "concurrency sets maxRuns, maxRunsPerKey or both"),
		Entry("maxRuns 0", workflowv1alpha1.WorkflowDefinition{
			Name: "flow.bad.v1", Runtime: "go", Concurrency: &workflowv1alpha1.ConcurrencyLimit{MaxRuns: int32p(0)},
		}, "spec.workflows[0].concurrency.maxRuns"),
		Entry("maxRunsPerKey above 100000", workflowv1alpha1.WorkflowDefinition{
			Name: "flow.bad.v1", Runtime: "go", Concurrency: &workflowv1alpha1.ConcurrencyLimit{MaxRunsPerKey: int32p(100001)},
		}, "spec.workflows[0].concurrency.maxRunsPerKey"),
		Entry("a period of 25h", workflowv1alpha1.WorkflowDefinition{
			Name: "flow.bad.v1", Runtime: "go", RateLimit: &workflowv1alpha1.RateLimit{Starts: 5, Period: period(25 * time.Hour)},
		}, "rateLimit.period must be between 1ms and 24h"),
		Entry("a period under 1ms", workflowv1alpha1.WorkflowDefinition{
			Name: "flow.bad.v1", Runtime: "go", RateLimit: &workflowv1alpha1.RateLimit{Starts: 5, Period: period(time.Microsecond)},
		}, "rateLimit.period must be between 1ms and 24h"),
		Entry("no starts", workflowv1alpha1.WorkflowDefinition{
			Name: "flow.bad.v1", Runtime: "go", RateLimit: &workflowv1alpha1.RateLimit{Period: period(time.Second)},
		}, "spec.workflows[0].rateLimit.starts"),
		Entry("limits on a workflow with steps", workflowv1alpha1.WorkflowDefinition{
			Name: "flow.bad.v1", Steps: []workflowv1alpha1.WorkflowStep{dagStep("a", "flow.step.v1")},
			Concurrency: &workflowv1alpha1.ConcurrencyLimit{MaxRuns: int32p(1)},
		}, "concurrency and rateLimit apply to types that workers run"),
	)

	DescribeTable("admission refuses malformed concurrency keys",
		func(key, message string) {
			wfr := newRun(ns, "bad-key", "flow.key.v1", nil)
			wfr.Spec.ConcurrencyKey = key
			err := k8sClient.Create(ctx, wfr)
			Expect(err).To(HaveOccurred())
			Expect(err.Error()).To(ContainSubstring(message))
		},
		Entry("256 characters", strings.Repeat("k", 256), "spec.concurrencyKey"),
		Entry("a NUL", "cust\x00omer", "spec.concurrencyKey must not contain the NUL character"),
	)

	It("mirrors the limits, gives runs their key, and shows a run held back as waiting on its limit", func() {
		typ := prefix + ".charge.v1"
		Expect(k8sClient.Create(ctx, flowRegistry("payments", workflowv1alpha1.WorkflowDefinition{
			Name: typ, Runtime: "go",
			Concurrency: &workflowv1alpha1.ConcurrencyLimit{MaxRunsPerKey: int32p(1)},
			RateLimit:   &workflowv1alpha1.RateLimit{Starts: 50, Period: period(time.Second)},
		}))).To(Succeed())
		Eventually(func(g Gomega) {
			e, err := eng.GetRegistryEntry(ctx, ns, typ)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(e.Flow.MaxLeasedPerKey).To(Equal(int32p(1)))
			g.Expect(e.Flow.RateLimit).To(Equal(int32p(50)))
			g.Expect(e.Flow.RatePeriod).To(Equal(time.Second))
			g.Expect(e.Flow.MaxLeased).To(BeNil())
		}).Should(Succeed())

		for _, name := range []string{"first", "second"} {
			wfr := newRun(ns, name, typ, nil)
			wfr.Spec.ConcurrencyKey = "customer-42"
			Expect(k8sClient.Create(ctx, wfr)).To(Succeed())
			Eventually(func() string { return getRun(ns, name)().Status.RunID }).ShouldNot(BeEmpty())
		}
		first, err := eng.GetRun(ctx, getRun(ns, "first")().Status.RunID)
		Expect(err).NotTo(HaveOccurred())
		Expect(first.ConcurrencyKey).To(Equal("customer-42"))

		claimed, err := eng.ClaimRuns(ctx, engine.ClaimParams{
			WorkerID: "flow-spec", TypePrefixes: []string{prefix + "."}, Runtime: "go", Limit: 10,
			LeaseDuration: time.Minute, Namespace: ns,
		})
		Expect(err).NotTo(HaveOccurred())
		Expect(claimed).To(HaveLen(1), "one run of the key at a time")
		held := "second"
		if claimed[0].ID == getRun(ns, "second")().Status.RunID {
			held = "first"
		}
		Eventually(func(g Gomega) {
			wfr := getRun(ns, held)()
			g.Expect(wfr.Status.Phase).To(Equal(workflowv1alpha1.PhaseWaiting))
			g.Expect(wfr.Status.WaitingFor).NotTo(BeNil())
			g.Expect(wfr.Status.WaitingFor.Kind).To(Equal("limit"))
		}).Should(Succeed())

		// The key is immutable.
		wfr := getRun(ns, held)()
		wfr.Spec.ConcurrencyKey = "another"
		Expect(k8sClient.Update(ctx, wfr)).To(MatchError(ContainSubstring("spec.concurrencyKey is immutable")))

		// The held run goes once the first finishes.
		_, err = eng.CompleteRuns(ctx, "flow-spec", []engine.Completion{{LeaseRef: engine.LeaseRef{
			ID: claimed[0].ID, Token: claimed[0].LeaseToken, Attempt: claimed[0].Attempt}}})
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() workflowv1alpha1.WorkflowRunPhase { return getRun(ns, held)().Status.Phase }).
			Should(Equal(workflowv1alpha1.PhasePending))
	})
})
