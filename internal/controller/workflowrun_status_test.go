package controller_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/controller"
	"github.com/simple-workflow/simple-workflow/internal/engine"
)

func recordSteps(c engine.ClaimedRun, first int, names ...string) {
	ws := make([]engine.StepWrite, len(names))
	for i, n := range names {
		ws[i] = engine.StepWrite{LeaseRef: c.Ref(), Name: n, Position: first + i, Output: json.RawMessage(`{"step":"` + n + `"}`)}
	}
	res, err := eng.RecordSteps(ctx, manualWorker, ws)
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	for _, r := range res {
		ExpectWithOffset(1, r.Status).To(Equal(engine.WriteRecorded))
	}
}

func park(p engine.ParkParams) {
	p.WorkerID = manualWorker
	res, err := eng.ParkRun(ctx, p)
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	ExpectWithOffset(1, res.Status).To(Equal(engine.WriteParked), res.Message)
}

func durationPtr(d time.Duration) *time.Duration { return &d }

// A retry shows when it comes; a parked run shows what it waits for, its
// journal and its children.
var _ = Describe("WorkflowRun status phases", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("shows a parked run as Waiting with what it waits for and its journal, and wakes it with kubectl patch on spec.signals", func() {
		typ := manualType()
		Expect(k8sClient.Create(ctx, newRun(ns, "order", typ, map[string]any{"orderId": "o-1"}))).To(Succeed())
		runID := runIDOf(ns, "order")
		c := claimManual(ns, typ, 1)[0]
		Expect(c.ID).To(Equal(runID))
		recordSteps(c, 0, "reserve", "charge")
		park(engine.ParkParams{LeaseRef: c.Ref(), Kind: engine.StepKindSignal, Step: "approve", Position: 2,
			Signal: "approve", Delay: durationPtr(time.Hour)})

		Eventually(func(g Gomega) {
			got := getRun(ns, "order")()
			g.Expect(got.Status.Phase).To(Equal(workflowv1alpha1.PhaseWaiting))
			w := got.Status.WaitingFor
			g.Expect(w).NotTo(BeNil())
			g.Expect(w.Kind).To(Equal("signal"))
			g.Expect(w.Step).To(Equal("approve"))
			g.Expect(w.Signal).To(Equal("approve"))
			g.Expect(w.Until).NotTo(BeNil())
			g.Expect(w.Until.Time).To(BeTemporally("~", time.Now().Add(time.Hour), time.Minute))
			g.Expect(got.Status.StepsDone).To(BeEquivalentTo(2))
			g.Expect(got.Status.LastStep).To(Equal("charge"))
			g.Expect(got.Status.NextAttemptAt).To(BeNil())
			fin := condition(got.Status.Conditions, workflowv1alpha1.ConditionFinished)
			g.Expect(fin.Reason).To(Equal("Waiting"))
			g.Expect(fin.Message).To(HavePrefix("waiting for signal approve at step approve until "))
		}).Should(Succeed())
		Eventually(func() []string { return lifecycleReasons(ns, "order") }).Should(Equal([]string{"Waiting"}))
		Expect(eventNotes(ns, "order", "Waiting")[0]).To(And(
			HavePrefix("Waiting for signal approve at step approve until "), HaveSuffix("; the worker slot is free")))

		out, err := kubectl("get", "wfr", "order", "-n", ns)
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(MatchRegexp(`(?m)^NAME\s+TYPE\s+PHASE\s+ATTEMPTS\s+STEPS\s+AGE\s+PROGRESS\s+NEXT-ATTEMPT$`))
		Expect(out).To(MatchRegexp(`(?m)^order\s+` + strings.ReplaceAll(typ, ".", `\.`) + `\s+Waiting\s+0/3\s+2\s+`))

		out, err = kubectl(approveCommand(ns, "order", `{"name":"approve","payload":{"by":"ann"}}`)...)
		Expect(err).NotTo(HaveOccurred(), out)

		// The signal resolves the wait: the run is runnable again.
		Eventually(func(g Gomega) {
			got := getRun(ns, "order")()
			g.Expect(got.Status.Phase).To(Equal(workflowv1alpha1.PhasePending))
			g.Expect(got.Status.WaitingFor).To(BeNil())
			g.Expect(got.Status.StepsDone).To(BeEquivalentTo(3))
			g.Expect(got.Status.LastStep).To(Equal("approve"))
			g.Expect(got.Status.SignalsSent).To(BeEquivalentTo(1))
			sent := condition(got.Status.Conditions, workflowv1alpha1.ConditionSignalsSent)
			g.Expect(sent).NotTo(BeNil())
			g.Expect(sent.Status).To(Equal(metav1.ConditionTrue))
		}).Should(Succeed())
		Eventually(func() []string { return lifecycleReasons(ns, "order") }).Should(
			Equal([]string{"Waiting", "SignalReceived", "Woken"}))
		Expect(eventNotes(ns, "order", "SignalReceived")).To(Equal([]string{"Received signal approve (spec.signals[0])"}))
		Expect(eventNotes(ns, "order", "Woken")).To(Equal([]string{"Woken: signal approve arrived for step approve"}))

		// The next attempt replays the journal, the payload included, and ends.
		c = claimManual(ns, typ, 1)[0]
		Expect(c.Journal).To(HaveLen(3))
		Expect(string(c.Journal[2].Output)).To(MatchJSON(`{"by":"ann"}`))
		recordSteps(c, 3, "ship")
		complete(c)
		Eventually(phase(ns, "order")).Should(Equal(workflowv1alpha1.PhaseSucceeded))
		got := getRun(ns, "order")()
		Expect(got.Status.StepsDone).To(BeEquivalentTo(4))
		Expect(got.Status.LastStep).To(Equal("ship"))
		Expect(got.Status.WaitingFor).To(BeNil())
		Eventually(func() []string { return lifecycleReasons(ns, "order") }).Should(Equal([]string{
			"Waiting", "SignalReceived", "Woken", "Succeeded"}))
		out, err = kubectl("get", "wfr", "order", "-n", ns, "-o", "wide")
		Expect(err).NotTo(HaveOccurred(), out)
		// TYPE-NAMESPACE, the last wide column, is empty: the namespace's own type.
		Expect(out).To(MatchRegexp(`(?m)^NAME\s.*\sRUN-ID\s+TYPE-NAMESPACE$`))
		Expect(out).To(MatchRegexp(`(?m)^order\s+\S+\s+Succeeded\s+1/3\s+4\s+\S+\s+ship\s+` + manualWorker + `\s+` + runID + `\s*$`))
	})

	It("shows a durable sleep as Waiting until it ends, then Pending until a worker resolves it", func() {
		typ := manualType()
		Expect(k8sClient.Create(ctx, newRun(ns, "nap", typ, nil))).To(Succeed())
		runIDOf(ns, "nap")
		c := claimManual(ns, typ, 1)[0]
		recordSteps(c, 0, "before")
		park(engine.ParkParams{LeaseRef: c.Ref(), Kind: engine.StepKindSleep, Step: "nap", Position: 1, Delay: durationPtr(3 * time.Second)})
		Eventually(func(g Gomega) {
			got := getRun(ns, "nap")()
			g.Expect(got.Status.Phase).To(Equal(workflowv1alpha1.PhaseWaiting))
			g.Expect(got.Status.WaitingFor).NotTo(BeNil())
			g.Expect(got.Status.WaitingFor.Kind).To(Equal("sleep"))
			g.Expect(got.Status.WaitingFor.Step).To(Equal("nap"))
			g.Expect(got.Status.WaitingFor.Signal).To(BeEmpty())
			g.Expect(got.Status.WaitingFor.Until).NotTo(BeNil())
			g.Expect(condition(got.Status.Conditions, workflowv1alpha1.ConditionFinished).Message).To(HavePrefix("sleeping at step nap until "))
		}).Should(Succeed())
		// The Event is recorded asynchronously, after the status.
		Eventually(func() []string { return eventNotes(ns, "nap", "Waiting") }).
			Should(ConsistOf(HavePrefix("Sleeping at step nap until ")))
		// Its time came: no worker took it yet, so it waits for one. Nothing
		// in the inbox changed; the controller looks again by itself.
		Eventually(func(g Gomega) {
			got := getRun(ns, "nap")()
			g.Expect(got.Status.Phase).To(Equal(workflowv1alpha1.PhasePending))
			g.Expect(got.Status.WaitingFor).To(BeNil())
			g.Expect(got.Status.StepsDone).To(BeEquivalentTo(1))
		}, 10*time.Second).Should(Succeed())
		// The claim resolves the sleep.
		claimManual(ns, typ, 1)
		Eventually(func(g Gomega) {
			got := getRun(ns, "nap")()
			g.Expect(got.Status.Phase).To(Equal(workflowv1alpha1.PhaseRunning))
			g.Expect(got.Status.StepsDone).To(BeEquivalentTo(2))
			g.Expect(got.Status.LastStep).To(Equal("nap"))
		}).Should(Succeed())
		Eventually(func() []string { return eventNotes(ns, "nap", "Woken") }).Should(Equal([]string{
			"Woken: the sleep at step nap ended"}))
	})

	It("lists the run's first children and waits for one", func() {
		typ, childType := manualType(), manualType()
		Expect(k8sClient.Create(ctx, newRun(ns, "parent", typ, nil))).To(Succeed())
		runIDOf(ns, "parent")
		c := claimManual(ns, typ, 1)[0]
		const n = controller.MaxChildrenInStatus + 1
		kids := make([]string, n)
		for i := range n {
			res, err := eng.StartChild(ctx, engine.ChildParams{LeaseRef: c.Ref(), WorkerID: manualWorker,
				Step: fmt.Sprintf("kid-%02d", i), Position: i, Type: childType, Payload: json.RawMessage(`{}`)})
			Expect(err).NotTo(HaveOccurred())
			Expect(res.Status).To(Equal(engine.WriteStarted), res.Message)
			kids[i] = res.ChildID
		}
		park(engine.ParkParams{LeaseRef: c.Ref(), Kind: engine.StepKindChild, Step: "kid-00", Position: 0})
		Eventually(func(g Gomega) {
			got := getRun(ns, "parent")()
			g.Expect(got.Status.Phase).To(Equal(workflowv1alpha1.PhaseWaiting))
			g.Expect(got.Status.WaitingFor).To(Equal(&workflowv1alpha1.WaitingFor{Kind: "child", Step: "kid-00"}))
			g.Expect(got.Status.ChildrenTotal).To(BeEquivalentTo(n))
			g.Expect(got.Status.Children).To(HaveLen(controller.MaxChildrenInStatus))
			g.Expect(got.Status.Children[0]).To(Equal(workflowv1alpha1.ChildRunStatus{
				Step: "kid-00", RunID: kids[0], Type: childType, Phase: workflowv1alpha1.PhasePending}))
			g.Expect(got.Status.Children[19].Step).To(Equal("kid-19"))
			g.Expect(got.Status.StepsDone).To(BeZero())
		}).Should(Succeed())
		Eventually(func() []string { return eventNotes(ns, "parent", "Waiting") }).Should(Equal([]string{
			"Waiting for child run " + kids[0] + " of step kid-00; the worker slot is free"}))

		// The children end: their entries fill in and the parent wakes.
		var claimed []engine.ClaimedRun
		for len(claimed) < n {
			claimed = append(claimed, claimManual(ns, childType, n)...)
		}
		complete(claimed...)
		Eventually(func(g Gomega) {
			got := getRun(ns, "parent")()
			g.Expect(got.Status.Phase).To(Equal(workflowv1alpha1.PhasePending))
			g.Expect(got.Status.WaitingFor).To(BeNil())
			g.Expect(got.Status.StepsDone).To(BeEquivalentTo(n))
			for _, ch := range got.Status.Children {
				g.Expect(ch.Phase).To(Equal(workflowv1alpha1.PhaseSucceeded))
			}
		}).Should(Succeed())
		Eventually(func() []string { return eventNotes(ns, "parent", "Woken") }).Should(Equal([]string{
			"Woken: child run " + kids[0] + " of step kid-00 ended succeeded"}))
	})

	It("shows a waiting retry as Retrying with its next attempt time", func() {
		wfr := newRun(ns, "flaky", "test.fail.v1", map[string]any{"FailTimes": 1})
		wfr.Spec.RetryPolicy = &workflowv1alpha1.RetryPolicy{BaseDelay: &metav1.Duration{Duration: time.Hour}}
		Expect(k8sClient.Create(ctx, wfr)).To(Succeed())
		Eventually(func(g Gomega) {
			got := getRun(ns, "flaky")()
			g.Expect(got.Status.Phase).To(Equal(workflowv1alpha1.PhaseRetrying))
			g.Expect(got.Status.NextAttemptAt).NotTo(BeNil())
			g.Expect(got.Status.NextAttemptAt.Time).To(BeTemporally("~", time.Now().Add(time.Hour), 10*time.Minute))
			c := condition(got.Status.Conditions, workflowv1alpha1.ConditionFinished)
			g.Expect(c.Reason).To(Equal(workflowv1alpha1.ReasonRetrying))
			g.Expect(c.Message).To(HavePrefix("attempt 1 of 3 failed: planned failure on attempt 1; next attempt at " +
				got.Status.NextAttemptAt.UTC().Format(time.RFC3339)))
		}).Should(Succeed())
		out, err := kubectl("get", "wfr", "flaky", "-n", ns)
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(MatchRegexp(`(?m)^NAME\s+TYPE\s+PHASE\s+ATTEMPTS\s+STEPS\s+AGE\s+PROGRESS\s+NEXT-ATTEMPT$`))
		next := getRun(ns, "flaky")().Status.NextAttemptAt.UTC().Format(time.RFC3339)
		Expect(out).To(MatchRegexp(`(?m)^flaky\s+test\.fail\.v1\s+Retrying\s+1/3\s+.*` + next + `$`))
	})
})
