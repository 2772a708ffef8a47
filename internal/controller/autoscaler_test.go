package controller_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/controller"
	"github.com/simple-workflow/simple-workflow/internal/engine"
)

func newDeployment(ns, name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "worker", Image: "example-worker"}}},
			},
		},
	}
	Expect(k8sClient.Create(ctx, d)).To(Succeed())
	return d
}

func replicasOf(ns, name string) func() int32 {
	return func() int32 {
		var d appsv1.Deployment
		Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &d)).To(Succeed())
		return *d.Spec.Replicas
	}
}

var _ = Describe("Worker autoscaler", func() {
	var (
		ns, prefix string
		clk        *clocktesting.FakeClock
		scaler     *controller.Autoscaler
	)
	BeforeEach(func() {
		ns = newNamespace()
		prefix = "as" + randomSuffix() + "."
		clk = clocktesting.NewFakeClock(time.Now())
		scaler = &controller.Autoscaler{Client: k8sClient, Engine: eng, Recorder: discardRecorder{},
			Log: ctrl.Log.WithName("autoscaler"), Clock: clk, Namespace: ns}
	})

	registry := func(pool workflowv1alpha1.WorkerPool, workflows ...workflowv1alpha1.WorkflowDefinition) {
		reg := &workflowv1alpha1.WorkflowRegistry{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pools"},
			Spec:       workflowv1alpha1.WorkflowRegistrySpec{Workflows: workflows, Workers: []workflowv1alpha1.WorkerPool{pool}},
		}
		Expect(k8sClient.Create(ctx, reg)).To(Succeed())
	}
	newPool := func(min, max, perReplica int32, delay time.Duration) workflowv1alpha1.WorkerPool {
		return workflowv1alpha1.WorkerPool{
			ScaleTargetRef: workflowv1alpha1.ScaleTargetRef{APIVersion: "apps/v1", Kind: "Deployment", Name: "worker"},
			Runtime:        workflowv1alpha1.RuntimeGo, TypePrefixes: []string{prefix},
			MinReplicas: &min, MaxReplicas: max, RunsPerReplica: &perReplica,
			ScaleDownDelay: &metav1.Duration{Duration: delay},
		}
	}
	createRuns := func(typ string, n int, opts ...func(*engine.CreateParams)) {
		for range n {
			p := engine.CreateParams{Type: typ, Namespace: ns}
			for _, o := range opts {
				o(&p)
			}
			_, err := eng.CreateRun(ctx, p)
			Expect(err).NotTo(HaveOccurred())
		}
	}
	poolStatus := func() workflowv1alpha1.WorkerPoolStatus {
		var reg workflowv1alpha1.WorkflowRegistry
		Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "pools"}, &reg)).To(Succeed())
		Expect(reg.Status.Workers).To(HaveLen(1))
		return reg.Status.Workers[0]
	}

	It("scales 0 to N on a backlog, capped at max, and back to 0 only after the delay", func() {
		newDeployment(ns, "worker", 0)
		registry(newPool(0, 4, 10, time.Minute))
		Expect(scaler.Evaluate(ctx)).To(Succeed())
		Expect(replicasOf(ns, "worker")()).To(BeEquivalentTo(0))

		createRuns(prefix+"job.v1", 27)
		Expect(scaler.Evaluate(ctx)).To(Succeed())
		Expect(replicasOf(ns, "worker")()).To(BeEquivalentTo(3))
		st := poolStatus()
		Expect(st.Runnable).To(BeEquivalentTo(27))
		Expect(st.DesiredReplicas).To(BeEquivalentTo(3))
		Expect(st.LastScaleReason).To(ContainSubstring("27 runnable"))

		createRuns(prefix+"job.v1", 100)
		Expect(scaler.Evaluate(ctx)).To(Succeed())
		Expect(replicasOf(ns, "worker")()).To(BeEquivalentTo(4), "capped at maxReplicas")
		// 127 runnable, counted up to what 4 replicas of 10 can use, and
		// said so.
		st = poolStatus()
		Expect(st.Runnable).To(BeEquivalentTo(40))
		ready := meta.FindStatusCondition(st.Conditions, workflowv1alpha1.ConditionReady)
		Expect(ready).NotTo(BeNil())
		Expect(ready.Message).To(ContainSubstring("at least 40 runs"))

		// The queue drains: nothing changes until the delay has passed.
		_, err := pool.Exec(ctx, "update workflow.workflow_run set status = 'cancelled' where type like $1", prefix+"%")
		Expect(err).NotTo(HaveOccurred())
		Expect(scaler.Evaluate(ctx)).To(Succeed())
		clk.Step(59 * time.Second)
		Expect(scaler.Evaluate(ctx)).To(Succeed())
		Expect(replicasOf(ns, "worker")()).To(BeEquivalentTo(4))
		clk.Step(2 * time.Second)
		Expect(scaler.Evaluate(ctx)).To(Succeed())
		Expect(replicasOf(ns, "worker")()).To(BeEquivalentTo(0))
	})

	It("keeps the minReplicas floor", func() {
		newDeployment(ns, "worker", 0)
		registry(newPool(2, 5, 10, 0))
		Expect(scaler.Evaluate(ctx)).To(Succeed())
		Expect(replicasOf(ns, "worker")()).To(BeEquivalentTo(2))
		clk.Step(time.Hour)
		Expect(scaler.Evaluate(ctx)).To(Succeed())
		Expect(replicasOf(ns, "worker")()).To(BeEquivalentTo(2))
	})

	It("counts only runs the pool's workers could claim", func() {
		newDeployment(ns, "worker", 0)
		registry(newPool(0, 50, 1, 0),
			workflowv1alpha1.WorkflowDefinition{Name: prefix + "py.v1", Runtime: workflowv1alpha1.RuntimePython},
			workflowv1alpha1.WorkflowDefinition{Name: prefix + "off.v1", Runtime: workflowv1alpha1.RuntimeGo, Enabled: new(bool)},
		)
		// Let the registry controller mirror the workflows.
		Eventually(func() error { _, err := eng.GetRegistryEntry(ctx, ns, prefix+"off.v1"); return err }).Should(Succeed())
		future := time.Now().Add(time.Hour)
		createRuns(prefix+"py.v1", 3)
		createRuns(prefix+"off.v1", 3)
		createRuns(prefix+"later.v1", 3, func(p *engine.CreateParams) { p.RunAt = &future })
		createRuns("other"+prefix+"x.v1", 3)
		// '_' in a prefix is literal: "asXXXX._" would otherwise match "asXXXX.a".
		Expect(scaler.Evaluate(ctx)).To(Succeed())
		Expect(replicasOf(ns, "worker")()).To(BeEquivalentTo(0))
		Expect(poolStatus().Runnable).To(BeEquivalentTo(0))

		createRuns(prefix+"go.v1", 2)
		Expect(scaler.Evaluate(ctx)).To(Succeed())
		Expect(replicasOf(ns, "worker")()).To(BeEquivalentTo(2))
	})

	It("takes '_' in a prefix literally", func() {
		newDeployment(ns, "worker", 0)
		p := newPool(0, 50, 1, 0)
		p.TypePrefixes = []string{prefix + "a_b."}
		registry(p)
		createRuns(prefix+"axb.job.v1", 4)
		Expect(scaler.Evaluate(ctx)).To(Succeed())
		Expect(replicasOf(ns, "worker")()).To(BeEquivalentTo(0))
		createRuns(prefix+"a_b.job.v1", 1)
		Expect(scaler.Evaluate(ctx)).To(Succeed())
		Expect(replicasOf(ns, "worker")()).To(BeEquivalentTo(1))
	})

	It("reports a missing Deployment instead of failing", func() {
		registry(newPool(0, 5, 10, 0))
		createRuns(prefix+"job.v1", 5)
		Expect(scaler.Evaluate(ctx)).To(Succeed())
		st := poolStatus()
		c := condition(st.Conditions, workflowv1alpha1.ConditionReady)
		Expect(c).NotTo(BeNil())
		Expect(c.Status).To(Equal(metav1.ConditionFalse))
		Expect(c.Reason).To(Equal(workflowv1alpha1.ReasonTargetNotFound))
		Expect(c.Message).To(ContainSubstring("Deployment " + ns + "/worker does not exist"))
		// Once it exists, the pool scales it.
		newDeployment(ns, "worker", 0)
		Expect(scaler.Evaluate(ctx)).To(Succeed())
		Expect(replicasOf(ns, "worker")()).To(BeEquivalentTo(1))
	})

	It("reports an HPA on the same target as a conflict and leaves replicas alone", func() {
		newDeployment(ns, "worker", 1)
		registry(newPool(0, 5, 1, 0))
		min := int32(1)
		Expect(k8sClient.Create(ctx, &autoscalingv2.HorizontalPodAutoscaler{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "human"},
			Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
				ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "worker"},
				MinReplicas:    &min, MaxReplicas: 3,
			},
		})).To(Succeed())
		createRuns(prefix+"job.v1", 4)
		Expect(scaler.Evaluate(ctx)).To(Succeed())
		Expect(replicasOf(ns, "worker")()).To(BeEquivalentTo(1))
		c := condition(poolStatus().Conditions, workflowv1alpha1.ConditionReady)
		Expect(c.Reason).To(Equal(workflowv1alpha1.ReasonHPAConflict))
		Expect(c.Message).To(ContainSubstring("HorizontalPodAutoscaler human also scales Deployment worker"))
	})

	It("gives a pool at zero its first replica about a second after the first run", func() {
		newDeployment(ns, "worker", 0)
		registry(newPool(0, 5, 10, time.Minute))
		running := &controller.Autoscaler{Client: k8sClient, Engine: eng, Recorder: discardRecorder{},
			Log: ctrl.Log.WithName("autoscaler"), Namespace: ns, Interval: time.Hour}
		actx, stop := contextWithCancel()
		defer stop()
		go func() { _ = running.Start(actx) }()
		Consistently(replicasOf(ns, "worker"), 500*time.Millisecond).Should(BeEquivalentTo(0))
		at := time.Now()
		createRuns(prefix+"job.v1", 1)
		Eventually(replicasOf(ns, "worker"), 5*time.Second, 20*time.Millisecond).Should(BeEquivalentTo(1))
		reaction := time.Since(at)
		AddReportEntry("first replica after", reaction.String())
		Expect(reaction).To(BeNumerically("<", 1500*time.Millisecond))
	})
})

// Two teams, each in its own namespace, each with a registry named "team":
// only the namespace tells them apart, and nothing of one binds the other.
var _ = Describe("Worker autoscaler across namespaces", func() {
	var nsA, nsB, sfx string
	BeforeEach(func() {
		sfx = randomSuffix()
		nsA, nsB = newNamespace(), newNamespace()
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
