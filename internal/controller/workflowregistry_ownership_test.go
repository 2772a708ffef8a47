package controller_test

import (
	"errors"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/controller"
	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// Namespaces are tenants: a workflow name and a worker pool type prefix are
// owned per namespace. Two WorkflowRegistry objects of one namespace compete
// for them (the older keeps them); the same name or prefix in two
// namespaces is two independent things.

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

func ownReady(ns, name string) func() *metav1.Condition {
	return func() *metav1.Condition {
		if reg := ownGet(ns, name); reg != nil {
			return condition(reg.Status.Conditions, workflowv1alpha1.ConditionReady)
		}
		return nil
	}
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

var _ = Describe("Type ownership within a namespace", func() {
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

	Context("worker pool type prefixes", func() {
		var prefix string
		BeforeEach(func() { prefix = "own" + sfx + "." })

		// Each registry scales a Deployment of its own: "worker-1", "worker-2".
		target := map[string]string{first: "worker-1", second: "worker-2"}
		evaluate := func() { Expect(ownScaler(ns).Evaluate(ctx)).To(Succeed()) }
		burst := func(n int) { ownBurst(ns, prefix+"invoice.send.v1", n) }
		expectBlocked := func(reg, owner, ownPrefix string) {
			st := ownPoolOf(ns, reg)
			Expect(st.DesiredReplicas).To(BeEquivalentTo(0))
			c := condition(st.Conditions, workflowv1alpha1.ConditionReady)
			Expect(c).NotTo(BeNil())
			Expect(c.Status).To(Equal(metav1.ConditionFalse))
			Expect(c.Reason).To(Equal(workflowv1alpha1.ReasonPrefixConflict))
			Expect(c.Message).To(Equal(fmt.Sprintf(
				"type prefix %q overlaps a prefix owned by WorkflowRegistry %s/%s; the pool is not scaled while the owner keeps it",
				ownPrefix, ns, owner)))
		}

		// The first registry's pool serves "ownX.", the second's
		// "ownX.invoice.": every run of the second's prefix is also the
		// first's. Created in the same second, "team-1" sorts first.
		setUp := func() {
			newDeployment(ns, target[first], 0)
			newDeployment(ns, target[second], 1)
			ownCreate(ns, first, ownPoolSpec(target[first], prefix))
			ownCreate(ns, second, ownPoolSpec(target[second], prefix+"invoice."))
			burst(25)
			evaluate()
		}

		It("scales only the owner's Deployment for a burst of runs and tells the later registry who owns the prefix", func() {
			setUp()
			Expect(replicasOf(ns, target[first])()).To(BeEquivalentTo(3))
			Expect(ownPoolOf(ns, first).Runnable).To(BeEquivalentTo(25))
			Expect(replicasOf(ns, target[second])()).To(BeEquivalentTo(1), "left alone, not set to the computed count")
			expectBlocked(second, first, prefix+"invoice.")

			// Another evaluation, as after a manager restart, decides the same.
			burst(10)
			evaluate()
			Expect(replicasOf(ns, target[first])()).To(BeEquivalentTo(4))
			Expect(replicasOf(ns, target[second])()).To(BeEquivalentTo(1))
			expectBlocked(second, first, prefix+"invoice.")
		})

		It("frees the prefix when the owner drops it", func() {
			setUp()
			ownPatch(ns, first, func(s *workflowv1alpha1.WorkflowRegistrySpec) {
				s.Workers[0].TypePrefixes = []string{"other" + sfx + "."}
			})
			evaluate()
			Expect(replicasOf(ns, target[second])()).To(BeEquivalentTo(3))
			Expect(condition(ownPoolOf(ns, second).Conditions, workflowv1alpha1.ConditionReady).Reason).To(Equal(workflowv1alpha1.ReasonScaling))
		})

		It("frees the prefix when the owner is deleted", func() {
			setUp()
			Expect(k8sClient.Delete(ctx, ownGet(ns, first))).To(Succeed())
			evaluate()
			Expect(replicasOf(ns, target[second])()).To(BeEquivalentTo(3))
			Eventually(ownGone(ns, first)).Should(BeTrue())
			evaluate()
			Expect(condition(ownPoolOf(ns, second).Conditions, workflowv1alpha1.ConditionReady).Reason).To(Equal(workflowv1alpha1.ReasonScaling))
		})

		It("gives the prefix to the older registry even when its name sorts later", func() {
			newDeployment(ns, target[first], 0)
			newDeployment(ns, target[second], 0)
			ownCreate(ns, second, ownPoolSpec(target[second], prefix+"invoice."))
			// Creation timestamps have a resolution of one second.
			time.Sleep(1100 * time.Millisecond)
			ownCreate(ns, first, ownPoolSpec(target[first], prefix))
			burst(25)
			evaluate()
			Expect(replicasOf(ns, target[second])()).To(BeEquivalentTo(3))
			Expect(replicasOf(ns, target[first])()).To(BeEquivalentTo(0))
			expectBlocked(first, second, prefix)
		})
	})
})

// Two teams, each in its own namespace, each with a registry named "team":
// only the namespace tells them apart, and nothing of one binds the other.
var _ = Describe("Type ownership across namespaces", func() {
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

	It("scales each namespace's pool of the same prefix on that namespace's runs only", func() {
		prefix := "own" + sfx + "."
		typ := prefix + "invoice.send.v1"
		evaluate := func() {
			Expect(ownScaler(nsA).Evaluate(ctx)).To(Succeed())
			Expect(ownScaler(nsB).Evaluate(ctx)).To(Succeed())
		}
		newDeployment(nsA, "worker", 0)
		newDeployment(nsB, "worker", 0)
		ownCreate(nsA, "team", ownPoolSpec("worker", prefix))
		ownCreate(nsB, "team", ownPoolSpec("worker", prefix))

		// Team A's burst, team B's trickle, of the same type name.
		ownBurst(nsA, typ, 25)
		ownBurst(nsB, typ, 5)
		evaluate()
		Expect(replicasOf(nsA, "worker")()).To(BeEquivalentTo(3))
		Expect(replicasOf(nsB, "worker")()).To(BeEquivalentTo(1), "B's 5 runs, not A's 25 too")
		for ns, runnable := range map[string]int{nsA: 25, nsB: 5} {
			st := ownPoolOf(ns, "team")
			Expect(st.Runnable).To(BeEquivalentTo(runnable), ns)
			c := condition(st.Conditions, workflowv1alpha1.ConditionReady)
			Expect(c).NotTo(BeNil())
			Expect(c.Reason).To(Equal(workflowv1alpha1.ReasonScaling), "the same prefix in another namespace is no conflict")
		}

		// Another burst of A's leaves B's workers where they are.
		ownBurst(nsA, typ, 40)
		evaluate()
		Expect(replicasOf(nsA, "worker")()).To(BeEquivalentTo(7))
		Expect(replicasOf(nsB, "worker")()).To(BeEquivalentTo(1))
		Expect(ownPoolOf(nsB, "team").Runnable).To(BeEquivalentTo(5))
	})
})
