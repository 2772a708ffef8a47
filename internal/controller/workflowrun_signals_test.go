package controller_test

import (
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/controller"
	"github.com/simple-workflow/simple-workflow/internal/engine"
)

var _ = Describe("WorkflowRun spec.signals", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("sends each spec.signals entry once, keyed by the object and the index, whatever the reconciles", func() {
		typ := manualType()
		wfr := newRun(ns, "sig", typ, nil)
		wfr.Spec.Signals = []workflowv1alpha1.WorkflowSignal{{Name: "approve", Payload: payload(map[string]any{"n": 1})}}
		Expect(k8sClient.Create(ctx, wfr)).To(Succeed())
		runID := runIDOf(ns, "sig")
		Eventually(func() int32 { return getRun(ns, "sig")().Status.SignalsSent }).Should(BeEquivalentTo(1))
		out, err := kubectl(approveCommand(ns, "sig", `{"name":"note"}`)...)
		Expect(err).NotTo(HaveOccurred(), out)
		Eventually(func() int32 { return getRun(ns, "sig")().Status.SignalsSent }).Should(BeEquivalentTo(2))

		uid := string(getRun(ns, "sig")().UID)
		signals := func() []engine.Signal {
			s, err := eng.ListSignals(ctx, runID)
			Expect(err).NotTo(HaveOccurred())
			return s
		}
		got := signals()
		Expect(got).To(HaveLen(2))
		Expect(got[0].Name).To(Equal("approve"))
		Expect(got[0].IdempotencyKey).To(Equal("k8s-signal:" + uid + ":0"))
		Expect(string(got[0].Payload)).To(MatchJSON(`{"n":1}`))
		Expect(got[1].Name).To(Equal("note"))
		Expect(got[1].IdempotencyKey).To(Equal("k8s-signal:" + uid + ":1"))
		Expect(got[1].Payload).To(BeNil())

		// A controller that lost its status write (or restarted from an old
		// status) sends both again: nothing new reaches the run.
		cur := getRun(ns, "sig")()
		patch := client.MergeFrom(cur.DeepCopy())
		cur.Status.SignalsSent = 0
		Expect(k8sClient.Status().Patch(ctx, cur, patch)).To(Succeed())
		second := &controller.WorkflowRunReconciler{Client: k8sClient, Inbox: eng, Recorder: discardRecorder{}}
		Eventually(func(g Gomega) {
			_, err := second.Reconcile(ctx, reconcileRequest(ns, "sig"))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(getRun(ns, "sig")().Status.SignalsSent).To(BeEquivalentTo(2))
		}).Should(Succeed())
		Expect(signals()).To(HaveLen(2))
		Eventually(func() []string { return eventNotes(ns, "sig", "SignalReceived") }).Should(Equal([]string{
			"Received signal approve (spec.signals[0])", "Received signal note (spec.signals[1])"}))
		Consistently(func() []engine.Signal { return signals() }, 2*time.Second).Should(HaveLen(2))
		Expect(eventNotes(ns, "sig", "SignalReceived")).To(HaveLen(2))
		Expect(eventNotes(ns, "sig", "SignalRejected")).To(BeEmpty())
	})

	It("refuses a signal payload nested past the inbox's bound, saying so, and sends the next signals", func() {
		typ := manualType()
		deep := strings.Repeat(`{"a":`, 200) + "1" + strings.Repeat("}", 200)
		wfr := newRun(ns, "deepsig", typ, nil)
		wfr.Spec.Signals = []workflowv1alpha1.WorkflowSignal{
			{Name: "approve", Payload: &apiextensionsv1.JSON{Raw: []byte(deep)}},
			{Name: "note", Payload: payload(map[string]any{"n": 1})},
		}
		Expect(k8sClient.Create(ctx, wfr)).To(Succeed())
		runID := runIDOf(ns, "deepsig")
		Eventually(func(g Gomega) {
			got := getRun(ns, "deepsig")()
			g.Expect(got.Status.SignalsSent).To(BeEquivalentTo(2))
			c := condition(got.Status.Conditions, workflowv1alpha1.ConditionSignalsSent)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Message).To(ContainSubstring("spec.signals[0] (approve) was not sent"))
			g.Expect(c.Message).To(ContainSubstring("nests deeper than 64 levels"))
		}).Should(Succeed())
		got, err := eng.ListSignals(ctx, runID)
		Expect(err).NotTo(HaveOccurred())
		Expect(got).To(HaveLen(1))
		Expect(got[0].Name).To(Equal("note"))
		Expect(getRun(ns, "deepsig")().Status.Phase).NotTo(Equal(workflowv1alpha1.PhaseFailed))
	})

	It("reports a signal added after the run finished, once, and does not retry it", func() {
		Expect(k8sClient.Create(ctx, newRun(ns, "done", "test.echo.v1", nil))).To(Succeed())
		Eventually(phase(ns, "done")).Should(Equal(workflowv1alpha1.PhaseSucceeded))
		out, err := kubectl(approveCommand(ns, "done", `{"name":"approve"}`)...)
		Expect(err).NotTo(HaveOccurred(), out)
		Eventually(func(g Gomega) {
			got := getRun(ns, "done")()
			g.Expect(got.Status.SignalsSent).To(BeEquivalentTo(1))
			c := condition(got.Status.Conditions, workflowv1alpha1.ConditionSignalsSent)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal("RunFinished"))
			g.Expect(c.Message).To(Equal("spec.signals[0] (approve) was not sent: the run had already finished"))
		}).Should(Succeed())
		Eventually(func() []string { return eventNotes(ns, "done", "SignalRejected") }).Should(Equal([]string{
			"Spec.signals[0] (approve) was not sent: the run had already finished"}))
		for _, e := range eventsFor(ns, "done") {
			if e.Reason == "SignalRejected" {
				Expect(e.Type).To(Equal(corev1.EventTypeWarning))
			}
		}
		Consistently(func() []string { return eventNotes(ns, "done", "SignalRejected") }, 3*time.Second).Should(HaveLen(1))
	})

	It("counts a signal the run took before it finished as sent, though the status never said so", func() {
		typ := manualType()
		Expect(k8sClient.Create(ctx, newRun(ns, "raced", typ, nil))).To(Succeed())
		runID := runIDOf(ns, "raced")
		// What the controller sent for spec.signals[0] before its status
		// write was lost; then the run took it and finished.
		_, err := eng.SendSignal(ctx, engine.SignalParams{RunID: runID, Name: "approve",
			IdempotencyKey: fmt.Sprintf("k8s-signal:%s:0", getRun(ns, "raced")().UID)})
		Expect(err).NotTo(HaveOccurred())
		complete(claimManual(ns, typ, 1)...)
		Eventually(phase(ns, "raced")).Should(Equal(workflowv1alpha1.PhaseSucceeded))
		out, err := kubectl(approveCommand(ns, "raced", `{"name":"approve"}`)...)
		Expect(err).NotTo(HaveOccurred(), out)
		Eventually(func(g Gomega) {
			got := getRun(ns, "raced")()
			g.Expect(got.Status.SignalsSent).To(BeEquivalentTo(1))
			c := condition(got.Status.Conditions, workflowv1alpha1.ConditionSignalsSent)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
		}).Should(Succeed())
		Expect(eventNotes(ns, "raced", "SignalRejected")).To(BeEmpty())
	})
})
