package controller_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/controller"
)

// A run nothing declared serves says so.
var _ = Describe("WorkflowRun Unserved condition", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("says when nothing declared serves a run's type, and what does once something is", func() {
		Expect(k8sClient.Create(ctx, newRun(ns, "lonely", "nobody.lonely.v1", nil))).To(Succeed())
		Eventually(func(g Gomega) {
			got := getRun(ns, "lonely")()
			g.Expect(got).NotTo(BeNil())
			c := condition(got.Status.Conditions, workflowv1alpha1.ConditionUnserved)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(c.Reason).To(Equal(workflowv1alpha1.ReasonNoWorker))
			g.Expect(c.Message).To(HavePrefix("no WorkflowRegistry declares workflow type nobody.lonely.v1"))
		}).Should(Succeed())

		// Declared, without a worker pool: not unserved, and said how.
		reg := &workflowv1alpha1.WorkflowRegistry{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lonely-reg"},
			Spec: workflowv1alpha1.WorkflowRegistrySpec{Workflows: []workflowv1alpha1.WorkflowDefinition{
				{Name: "nobody.lonely.v1", Runtime: workflowv1alpha1.RuntimePython},
			}},
		}
		Expect(k8sClient.Create(ctx, reg)).To(Succeed())
		Eventually(func(g Gomega) {
			c := condition(getRun(ns, "lonely")().Status.Conditions, workflowv1alpha1.ConditionUnserved)
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(workflowv1alpha1.ReasonRegistered))
			g.Expect(c.Message).To(ContainSubstring("registered (runtime python) by WorkflowRegistry " + ns + "/lonely-reg"))
		}).Should(Succeed())

		// A pool of another runtime does not serve it; one of its runtime
		// does.
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(reg), reg)).To(Succeed())
		reg.Spec.Workers = []workflowv1alpha1.WorkerPool{
			// Prefixes are owned cluster-wide: each spec uses its own.
			{ScaleTargetRef: workflowv1alpha1.ScaleTargetRef{Name: "go-workers"}, Runtime: workflowv1alpha1.RuntimeGo,
				TypePrefixes: []string{"nobody.lonely."}, MaxReplicas: 1},
			{ScaleTargetRef: workflowv1alpha1.ScaleTargetRef{Name: "py-workers"}, Runtime: workflowv1alpha1.RuntimePython,
				TypePrefixes: []string{"nobody.lonely.v"}, MaxReplicas: 1},
		}
		Expect(k8sClient.Update(ctx, reg)).To(Succeed())
		Eventually(func(g Gomega) {
			c := condition(getRun(ns, "lonely")().Status.Conditions, workflowv1alpha1.ConditionUnserved)
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(workflowv1alpha1.ReasonWorkerPool))
			g.Expect(c.Message).To(Equal("worker pool py-workers (WorkflowRegistry " + ns + "/lonely-reg) serves workflow type nobody.lonely.v1"))
		}).Should(Succeed())

		// Once the run no longer waits for a worker, the question is moot.
		_, err := pool.Exec(ctx, "update workflow.workflow_run set status = 'cancelled' where type = 'nobody.lonely.v1'")
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() *metav1.Condition {
			return condition(getRun(ns, "lonely")().Status.Conditions, workflowv1alpha1.ConditionUnserved)
		}).Should(BeNil())
	})

	// strandedPool declares, in namespace regNS, one worker pool for
	// prefix whose target does not exist, and has the autoscaler report it.
	strandedPool := func(regNS, regName, target, prefix string) {
		reg := &workflowv1alpha1.WorkflowRegistry{
			ObjectMeta: metav1.ObjectMeta{Namespace: regNS, Name: regName},
			Spec: workflowv1alpha1.WorkflowRegistrySpec{Workers: []workflowv1alpha1.WorkerPool{
				{ScaleTargetRef: workflowv1alpha1.ScaleTargetRef{Name: target}, Runtime: workflowv1alpha1.RuntimeGo,
					TypePrefixes: []string{prefix}, MaxReplicas: 3},
			}},
		}
		Expect(k8sClient.Create(ctx, reg)).To(Succeed())
		scaler := &controller.Autoscaler{Client: k8sClient, Engine: eng, Recorder: discardRecorder{},
			Log: ctrl.Log.WithName("autoscaler"), Namespace: regNS}
		Eventually(func(g Gomega) {
			g.Expect(scaler.Evaluate(ctx)).To(Succeed())
			var got workflowv1alpha1.WorkflowRegistry
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(reg), &got)).To(Succeed())
			g.Expect(got.Status.Workers).NotTo(BeEmpty())
		}).Should(Succeed())
	}
	unserved := func(name string) func() *metav1.Condition {
		return func() *metav1.Condition {
			return condition(getRun(ns, name)().Status.Conditions, workflowv1alpha1.ConditionUnserved)
		}
	}

	It("says when the only worker pool covering a run's type cannot be scaled", func() {
		Expect(k8sClient.Create(ctx, newRun(ns, "stranded", "nobody.stranded.v1", nil))).To(Succeed())
		strandedPool(ns, "stranded-reg", "no-such-deployment", "nobody.stranded.")
		Eventually(unserved("stranded")).Should(And(
			HaveField("Status", metav1.ConditionTrue),
			HaveField("Reason", workflowv1alpha1.ReasonWorkerPoolNotReady),
			HaveField("Message", And(
				HavePrefix("workflow type nobody.stranded.v1 is covered only by worker pool no-such-deployment (WorkflowRegistry "+ns+"/stranded-reg), which cannot be scaled"),
				ContainSubstring("does not exist")))))
	})

	It("names another namespace's registry but not its pool's target or errors", func() {
		// Only the type's namespace's pools serve a run: the other
		// namespace shares the type, and the run asks for it there.
		other := newNamespace()
		Expect(k8sClient.Create(ctx, &workflowv1alpha1.WorkflowRegistry{
			ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: "their-types"},
			Spec: workflowv1alpha1.WorkflowRegistrySpec{Workflows: []workflowv1alpha1.WorkflowDefinition{
				{Name: "nobody.foreign.v1", Runtime: workflowv1alpha1.RuntimeGo, SharedWith: []string{ns}}}},
		})).To(Succeed())
		Eventually(func() error { _, err := eng.GetRegistryEntry(ctx, other, "nobody.foreign.v1"); return err }).Should(Succeed())
		foreign := newRun(ns, "foreign", "nobody.foreign.v1", nil)
		foreign.Spec.TypeNamespace = other
		Expect(k8sClient.Create(ctx, foreign)).To(Succeed())
		strandedPool(other, "their-reg", "their-secret-deployment", "nobody.foreign.")
		Eventually(unserved("foreign")).Should(And(
			HaveField("Reason", workflowv1alpha1.ReasonWorkerPoolNotReady),
			HaveField("Message", And(
				ContainSubstring("a worker pool of WorkflowRegistry "+other+"/their-reg"),
				Not(ContainSubstring("their-secret-deployment")),
				Not(ContainSubstring("does not exist"))))))
	})
})
