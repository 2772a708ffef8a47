package controller_test

import (
	"errors"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/engine"
)

var _ = Describe("WorkflowRegistry controller", func() {
	var ns, prefix string
	BeforeEach(func() {
		ns = newNamespace()
		prefix = "reg" + randomSuffix()
	})

	entry := func(name string) func() *engine.RegistryEntry {
		return func() *engine.RegistryEntry {
			e, err := eng.GetRegistryEntry(ctx, ns, name)
			if errors.Is(err, engine.ErrNotFound) {
				return nil
			}
			Expect(err).NotTo(HaveOccurred())
			return &e
		}
	}
	getReg := func(ns, name string) *workflowv1alpha1.WorkflowRegistry {
		var reg workflowv1alpha1.WorkflowRegistry
		if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &reg); err != nil {
			return nil
		}
		return &reg
	}

	It("mirrors workflows, follows updates and removes rows on delete", func() {
		a, b := prefix+".a.v1", prefix+".b.v1"
		reg := &workflowv1alpha1.WorkflowRegistry{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "billing"},
			Spec: workflowv1alpha1.WorkflowRegistrySpec{Workflows: []workflowv1alpha1.WorkflowDefinition{
				{Name: a, Runtime: workflowv1alpha1.RuntimeGo, Description: "first"},
				{Name: b, Runtime: workflowv1alpha1.RuntimePython},
			}},
		}
		Expect(k8sClient.Create(ctx, reg)).To(Succeed())
		Eventually(entry(a)).ShouldNot(BeNil())
		Eventually(entry(b)).ShouldNot(BeNil())
		Expect(*entry(a)()).To(MatchFields(a, "go", true, "first", ns, "billing"))
		Expect(entry(b)().Runtime).To(Equal("python"))
		Eventually(func(g Gomega) {
			got := getReg(ns, "billing")
			g.Expect(got.Status.RegisteredWorkflows).To(BeEquivalentTo(2))
			g.Expect(got.Status.ObservedGeneration).To(Equal(got.Generation))
			c := condition(got.Status.Conditions, workflowv1alpha1.ConditionReady)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
		}).Should(Succeed())

		// Update: move a to python and disable it, drop b.
		cur := getReg(ns, "billing")
		patch := client.MergeFrom(cur.DeepCopy())
		cur.Spec.Workflows = []workflowv1alpha1.WorkflowDefinition{
			{Name: a, Runtime: workflowv1alpha1.RuntimePython, Enabled: new(bool)},
		}
		Expect(k8sClient.Patch(ctx, cur, patch)).To(Succeed())
		Eventually(func() string { return entry(a)().Runtime }).Should(Equal("python"))
		Expect(entry(a)().Enabled).To(BeFalse())
		Eventually(entry(b)).Should(BeNil())

		// Delete: the rows go with the object.
		Expect(k8sClient.Delete(ctx, getReg(ns, "billing"))).To(Succeed())
		Eventually(entry(a)).Should(BeNil())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "billing"}, &workflowv1alpha1.WorkflowRegistry{}))
		}).Should(BeTrue())
	})

	It("reports a name owned by another registry as a conflict; the first owner keeps it", func() {
		name := prefix + ".shared.v1"
		first := &workflowv1alpha1.WorkflowRegistry{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "first"},
			Spec: workflowv1alpha1.WorkflowRegistrySpec{Workflows: []workflowv1alpha1.WorkflowDefinition{
				{Name: name, Runtime: workflowv1alpha1.RuntimeGo}}},
		}
		Expect(k8sClient.Create(ctx, first)).To(Succeed())
		Eventually(entry(name)).ShouldNot(BeNil())
		// Names are owned per namespace: the conflict is between two
		// registries of one namespace (workflowregistry_ownership_test.go
		// has the same name in two namespaces, which is none).
		other := ns
		second := &workflowv1alpha1.WorkflowRegistry{
			ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: "second"},
			Spec: workflowv1alpha1.WorkflowRegistrySpec{Workflows: []workflowv1alpha1.WorkflowDefinition{
				{Name: name, Runtime: workflowv1alpha1.RuntimePython}}},
		}
		Expect(k8sClient.Create(ctx, second)).To(Succeed())
		Eventually(func(g Gomega) {
			got := getReg(other, "second")
			g.Expect(got.Status.ConflictingWorkflows).To(ConsistOf(name))
			c := condition(got.Status.Conditions, workflowv1alpha1.ConditionReady)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(workflowv1alpha1.ReasonConflict))
			g.Expect(c.Message).To(ContainSubstring("already registered by WorkflowRegistry " + ns + "/first"))
		}).Should(Succeed())
		Eventually(func() []string { return eventReasons(other, "second") }).Should(ContainElement(workflowv1alpha1.ReasonConflict))
		Expect(entry(name)().Runtime).To(Equal("go"))
		Expect(entry(name)().OwnerName).To(Equal("first"))

		// Deleting the second leaves the first's row alone.
		Expect(k8sClient.Delete(ctx, getReg(other, "second"))).To(Succeed())
		Eventually(func() *workflowv1alpha1.WorkflowRegistry { return getReg(other, "second") }).Should(BeNil())
		Expect(entry(name)()).NotTo(BeNil())
		Expect(entry(name)().OwnerName).To(Equal("first"))
	})
})

// MatchFields compares the fields of a registry entry that the controller sets.
func MatchFields(name, runtime string, enabled bool, description, ns, owner string) OmegaMatcher {
	return And(
		HaveField("WorkflowName", name), HaveField("Runtime", runtime), HaveField("Enabled", enabled),
		HaveField("Description", description), HaveField("OwnerNamespace", ns), HaveField("OwnerName", owner),
	)
}
