package controller_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
)

func randomSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// newNamespace creates a namespace of the spec's own, with the suite's
// worker for the "test." types of that namespace (a worker serves one
// namespace) until the spec ends.
func newNamespace() string {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "t-" + randomSuffix()}}
	Expect(k8sClient.Create(ctx, ns)).To(Succeed())
	w := newSuiteWorker(ns.Name)
	wctx, stop := context.WithCancel(ctx)
	// Stopped, not awaited: a handler still running (test.sleep.v1) may
	// keep it for the shutdown grace period.
	go func() { _ = w.Run(wctx) }()
	DeferCleanup(stop)
	return ns.Name
}

func payload(v any) *apiextensionsv1.JSON {
	raw, err := json.Marshal(v)
	Expect(err).NotTo(HaveOccurred())
	return &apiextensionsv1.JSON{Raw: raw}
}

func newRun(ns, name, typ string, p any) *workflowv1alpha1.WorkflowRun {
	wfr := &workflowv1alpha1.WorkflowRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       workflowv1alpha1.WorkflowRunSpec{Type: typ},
	}
	if p != nil {
		wfr.Spec.Payload = payload(p)
	}
	return wfr
}

func getRun(ns, name string) func() *workflowv1alpha1.WorkflowRun {
	return func() *workflowv1alpha1.WorkflowRun {
		var wfr workflowv1alpha1.WorkflowRun
		if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &wfr); err != nil {
			return nil
		}
		return &wfr
	}
}

func phase(ns, name string) func() workflowv1alpha1.WorkflowRunPhase {
	return func() workflowv1alpha1.WorkflowRunPhase {
		if wfr := getRun(ns, name)(); wfr != nil {
			return wfr.Status.Phase
		}
		return ""
	}
}

func condition(conds []metav1.Condition, t string) *metav1.Condition {
	return meta.FindStatusCondition(conds, t)
}

func int32p(v int32) *int32 { return &v }

func unstructuredFrom(obj map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: obj}
}

func contextWithCancel() (context.Context, context.CancelFunc) {
	return context.WithCancel(ctx)
}
