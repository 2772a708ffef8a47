package controller_test

import (
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
)

// Namespaces are tenants: a workflow name and a worker pool type prefix are
// owned per namespace. Two WorkflowRegistry objects of one namespace compete
// for them (the older keeps them); the same name or prefix in two
// namespaces is two independent things.
var _ = Describe("Worker pool type prefix ownership within a namespace", func() {
	// Two registries of one namespace, "team-1" created before "team-2".
	const first, second = "team-1", "team-2"
	var ns, sfx string
	BeforeEach(func() {
		sfx = randomSuffix()
		ns = newNamespace()
	})
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
