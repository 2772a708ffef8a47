package controller_test

import (
	"errors"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/controller"
	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// Ownership is cluster-wide: these specs put the registries of two teams in
// two namespaces, both named "team", so only the namespace tells them apart.
var _ = Describe("Type ownership across namespaces", func() {
	var nsA, nsB, sfx string
	BeforeEach(func() {
		sfx = randomSuffix()
		// nsA sorts before nsB, so registries created in the same second are
		// ordered A first.
		nsA, nsB = ownNamespace("t-"+sfx+"-a"), ownNamespace("t-"+sfx+"-b")
	})

	ownEntry := func(name string) func() *engine.RegistryEntry {
		return func() *engine.RegistryEntry {
			e, err := eng.GetRegistryEntry(ctx, name)
			if errors.Is(err, engine.ErrNotFound) {
				return nil
			}
			Expect(err).NotTo(HaveOccurred())
			return &e
		}
	}
	ownGet := func(ns string) *workflowv1alpha1.WorkflowRegistry {
		var reg workflowv1alpha1.WorkflowRegistry
		if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "team"}, &reg); err != nil {
			return nil
		}
		return &reg
	}
	ownGone := func(ns string) func() bool {
		return func() bool {
			return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "team"}, &workflowv1alpha1.WorkflowRegistry{}))
		}
	}
	ownCreate := func(ns string, spec workflowv1alpha1.WorkflowRegistrySpec) {
		Expect(k8sClient.Create(ctx, &workflowv1alpha1.WorkflowRegistry{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "team"}, Spec: spec})).To(Succeed())
	}
	ownPatch := func(ns string, change func(*workflowv1alpha1.WorkflowRegistrySpec)) {
		cur := ownGet(ns)
		patch := client.MergeFrom(cur.DeepCopy())
		change(&cur.Spec)
		Expect(k8sClient.Patch(ctx, cur, patch)).To(Succeed())
	}
	readyOf := func(ns string) func() *metav1.Condition {
		return func() *metav1.Condition {
			if reg := ownGet(ns); reg != nil {
				return condition(reg.Status.Conditions, controller.ConditionReady)
			}
			return nil
		}
	}

	Context("workflow names", func() {
		var name string
		BeforeEach(func() {
			name = "own" + sfx + ".pay.v1"
			ownCreate(nsA, workflowv1alpha1.WorkflowRegistrySpec{Workflows: []workflowv1alpha1.WorkflowDefinition{
				{Name: name, Runtime: workflowv1alpha1.RuntimeGo, Description: "team A's"},
			}})
			Eventually(ownEntry(name)).ShouldNot(BeNil())
			// Team B declares the same name, for another runtime and disabled.
			ownCreate(nsB, workflowv1alpha1.WorkflowRegistrySpec{Workflows: []workflowv1alpha1.WorkflowDefinition{
				{Name: name, Runtime: workflowv1alpha1.RuntimePython, Enabled: new(bool), Description: "team B's"},
			}})
			Eventually(readyOf(nsB)).Should(And(Not(BeNil()), HaveField("Reason", controller.ReasonConflict)))
		})

		It("keeps the first registry's runtime and enabled flag and names only the owner", func() {
			b := ownGet(nsB)
			Expect(b.Status.ConflictingWorkflows).To(Equal([]string{name}))
			Expect(b.Status.RegisteredWorkflows).To(BeEquivalentTo(0))
			c := condition(b.Status.Conditions, controller.ConditionReady)
			Expect(c.Status).To(Equal(metav1.ConditionFalse))
			Expect(c.Message).To(Equal(fmt.Sprintf(
				"workflow %s is already registered by WorkflowRegistry %s/team; that registration stays in force", name, nsA)))
			Consistently(func() engine.RegistryEntry { return *ownEntry(name)() }, time.Second).Should(And(
				HaveField("Runtime", "go"), HaveField("Enabled", true), HaveField("Description", "team A's"),
				HaveField("OwnerNamespace", nsA), HaveField("OwnerName", "team")))
			Expect(readyOf(nsA)()).To(HaveField("Status", metav1.ConditionTrue))

			// An owner with the same name in another namespace is another owner.
			deleted, err := eng.DeleteRegistryEntry(ctx, name, nsB, "team")
			Expect(err).NotTo(HaveOccurred())
			Expect(deleted).To(BeFalse())
			Expect(eng.UpsertRegistryEntry(ctx, engine.RegistryEntry{WorkflowName: name, Runtime: "python",
				OwnerNamespace: nsB, OwnerName: "team"})).To(MatchError(engine.ErrOwnedElsewhere))
			Expect(*ownEntry(name)()).To(And(HaveField("Runtime", "go"), HaveField("Enabled", true)))
		})

		It("leaves the owner's entry in place when the later registry drops the name or is deleted", func() {
			other := "own" + sfx + ".other.v1"
			ownPatch(nsB, func(s *workflowv1alpha1.WorkflowRegistrySpec) {
				s.Workflows = []workflowv1alpha1.WorkflowDefinition{{Name: other, Runtime: workflowv1alpha1.RuntimePython}}
			})
			Eventually(readyOf(nsB)).Should(HaveField("Status", metav1.ConditionTrue))
			Expect(ownGet(nsB).Status.ConflictingWorkflows).To(BeEmpty())
			Expect(*ownEntry(other)()).To(HaveField("OwnerNamespace", nsB))
			Expect(*ownEntry(name)()).To(And(HaveField("OwnerNamespace", nsA), HaveField("Runtime", "go")))

			// Declare it again, then delete the registry.
			ownPatch(nsB, func(s *workflowv1alpha1.WorkflowRegistrySpec) {
				s.Workflows = append(s.Workflows, workflowv1alpha1.WorkflowDefinition{Name: name, Runtime: workflowv1alpha1.RuntimePython})
			})
			Eventually(func() []string { return ownGet(nsB).Status.ConflictingWorkflows }).Should(Equal([]string{name}))
			Expect(k8sClient.Delete(ctx, ownGet(nsB))).To(Succeed())
			Eventually(ownGone(nsB)).Should(BeTrue())
			Eventually(ownEntry(other)).Should(BeNil())
			Expect(*ownEntry(name)()).To(And(HaveField("OwnerNamespace", nsA), HaveField("OwnerName", "team"),
				HaveField("Runtime", "go"), HaveField("Enabled", true)))
		})

		It("hands the name to the waiting registry soon after the owner is deleted", func() {
			Expect(k8sClient.Delete(ctx, ownGet(nsA))).To(Succeed())
			// Well before the conflict retry period: the deletion wakes it.
			Eventually(func() *engine.RegistryEntry { return ownEntry(name)() }, 10*time.Second).Should(And(
				Not(BeNil()), HaveField("OwnerNamespace", nsB), HaveField("Runtime", "python"), HaveField("Enabled", false)))
			Eventually(readyOf(nsB), 10*time.Second).Should(HaveField("Status", metav1.ConditionTrue))
			Expect(ownGet(nsB).Status.ConflictingWorkflows).To(BeEmpty())
		})
	})

	It("writes the status of a registry with hundreds of conflicting names, the message bounded", func() {
		var defs []workflowv1alpha1.WorkflowDefinition
		for i := range 300 {
			defs = append(defs, workflowv1alpha1.WorkflowDefinition{
				Name: fmt.Sprintf("own%s.many_%03d.v1", sfx, i), Runtime: workflowv1alpha1.RuntimeGo})
		}
		ownCreate(nsA, workflowv1alpha1.WorkflowRegistrySpec{Workflows: defs})
		Eventually(func() int32 { return ownGet(nsA).Status.RegisteredWorkflows }).Should(BeEquivalentTo(300))
		ownCreate(nsB, workflowv1alpha1.WorkflowRegistrySpec{Workflows: defs})
		Eventually(func() []string { return ownGet(nsB).Status.ConflictingWorkflows }).Should(HaveLen(300))
		c := readyOf(nsB)()
		Expect(c.Reason).To(Equal(controller.ReasonConflict))
		Expect(len(c.Message)).To(BeNumerically("<=", 2048))
		Expect(c.Message).To(HavePrefix(fmt.Sprintf("workflow own%s.many_000.v1 is already registered by WorkflowRegistry %s/team", sfx, nsA)))
		Expect(c.Message).To(MatchRegexp(`… and \d+ more$`))
	})

	Context("worker pool type prefixes", func() {
		var prefix string
		BeforeEach(func() { prefix = "own" + sfx + "." })

		scalerFor := func(ns string) *controller.Autoscaler {
			return &controller.Autoscaler{Client: k8sClient, Engine: eng, Recorder: discardRecorder{},
				Log: ctrl.Log.WithName("autoscaler"), Namespace: ns}
		}
		// evaluate runs the autoscaler of each namespace, as two managers
		// scoped to one namespace each would.
		evaluate := func() {
			Expect(scalerFor(nsA).Evaluate(ctx)).To(Succeed())
			Expect(scalerFor(nsB).Evaluate(ctx)).To(Succeed())
		}
		poolSpec := func(prefixes ...string) workflowv1alpha1.WorkflowRegistrySpec {
			return workflowv1alpha1.WorkflowRegistrySpec{Workers: []workflowv1alpha1.WorkerPool{{
				ScaleTargetRef: workflowv1alpha1.ScaleTargetRef{APIVersion: "apps/v1", Kind: "Deployment", Name: "worker"},
				Runtime:        workflowv1alpha1.RuntimeGo, TypePrefixes: prefixes,
				MinReplicas: int32p(0), MaxReplicas: 10, RunsPerReplica: int32p(10),
				ScaleDownDelay: &metav1.Duration{Duration: time.Hour},
			}}}
		}
		poolOf := func(ns string) workflowv1alpha1.WorkerPoolStatus {
			reg := ownGet(ns)
			Expect(reg.Status.Workers).To(HaveLen(1))
			return reg.Status.Workers[0]
		}
		burst := func(n int) {
			for range n {
				_, err := eng.CreateRun(ctx, engine.CreateParams{Type: prefix + "invoice.send.v1"})
				Expect(err).NotTo(HaveOccurred())
			}
		}
		expectBlocked := func(ns, owner, ownPrefix string) {
			st := poolOf(ns)
			Expect(st.DesiredReplicas).To(BeEquivalentTo(0))
			c := condition(st.Conditions, controller.ConditionReady)
			Expect(c).NotTo(BeNil())
			Expect(c.Status).To(Equal(metav1.ConditionFalse))
			Expect(c.Reason).To(Equal(controller.ReasonPrefixConflict))
			Expect(c.Message).To(Equal(fmt.Sprintf(
				"type prefix %q overlaps a prefix owned by WorkflowRegistry %s/team; the pool is not scaled while the owner keeps it",
				ownPrefix, owner)))
		}

		// Team A's pool serves "ownX.", team B's "ownX.invoice.": every run
		// of B's prefix is also A's.
		setUp := func() {
			newDeployment(nsA, "worker", 0)
			newDeployment(nsB, "worker", 1)
			ownCreate(nsA, poolSpec(prefix))
			ownCreate(nsB, poolSpec(prefix+"invoice."))
			burst(25)
			evaluate()
		}

		It("scales only the owner's Deployment for a burst of runs and tells the later registry who owns the prefix", func() {
			setUp()
			Expect(replicasOf(nsA, "worker")()).To(BeEquivalentTo(3))
			Expect(poolOf(nsA).Runnable).To(BeEquivalentTo(25))
			Expect(replicasOf(nsB, "worker")()).To(BeEquivalentTo(1), "left alone, not set to the computed count")
			expectBlocked(nsB, nsA, prefix+"invoice.")

			// Another evaluation, as after a manager restart, decides the same.
			burst(10)
			evaluate()
			Expect(replicasOf(nsA, "worker")()).To(BeEquivalentTo(4))
			Expect(replicasOf(nsB, "worker")()).To(BeEquivalentTo(1))
			expectBlocked(nsB, nsA, prefix+"invoice.")
		})

		It("frees the prefix when the owner drops it", func() {
			setUp()
			ownPatch(nsA, func(s *workflowv1alpha1.WorkflowRegistrySpec) {
				s.Workers[0].TypePrefixes = []string{"other" + sfx + "."}
			})
			evaluate()
			Expect(replicasOf(nsB, "worker")()).To(BeEquivalentTo(3))
			Expect(condition(poolOf(nsB).Conditions, controller.ConditionReady).Reason).To(Equal(controller.ReasonScaling))
		})

		It("frees the prefix when the owner is deleted", func() {
			setUp()
			Expect(k8sClient.Delete(ctx, ownGet(nsA))).To(Succeed())
			evaluate()
			Expect(replicasOf(nsB, "worker")()).To(BeEquivalentTo(3))
			Eventually(ownGone(nsA)).Should(BeTrue())
			evaluate()
			Expect(condition(poolOf(nsB).Conditions, controller.ConditionReady).Reason).To(Equal(controller.ReasonScaling))
		})

		It("gives the prefix to the older registry even when its namespace sorts later", func() {
			newDeployment(nsA, "worker", 0)
			newDeployment(nsB, "worker", 0)
			ownCreate(nsB, poolSpec(prefix+"invoice."))
			// Creation timestamps have a resolution of one second.
			time.Sleep(1100 * time.Millisecond)
			ownCreate(nsA, poolSpec(prefix))
			burst(25)
			evaluate()
			Expect(replicasOf(nsB, "worker")()).To(BeEquivalentTo(3))
			Expect(replicasOf(nsA, "worker")()).To(BeEquivalentTo(0))
			expectBlocked(nsA, nsB, prefix)
		})
	})
})

// ownNamespace creates a namespace with the given name.
func ownNamespace(name string) string {
	Expect(k8sClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})).To(Succeed())
	return name
}
