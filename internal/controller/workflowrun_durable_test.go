package controller_test

import (
	"encoding/json"
	"fmt"
	"io"
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

// The specs below play the worker by hand with the engine's functions, on
// types under "manual." that the suite's worker never claims: claim, journal
// steps, park, start children, complete.
const manualWorker = "manual-worker"

// manualType is a workflow type of the spec's own.
func manualType() string { return "manual.t" + randomSuffix() + ".v1" }

// claimManual claims up to n runs of typ as a worker of namespace ns (the
// namespace whose type it is), waiting until at least one is there.
func claimManual(ns, typ string, n int) []engine.ClaimedRun {
	var got []engine.ClaimedRun
	EventuallyWithOffset(1, func() (int, error) {
		var err error
		got, err = eng.ClaimRuns(ctx, engine.ClaimParams{
			WorkerID: manualWorker, TypePrefixes: []string{typ}, Limit: n, LeaseDuration: time.Minute,
			Namespace: ns,
		})
		return len(got), err
	}).Should(BeNumerically(">", 0))
	return got
}

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

func complete(cs ...engine.ClaimedRun) {
	done := make([]engine.Completion, len(cs))
	for i, c := range cs {
		done[i] = engine.Completion{LeaseRef: c.Ref(), Result: json.RawMessage(`{"done":true}`)}
	}
	ids, err := eng.CompleteRuns(ctx, manualWorker, done)
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	ExpectWithOffset(1, ids).To(HaveLen(len(cs)))
}

func durationPtr(d time.Duration) *time.Duration { return &d }

// runIDOf waits for the object to be mirrored and returns its run's id.
func runIDOf(ns, name string) string {
	var id string
	EventuallyWithOffset(1, func() string {
		if wfr := getRun(ns, name)(); wfr != nil {
			id = wfr.Status.RunID
		}
		return id
	}).ShouldNot(BeEmpty())
	return id
}

// kubectl runs the control plane's kubectl.
func kubectl(args ...string) (string, error) {
	//nolint:staticcheck // the control plane's own admin kubeconfig; AddUser would mint a user per call
	stdout, stderr, err := testEnv.ControlPlane.KubeCtl().Run(args...)
	out, _ := io.ReadAll(stdout)
	errOut, _ := io.ReadAll(stderr)
	return string(out) + string(errOut), err
}

// approveCommand is the documented way to send a signal with kubectl.
func approveCommand(ns, name, value string) []string {
	return []string{"patch", "wfr", name, "-n", ns, "--type=json",
		"-p", `[{"op":"add","path":"/spec/signals/-","value":` + value + `}]`}
}

func eventNotes(ns, name, reason string) []string {
	var out []string
	for _, e := range eventsFor(ns, name) {
		if e.Reason == reason {
			out = append(out, e.Note)
		}
	}
	return out
}

var _ = Describe("WorkflowRun durable execution", func() {
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

	It("gives the run spec.deadline and reports the run that exceeds it", func() {
		typ := manualType()
		wfr := newRun(ns, "late", typ, nil)
		wfr.Spec.Deadline = &metav1.Duration{Duration: 2 * time.Second}
		Expect(k8sClient.Create(ctx, wfr)).To(Succeed())
		runID := runIDOf(ns, "late")
		run, err := eng.GetRun(ctx, runID)
		Expect(err).NotTo(HaveOccurred())
		Expect(run.DeadlineAt).NotTo(BeNil())
		Expect(*run.DeadlineAt).To(BeTemporally("~", run.CreatedAt.Add(2*time.Second), 10*time.Millisecond))
		Eventually(func() *metav1.Time { return getRun(ns, "late")().Status.DeadlineAt }).ShouldNot(BeNil())
		Eventually(phase(ns, "late"), 15*time.Second).Should(Equal(workflowv1alpha1.PhaseFailed))
		got := getRun(ns, "late")()
		Expect(got.Status.LastError).To(Equal("deadline exceeded"))
		Eventually(func() []string { return eventReasons(ns, "late") }).Should(Equal([]string{"Failed"}))
		Expect(eventNotes(ns, "late", "Failed")).To(ConsistOf(
			MatchRegexp(`^Failed for good: deadline exceeded at \S+Z while waiting for a worker$`)))
	})
})
