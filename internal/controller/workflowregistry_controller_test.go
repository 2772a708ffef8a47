package controller_test

import (
	"errors"
	"fmt"
	"time"

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
		// registries of one namespace (the ownership specs below
		// have the same name in two namespaces, which is none).
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

// ownReady reads the Ready condition of a WorkflowRegistry; nil when it
// does not exist.
func ownReady(ns, name string) func() *metav1.Condition {
	return func() *metav1.Condition {
		if reg := ownGet(ns, name); reg != nil {
			return condition(reg.Status.Conditions, workflowv1alpha1.ConditionReady)
		}
		return nil
	}
}

// Namespaces are tenants: a workflow name and a worker pool type prefix are
// owned per namespace. Two WorkflowRegistry objects of one namespace compete
// for them (the older keeps them); the same name or prefix in two
// namespaces is two independent things.
var _ = Describe("WorkflowRegistry controller, ownership of workflow names within a namespace", func() {
	// Two registries of one namespace, "team-1" created before "team-2".
	const first, second = "team-1", "team-2"
	var ns, sfx string
	BeforeEach(func() {
		sfx = randomSuffix()
		ns = newNamespace()
	})
	entry := func(name string) func() *engine.RegistryEntry { return ownEntryIn(ns, name) }

	Context("workflow names", func() {
		var name string
		BeforeEach(func() {
			name = "own" + sfx + ".pay.v1"
			ownCreate(ns, first, workflowv1alpha1.WorkflowRegistrySpec{Workflows: []workflowv1alpha1.WorkflowDefinition{
				{Name: name, Runtime: workflowv1alpha1.RuntimeGo, Description: "the first's"},
			}})
			Eventually(entry(name)).ShouldNot(BeNil())
			// The second declares the same name, for another runtime and disabled.
			ownCreate(ns, second, workflowv1alpha1.WorkflowRegistrySpec{Workflows: []workflowv1alpha1.WorkflowDefinition{
				{Name: name, Runtime: workflowv1alpha1.RuntimePython, Enabled: new(bool), Description: "the second's"},
			}})
			Eventually(ownReady(ns, second)).Should(And(Not(BeNil()), HaveField("Reason", workflowv1alpha1.ReasonConflict)))
		})

		It("keeps the first registry's runtime and enabled flag and names only the owner", func() {
			b := ownGet(ns, second)
			Expect(b.Status.ConflictingWorkflows).To(Equal([]string{name}))
			Expect(b.Status.RegisteredWorkflows).To(BeEquivalentTo(0))
			c := condition(b.Status.Conditions, workflowv1alpha1.ConditionReady)
			Expect(c.Status).To(Equal(metav1.ConditionFalse))
			Expect(c.Message).To(Equal(fmt.Sprintf(
				"workflow %s is already registered by WorkflowRegistry %s/%s; that registration stays in force", name, ns, first)))
			Consistently(func() engine.RegistryEntry { return *entry(name)() }, time.Second).Should(And(
				HaveField("Runtime", "go"), HaveField("Enabled", true), HaveField("Description", "the first's"),
				HaveField("OwnerNamespace", ns), HaveField("OwnerName", first)))
			Expect(ownReady(ns, first)()).To(HaveField("Status", metav1.ConditionTrue))

			// Another registry of the namespace is another owner: it can
			// neither delete nor overwrite the entry.
			deleted, err := eng.DeleteRegistryEntry(ctx, name, ns, second)
			Expect(err).NotTo(HaveOccurred())
			Expect(deleted).To(BeFalse())
			Expect(eng.UpsertRegistryEntry(ctx, engine.RegistryEntry{WorkflowName: name, Runtime: "python",
				OwnerNamespace: ns, OwnerName: second})).To(MatchError(engine.ErrOwnedElsewhere))
			Expect(*entry(name)()).To(And(HaveField("Runtime", "go"), HaveField("Enabled", true),
				HaveField("OwnerName", first)))
		})

		It("leaves the owner's entry in place when the later registry drops the name or is deleted", func() {
			other := "own" + sfx + ".other.v1"
			ownPatch(ns, second, func(s *workflowv1alpha1.WorkflowRegistrySpec) {
				s.Workflows = []workflowv1alpha1.WorkflowDefinition{{Name: other, Runtime: workflowv1alpha1.RuntimePython}}
			})
			Eventually(ownReady(ns, second)).Should(HaveField("Status", metav1.ConditionTrue))
			Expect(ownGet(ns, second).Status.ConflictingWorkflows).To(BeEmpty())
			Expect(*entry(other)()).To(And(HaveField("OwnerNamespace", ns), HaveField("OwnerName", second)))
			Expect(*entry(name)()).To(And(HaveField("OwnerName", first), HaveField("Runtime", "go")))

			// Declare it again, then delete the registry.
			ownPatch(ns, second, func(s *workflowv1alpha1.WorkflowRegistrySpec) {
				s.Workflows = append(s.Workflows, workflowv1alpha1.WorkflowDefinition{Name: name, Runtime: workflowv1alpha1.RuntimePython})
			})
			Eventually(func() []string { return ownGet(ns, second).Status.ConflictingWorkflows }).Should(Equal([]string{name}))
			Expect(k8sClient.Delete(ctx, ownGet(ns, second))).To(Succeed())
			Eventually(ownGone(ns, second)).Should(BeTrue())
			Eventually(entry(other)).Should(BeNil())
			Expect(*entry(name)()).To(And(HaveField("OwnerNamespace", ns), HaveField("OwnerName", first),
				HaveField("Runtime", "go"), HaveField("Enabled", true)))
		})

		It("hands the name to the waiting registry soon after the owner is deleted", func() {
			Expect(k8sClient.Delete(ctx, ownGet(ns, first))).To(Succeed())
			// Well before the conflict retry period: the deletion wakes it.
			Eventually(entry(name), 10*time.Second).Should(And(
				Not(BeNil()), HaveField("OwnerNamespace", ns), HaveField("OwnerName", second),
				HaveField("Runtime", "python"), HaveField("Enabled", false)))
			Eventually(ownReady(ns, second), 10*time.Second).Should(HaveField("Status", metav1.ConditionTrue))
			Expect(ownGet(ns, second).Status.ConflictingWorkflows).To(BeEmpty())
		})
	})

	It("writes the status of a registry with hundreds of conflicting names, the message bounded", func() {
		var defs []workflowv1alpha1.WorkflowDefinition
		for i := range 300 {
			defs = append(defs, workflowv1alpha1.WorkflowDefinition{
				Name: fmt.Sprintf("own%s.many_%03d.v1", sfx, i), Runtime: workflowv1alpha1.RuntimeGo})
		}
		ownCreate(ns, first, workflowv1alpha1.WorkflowRegistrySpec{Workflows: defs})
		Eventually(func() int32 { return ownGet(ns, first).Status.RegisteredWorkflows }).Should(BeEquivalentTo(300))
		ownCreate(ns, second, workflowv1alpha1.WorkflowRegistrySpec{Workflows: defs})
		Eventually(func() []string { return ownGet(ns, second).Status.ConflictingWorkflows }).Should(HaveLen(300))
		c := ownReady(ns, second)()
		Expect(c.Reason).To(Equal(workflowv1alpha1.ReasonConflict))
		Expect(len(c.Message)).To(BeNumerically("<=", 2048))
		Expect(c.Message).To(HavePrefix(fmt.Sprintf(
			"workflow own%s.many_000.v1 is already registered by WorkflowRegistry %s/%s", sfx, ns, first)))
		Expect(c.Message).To(MatchRegexp(`… and \d+ more$`))
	})
})

// Two teams, each in its own namespace, each with a registry named "team":
// only the namespace tells them apart, and nothing of one binds the other.
var _ = Describe("WorkflowRegistry controller, ownership of workflow names across namespaces", func() {
	var nsA, nsB, sfx string
	BeforeEach(func() {
		sfx = randomSuffix()
		nsA, nsB = newNamespace(), newNamespace()
	})

	It("gives each namespace its own entry for the same workflow name, without a conflict", func() {
		name := "own" + sfx + ".pay.v1"
		ownCreate(nsA, "team", workflowv1alpha1.WorkflowRegistrySpec{Workflows: []workflowv1alpha1.WorkflowDefinition{
			{Name: name, Runtime: workflowv1alpha1.RuntimeGo, Description: "team A's"},
		}})
		Eventually(ownEntryIn(nsA, name)).ShouldNot(BeNil())
		// Team B declares the same name later, for another runtime and disabled.
		ownCreate(nsB, "team", workflowv1alpha1.WorkflowRegistrySpec{Workflows: []workflowv1alpha1.WorkflowDefinition{
			{Name: name, Runtime: workflowv1alpha1.RuntimePython, Enabled: new(bool), Description: "team B's"},
		}})
		Eventually(ownEntryIn(nsB, name)).ShouldNot(BeNil())

		for _, ns := range []string{nsA, nsB} {
			Eventually(ownReady(ns, "team")).Should(And(Not(BeNil()),
				HaveField("Status", metav1.ConditionTrue), Not(HaveField("Reason", workflowv1alpha1.ReasonConflict))))
			reg := ownGet(ns, "team")
			Expect(reg.Status.ConflictingWorkflows).To(BeEmpty())
			Expect(reg.Status.RegisteredWorkflows).To(BeEquivalentTo(1))
		}
		Consistently(func() engine.RegistryEntry { return *ownEntryIn(nsA, name)() }, time.Second).Should(And(
			HaveField("Runtime", "go"), HaveField("Enabled", true), HaveField("Description", "team A's"),
			HaveField("OwnerNamespace", nsA), HaveField("OwnerName", "team")))
		Expect(*ownEntryIn(nsB, name)()).To(And(
			HaveField("Runtime", "python"), HaveField("Enabled", false), HaveField("Description", "team B's"),
			HaveField("OwnerNamespace", nsB), HaveField("OwnerName", "team")))
		// A namespace that declares nothing has no entry of that name.
		Expect(ownEntryIn(newNamespace(), name)()).To(BeNil())

		// They are two rows: removing B's entry (as its owner) leaves A's.
		deleted, err := eng.DeleteRegistryEntry(ctx, name, nsB, "team")
		Expect(err).NotTo(HaveOccurred())
		Expect(deleted).To(BeTrue(), "B's own entry")
		Expect(ownEntryIn(nsB, name)()).To(BeNil())
		Expect(*ownEntryIn(nsA, name)()).To(And(HaveField("OwnerNamespace", nsA), HaveField("Runtime", "go")))
		// The controller puts B's entry back (a new generation reconciles it).
		ownPatch(nsB, "team", func(s *workflowv1alpha1.WorkflowRegistrySpec) { s.Workflows[0].Description = "team B's, again" })
		Eventually(ownEntryIn(nsB, name)).Should(And(Not(BeNil()), HaveField("Description", "team B's, again")))

		// Deleting team A's registry removes A's entry and leaves B's.
		Expect(k8sClient.Delete(ctx, ownGet(nsA, "team"))).To(Succeed())
		Eventually(ownGone(nsA, "team")).Should(BeTrue())
		Eventually(ownEntryIn(nsA, name)).Should(BeNil())
		Consistently(ownEntryIn(nsB, name), time.Second).Should(And(Not(BeNil()),
			HaveField("Runtime", "python"), HaveField("Enabled", false), HaveField("OwnerNamespace", nsB)))
		Expect(ownReady(nsB, "team")()).To(HaveField("Status", metav1.ConditionTrue))
	})
})
