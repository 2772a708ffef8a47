package controller_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/controller"
	"github.com/simple-workflow/simple-workflow/internal/engine"
	"github.com/simple-workflow/simple-workflow/internal/kubetest"
)

// The chart's MutatingAdmissionPolicy (config/admission), bound here to one
// namespace so that the other specs keep testing the manager's own patch.
var _ = Describe("The finalizer admission policy", func() {
	It("adds the finalizer at creation; the manager works with it and a deletion still cancels", func() {
		ns := newNamespace()
		label := "simpleworkflow.dev/finalizer-policy-test"
		var nsObj corev1.Namespace
		Expect(k8sClient.Get(ctx, client.ObjectKey{Name: ns}, &nsObj)).To(Succeed())
		nsObj.Labels = map[string]string{label: ns}
		Expect(k8sClient.Update(ctx, &nsObj)).To(Succeed())

		var created []*unstructured.Unstructured
		Expect(kubetest.ApplyRepoFile(ctx, k8sClient, kubetest.FinalizerPolicy, func(o *unstructured.Unstructured) {
			o.SetName(o.GetName() + "-" + ns)
			if o.GetKind() == "MutatingAdmissionPolicyBinding" {
				Expect(unstructured.SetNestedField(o.Object, "workflowrun-finalizer-"+ns, "spec", "policyName")).To(Succeed())
				Expect(unstructured.SetNestedStringMap(o.Object, map[string]string{label: ns},
					"spec", "matchResources", "namespaceSelector", "matchLabels")).To(Succeed())
			}
			created = append(created, o)
		})).To(Succeed())
		DeferCleanup(func() {
			for _, o := range created {
				Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, o))).To(Succeed())
			}
		})

		// A policy takes effect a moment after it is created: probe with dry runs.
		Eventually(func() []string {
			probe := newRun(ns, "probe", "test.echo.v1", nil)
			if err := k8sClient.Create(ctx, probe, client.DryRunAll); err != nil {
				return nil
			}
			return probe.Finalizers
		}).Should(ContainElement(controller.Finalizer))

		// The object has the finalizer as the API server stored it.
		echo := newRun(ns, "echo", "test.echo.v1", map[string]any{"n": 1})
		Expect(k8sClient.Create(ctx, echo)).To(Succeed())
		Expect(echo.Finalizers).To(Equal([]string{controller.Finalizer}))
		Eventually(phase(ns, "echo")).Should(Equal(workflowv1alpha1.PhaseSucceeded))
		Expect(getRun(ns, "echo")().Finalizers).To(Equal([]string{controller.Finalizer}))

		// A finalizer of the user's own is kept beside it.
		own := newRun(ns, "own", "test.echo.v1", nil)
		own.Finalizers = []string{"example.com/keep"}
		Expect(k8sClient.Create(ctx, own)).To(Succeed())
		Expect(own.Finalizers).To(Equal([]string{"example.com/keep", controller.Finalizer}))
		Eventually(phase(ns, "own")).Should(Equal(workflowv1alpha1.PhaseSucceeded))
		got := getRun(ns, "own")()
		Expect(got.Finalizers).To(ConsistOf("example.com/keep", controller.Finalizer))
		got.Finalizers = nil
		Expect(k8sClient.Update(ctx, got)).To(Succeed())

		// Deleting an unfinished run cancels it, as with the manager's own finalizer.
		Expect(k8sClient.Create(ctx, newRun(ns, "long", "test.sleep.v1", nil))).To(Succeed())
		Eventually(phase(ns, "long")).Should(Equal(workflowv1alpha1.PhaseRunning))
		runID := getRun(ns, "long")().Status.RunID
		Expect(k8sClient.Delete(ctx, getRun(ns, "long")())).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "long"}, &workflowv1alpha1.WorkflowRun{}))
		}).Should(BeTrue())
		run, err := eng.GetRun(ctx, runID)
		Expect(err).NotTo(HaveOccurred())
		Expect(run.Status).To(Equal(engine.StatusCancelled))
	})
})
