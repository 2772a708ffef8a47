package controller_test

import (
	"encoding/json"
	"errors"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
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
