package controller_test

import (
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
)

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
