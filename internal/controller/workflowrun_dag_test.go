package controller_test

import (
	"encoding/json"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// stepPhases is "name=Phase ..." of a DAG run's steps, in definition order.
func stepPhases(ns, name string) func() string {
	return func() string {
		wfr := getRun(ns, name)()
		if wfr == nil {
			return ""
		}
		var out []string
		for _, s := range wfr.Status.DAGSteps {
			out = append(out, s.Name+"="+string(s.Phase))
		}
		return strings.Join(out, " ")
	}
}

func dagStepStatus(wfr *workflowv1alpha1.WorkflowRun, name string) workflowv1alpha1.DAGStepStatus {
	for _, s := range wfr.Status.DAGSteps {
		if s.Name == name {
			return s
		}
	}
	return workflowv1alpha1.DAGStepStatus{}
}

// stepNotes lists the phrases of a run's step Events of one reason (steps
// that changed alike in one look share an Event: "Step a …; step b …").
func stepNotes(ns, name, reason string) []string {
	var out []string
	for _, n := range eventNotes(ns, name, reason) {
		for i, p := range strings.Split(n, "; step ") {
			if i > 0 {
				p = "Step " + p
			}
			out = append(out, p)
		}
	}
	return out
}

func failManual(c engine.ClaimedRun, msg string, retryable bool) {
	_, err := eng.FailRuns(ctx, manualWorker, []engine.Failure{{LeaseRef: c.Ref(), Error: msg, Retryable: retryable}})
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
}

// The steps of the DAG specs are played by hand (see claimManual): each step
// has a type of its own under "manual.", which the suite's worker never
// claims, so the spec decides when each starts, fails or succeeds.
var _ = Describe("WorkflowRun of a type with steps", func() {
	var ns, base string
	BeforeEach(func() {
		ns = newNamespace()
		base = "manual.t" + randomSuffix()
	})

	register := func(name string, steps ...workflowv1alpha1.WorkflowStep) {
		Expect(k8sClient.Create(ctx, dagRegistry(ns, "dags", name, steps...))).To(Succeed())
		Eventually(registryEntry(ns, name)).ShouldNot(BeNil())
	}

	It("shows each step's phase and the progress while the steps run, and ends Succeeded", func() {
		dag, ta, tb, tc, td := base+".diamond.v1", base+".a.v1", base+".b.v1", base+".c.v1", base+".d.v1"
		c := dagStep("c", tc, "a")
		c.RetryPolicy = &workflowv1alpha1.StepRetryPolicy{BaseDelay: &metav1.Duration{Duration: time.Second}}
		register(dag, dagStep("a", ta), dagStep("b", tb, "a"), c, dagStep("d", td, "b", "c"))
		Expect(k8sClient.Create(ctx, newRun(ns, "diamond", dag, map[string]any{"order": "o-1"}))).To(Succeed())
		runID := runIDOf(ns, "diamond")

		// Started by the database: a is a run waiting for a worker, the
		// others wait for their dependencies. The run itself is Running.
		Eventually(func(g Gomega) {
			got := getRun(ns, "diamond")()
			g.Expect(got.Status.Phase).To(Equal(workflowv1alpha1.PhaseRunning))
			g.Expect(got.Status.WaitingFor).To(BeNil())
			g.Expect(got.Status.Progress).To(Equal("0/4"))
			g.Expect(got.Status.Attempts).To(BeEmpty())
			g.Expect(stepPhases(ns, "diamond")()).To(Equal("a=Pending b=Pending c=Pending d=Pending"))
			a := dagStepStatus(got, "a")
			g.Expect(a.Type).To(Equal(ta))
			g.Expect(a.RunID).NotTo(BeEmpty())
			g.Expect(a.Attempts).To(Equal("0/3"))
			g.Expect(dagStepStatus(got, "b").RunID).To(BeEmpty())
			fin := condition(got.Status.Conditions, workflowv1alpha1.ConditionFinished)
			g.Expect(fin.Reason).To(Equal(workflowv1alpha1.ReasonRunning))
			g.Expect(fin.Message).To(Equal("0 of 4 steps succeeded; pending: a, b, c, d"))
		}).Should(Succeed())

		ca := claimManual(ns, ta, 1)[0]
		Eventually(stepPhases(ns, "diamond")).Should(Equal("a=Running b=Pending c=Pending d=Pending"))
		Expect(dagStepStatus(getRun(ns, "diamond")(), "a").StartedAt).NotTo(BeNil())
		complete(ca)
		Eventually(stepPhases(ns, "diamond")).Should(Equal("a=Succeeded b=Pending c=Pending d=Pending"))
		Expect(getRun(ns, "diamond")().Status.Progress).To(Equal("1/4"))

		cb := claimManual(ns, tb, 1)[0]
		cc := claimManual(ns, tc, 1)[0]
		Expect(cc.Payload).To(MatchJSON(`{"order":"o-1","steps":{"a":{"done":true}}}`))
		failManual(cc, "card declined", true)
		Eventually(stepPhases(ns, "diamond")).Should(Equal("a=Succeeded b=Running c=Retrying d=Pending"))
		got := getRun(ns, "diamond")()
		Expect(dagStepStatus(got, "c").Attempts).To(Equal("1/3"))
		Expect(dagStepStatus(got, "c").Error).To(Equal("card declined"))
		Expect(condition(got.Status.Conditions, workflowv1alpha1.ConditionFinished).Message).To(Equal(
			"1 of 4 steps succeeded; running: b; retrying: c; pending: d"))

		cc = claimManual(ns, tc, 1)[0]
		complete(cb, cc)
		Eventually(func(g Gomega) {
			got := getRun(ns, "diamond")()
			g.Expect(got.Status.Progress).To(Equal("3/4"))
			g.Expect(got.Status.Phase).To(Equal(workflowv1alpha1.PhaseRunning))
		}).Should(Succeed())
		out, err := kubectl("get", "wfr", "diamond", "-n", ns)
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(MatchRegexp(`(?m)^NAME\s+TYPE\s+PHASE\s+ATTEMPTS\s+STEPS\s+AGE\s+PROGRESS\s+NEXT-ATTEMPT$`))
		Expect(out).To(MatchRegexp(`(?m)^diamond\s+` + strings.ReplaceAll(dag, ".", `\.`) + `\s+Running\s+.*\s3/4\s*$`))

		complete(claimManual(ns, td, 1)[0])
		Eventually(phase(ns, "diamond")).Should(Equal(workflowv1alpha1.PhaseSucceeded))
		got = getRun(ns, "diamond")()
		Expect(got.Status.RunID).To(Equal(runID))
		Expect(stepPhases(ns, "diamond")()).To(Equal("a=Succeeded b=Succeeded c=Succeeded d=Succeeded"))
		Expect(got.Status.Progress).To(Equal("4/4"))
		Expect(dagStepStatus(got, "c").Attempts).To(Equal("2/3"))
		Expect(dagStepStatus(got, "d").FinishedAt).NotTo(BeNil())
		Expect(got.Status.Result).NotTo(BeNil())
		var res struct{ Steps map[string]json.RawMessage }
		Expect(json.Unmarshal(got.Status.Result.Raw, &res)).To(Succeed())
		Expect(res.Steps).To(HaveLen(4))
		fin := condition(got.Status.Conditions, workflowv1alpha1.ConditionFinished)
		Expect(fin.Status).To(Equal(metav1.ConditionTrue))
		Expect(fin.Reason).To(Equal(workflowv1alpha1.ReasonSucceeded))
		Expect(fin.Message).To(Equal("all 4 steps succeeded"))

		Eventually(func() []string { return eventNotes(ns, "diamond", workflowv1alpha1.ReasonSucceeded) }).Should(Equal([]string{
			"Succeeded: all 4 steps succeeded"}))
		Expect(eventNotes(ns, "diamond", workflowv1alpha1.ReasonStarted)).To(Equal([]string{
			"Started: the database runs its 4 steps, each as a run of the step's type, once the steps it depends on succeeded"}))
		Expect(stepNotes(ns, "diamond", workflowv1alpha1.ReasonStepRetrying)).To(Equal([]string{
			"Step c (" + tc + ") attempt 1/3 failed, to be retried: card declined"}))
		Expect(stepNotes(ns, "diamond", workflowv1alpha1.ReasonStepSucceeded)).To(ConsistOf(
			"Step a ("+ta+") succeeded on attempt 1/3", "Step b ("+tb+") succeeded on attempt 1/3",
			"Step c ("+tc+") succeeded on attempt 2/3", "Step d ("+td+") succeeded on attempt 1/3"))
		Expect(stepNotes(ns, "diamond", workflowv1alpha1.ReasonStepStarted)).To(ContainElements(
			"Step a ("+ta+") started: attempt 1/3, run "+dagStepStatus(got, "a").RunID,
			"Step b ("+tb+") started: attempt 1/3, run "+dagStepStatus(got, "b").RunID))
		Expect(eventReasons(ns, "diamond")).NotTo(ContainElement(workflowv1alpha1.ReasonWaiting))

		out, err = kubectl("get", "wfr", "diamond", "-n", ns)
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(MatchRegexp(`(?m)^diamond\s+\S+\s+Succeeded\s+.*\s4/4\s*$`))
		out, err = kubectl("describe", "wfr", "diamond", "-n", ns)
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(ContainSubstring("Dag Steps:"))
		Expect(out).To(ContainSubstring("Progress:"))
		Expect(out).To(ContainSubstring("Step c (" + tc + ") attempt 1/3 failed, to be retried: card declined"))
	})

	It("waits for the WorkflowRegistry declaring its type's steps to be mirrored before recording the run", func() {
		dag := base + ".late.v1"
		register(dag, dagStep("a", base+".a.v1"))
		Eventually(func() bool {
			reg := getRegistry(ns, "dags")
			return reg.Status.ObservedGeneration == reg.Generation
		}).Should(BeTrue())
		// Make the registry look not mirrored yet (its controller looks at
		// spec changes only) and its type not registered: only a first
		// registration is awaited.
		reg := getRegistry(ns, "dags")
		patch := client.MergeFrom(reg.DeepCopy())
		reg.Status.ObservedGeneration = 0
		Expect(k8sClient.Status().Patch(ctx, reg, patch)).To(Succeed())
		_, err := pool.Exec(ctx, "delete from workflow.workflow_registry where workflow_name = $1", dag)
		Expect(err).NotTo(HaveOccurred())

		Expect(k8sClient.Create(ctx, newRun(ns, "late", dag, nil))).To(Succeed())
		Eventually(func(g Gomega) {
			got := getRun(ns, "late")()
			acc := condition(got.Status.Conditions, workflowv1alpha1.ConditionAccepted)
			g.Expect(acc).NotTo(BeNil())
			g.Expect(acc.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(acc.Reason).To(Equal(workflowv1alpha1.ReasonAwaitingRegistration))
			g.Expect(acc.Message).To(Equal("workflow type " + dag + " is declared with steps by WorkflowRegistry " + ns +
				"/dags, which is not registered yet; the run is recorded once it is"))
		}).Should(Succeed())
		Consistently(func() string { return getRun(ns, "late")().Status.RunID }, 2*time.Second).Should(BeEmpty())

		reg = getRegistry(ns, "dags")
		patch = client.MergeFrom(reg.DeepCopy())
		reg.Spec.Workflows[0].Description = "now mirrored"
		Expect(k8sClient.Patch(ctx, reg, patch)).To(Succeed())
		Eventually(phase(ns, "late")).Should(Equal(workflowv1alpha1.PhaseRunning))
		Eventually(stepPhases(ns, "late")).Should(Equal("a=Pending"))
		Expect(condition(getRun(ns, "late")().Status.Conditions, workflowv1alpha1.ConditionAccepted).Status).To(Equal(metav1.ConditionTrue))
	})

	It("fails a DAG run at its deadline: its steps end or are skipped, the Event says why", func() {
		dag := base + ".slow.v1"
		register(dag, dagStep("a", base+".a.v1"), dagStep("b", base+".b.v1", "a"))
		wfr := newRun(ns, "slow", dag, nil)
		wfr.Spec.Deadline = &metav1.Duration{Duration: 2 * time.Second}
		Expect(k8sClient.Create(ctx, wfr)).To(Succeed())
		Eventually(phase(ns, "slow")).Should(Equal(workflowv1alpha1.PhaseFailed))
		// The step has the run's deadline too: whichever the database
		// expires first fails the run.
		Eventually(stepPhases(ns, "slow")).Should(MatchRegexp(`^a=(Cancelled|Failed) b=Skipped$`))
		Expect(getRun(ns, "slow")().Status.LastError).To(ContainSubstring("deadline exceeded"))
		Eventually(func() []string { return eventNotes(ns, "slow", workflowv1alpha1.ReasonFailed) }).Should(ConsistOf(
			MatchRegexp(`^Failed for good: (deadline exceeded at \S+Z while its steps ran|step "a" \(\S+\) failed: deadline exceeded)$`)))
	})

	It("fans a step out over a list and shows how many of its elements ended", func() {
		dag, tl, te := base+".each.v1", base+".list.v1", base+".el.v1"
		each := dagStep("resize", te, "list")
		each.ForEach = "$.steps.list.result.ids"
		register(dag, dagStep("list", tl), each)
		Expect(k8sClient.Create(ctx, newRun(ns, "fan", dag, nil))).To(Succeed())
		runIDOf(ns, "fan")
		cl := claimManual(ns, tl, 1)[0]
		_, err := eng.CompleteRuns(ctx, manualWorker, []engine.Completion{{LeaseRef: cl.Ref(), Result: json.RawMessage(`{"ids": [7, 8, 9]}`)}})
		Expect(err).NotTo(HaveOccurred())
		els := claimManual(ns, te, 3)
		complete(els[0])
		Eventually(func(g Gomega) {
			s := dagStepStatus(getRun(ns, "fan")(), "resize")
			g.Expect(s.Phase).To(Equal(workflowv1alpha1.StepRunning))
			g.Expect(s.Elements).To(Equal("1/3"))
		}).Should(Succeed())
		complete(els[1], els[2])
		Eventually(phase(ns, "fan")).Should(Equal(workflowv1alpha1.PhaseSucceeded))
		s := dagStepStatus(getRun(ns, "fan")(), "resize")
		Expect(s.Phase).To(Equal(workflowv1alpha1.StepSucceeded))
		Expect(s.Elements).To(Equal("3/3"))
		var res struct {
			Steps map[string]json.RawMessage `json:"steps"`
		}
		Expect(json.Unmarshal(getRun(ns, "fan")().Status.Result.Raw, &res)).To(Succeed())
		var resized []json.RawMessage
		Expect(json.Unmarshal(res.Steps["resize"], &resized)).To(Succeed())
		Expect(resized).To(HaveLen(3))
	})

	It("skips the branch whose condition does not hold and says so", func() {
		dag, tc, ty, tn := base+".when.v1", base+".check.v1", base+".yes.v1", base+".no.v1"
		yes := dagStep("yes", ty, "check")
		yes.When = "$.steps.check.result.ok == true"
		no := dagStep("no", tn, "check")
		no.When = "$.steps.check.result.ok == false"
		register(dag, dagStep("check", tc), yes, no)
		Expect(k8sClient.Create(ctx, newRun(ns, "branch", dag, nil))).To(Succeed())
		runIDOf(ns, "branch")
		cc := claimManual(ns, tc, 1)[0]
		_, err := eng.CompleteRuns(ctx, manualWorker, []engine.Completion{{LeaseRef: cc.Ref(), Result: json.RawMessage(`{"ok": false}`)}})
		Expect(err).NotTo(HaveOccurred())
		Eventually(stepPhases(ns, "branch")).Should(Equal("check=Succeeded yes=Skipped no=Pending"))
		Expect(dagStepStatus(getRun(ns, "branch")(), "yes").Error).To(Equal("skipped: its condition (when) did not hold"))
		complete(claimManual(ns, tn, 1)[0])
		Eventually(phase(ns, "branch")).Should(Equal(workflowv1alpha1.PhaseSucceeded))
		fin := condition(getRun(ns, "branch")().Status.Conditions, workflowv1alpha1.ConditionFinished)
		Expect(fin.Message).To(Equal("2 of 3 steps succeeded; skipped by their conditions: yes"))
		Eventually(func() []string { return stepNotes(ns, "branch", workflowv1alpha1.ReasonStepsSkipped) }).Should(Equal([]string{
			"Step yes (" + ty + ") was skipped: its condition (when) did not hold"}))
	})

	It("runs the final step after a step failed, shows it, and ends Failed once it finished", func() {
		dag, ta, tf := base+".final.v1", base+".a.v1", base+".f.v1"
		f := dagStep("report", tf)
		f.Final = true
		register(dag, dagStep("a", ta), f)
		Expect(k8sClient.Create(ctx, newRun(ns, "fin", dag, map[string]any{"order": "o-9"}))).To(Succeed())
		runIDOf(ns, "fin")
		failManual(claimManual(ns, ta, 1)[0], "out of stock", false)

		Eventually(stepPhases(ns, "fin")).Should(Equal("a=Failed report=Pending"))
		Expect(getRun(ns, "fin")().Status.Phase).To(Equal(workflowv1alpha1.PhaseRunning))
		cf := claimManual(ns, tf, 1)[0]
		var in struct {
			Order   string         `json:"order"`
			Outcome map[string]any `json:"outcome"`
		}
		Expect(json.Unmarshal(cf.Payload, &in)).To(Succeed())
		Expect(in.Order).To(Equal("o-9"))
		Expect(in.Outcome["status"]).To(Equal("failed"))
		Expect(in.Outcome["step"]).To(Equal("a"))
		complete(cf)

		Eventually(phase(ns, "fin")).Should(Equal(workflowv1alpha1.PhaseFailed))
		Eventually(stepPhases(ns, "fin")).Should(Equal("a=Failed report=Succeeded"))
		Expect(getRun(ns, "fin")().Status.LastError).To(Equal(`step "a" (` + ta + `) failed: out of stock`))
	})

	It("shows the workflow Failed when a step fails for good: running steps are cancelled, unstarted ones skipped", func() {
		dag, ta, tb, tc, te := base+".chain.v1", base+".a.v1", base+".b.v1", base+".c.v1", base+".e.v1"
		register(dag, dagStep("a", ta), dagStep("b", tb, "a"), dagStep("c", tc, "b"), dagStep("e", te))
		Expect(k8sClient.Create(ctx, newRun(ns, "chain", dag, nil))).To(Succeed())
		runIDOf(ns, "chain")
		claimManual(ns, te, 1)
		failManual(claimManual(ns, ta, 1)[0], "out of stock", false)

		Eventually(phase(ns, "chain")).Should(Equal(workflowv1alpha1.PhaseFailed))
		Eventually(stepPhases(ns, "chain")).Should(Equal("a=Failed b=Skipped c=Skipped e=Cancelled"))
		got := getRun(ns, "chain")()
		Expect(got.Status.Progress).To(Equal("0/4"))
		failure := `step "a" (` + ta + `) failed: out of stock`
		Expect(got.Status.LastError).To(Equal(failure))
		a := dagStepStatus(got, "a")
		Expect(a.Error).To(Equal("out of stock"))
		Expect(a.Attempts).To(Equal("1/3"))
		Expect(dagStepStatus(got, "b").RunID).To(BeEmpty())
		fin := condition(got.Status.Conditions, workflowv1alpha1.ConditionFinished)
		Expect(fin.Reason).To(Equal(workflowv1alpha1.ReasonFailed))
		Expect(fin.Message).To(Equal("failed after 0 of 4 steps succeeded: " + failure))

		Eventually(func() []string { return eventNotes(ns, "chain", workflowv1alpha1.ReasonFailed) }).Should(Equal([]string{
			"Failed for good: " + failure}))
		Expect(stepNotes(ns, "chain", workflowv1alpha1.ReasonStepFailed)).To(Equal([]string{
			"Step a (" + ta + ") failed for good on attempt 1/3: out of stock"}))
		Expect(eventNotes(ns, "chain", workflowv1alpha1.ReasonStepsSkipped)).To(Equal([]string{
			"Skipped 2 step(s) that never started, the workflow having ended: b, c"}))
		Expect(stepNotes(ns, "chain", workflowv1alpha1.ReasonStepCancelled)).To(Equal([]string{
			"Step e (" + te + ") was cancelled"}))
	})
})
