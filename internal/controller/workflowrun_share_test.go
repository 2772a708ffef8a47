package controller_test

import (
	"encoding/json"
	"regexp"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// Team A (namespace A) runs a type among its workers; team B (namespace B)
// may record runs of it only when A's WorkflowRegistry shares it with B
// (sharedWith). Such a run stays B's (its status is written to B's
// WorkflowRun) and executes among A's workers; nothing else of B's reaches
// them.
var _ = Describe("WorkflowRun of a type another namespace shares", func() {
	var nsA, nsB, prefix, typ string
	BeforeEach(func() {
		nsA, nsB = newNamespace(), newNamespace()
		prefix = "share" + randomSuffix() + "."
		typ = prefix + "report.v1"
	})

	// registerInA declares typ in A's registry "team", shared with the
	// given namespaces, and waits for the entry.
	registerInA := func(sharedWith ...string) {
		ownCreate(nsA, "team", workflowv1alpha1.WorkflowRegistrySpec{Workflows: []workflowv1alpha1.WorkflowDefinition{
			{Name: typ, Runtime: workflowv1alpha1.RuntimeGo, SharedWith: sharedWith},
		}})
		Eventually(ownEntryIn(nsA, typ)).Should(And(Not(BeNil()), HaveField("SharedWith", ConsistOf(sharedWith))))
	}
	// newShared is a WorkflowRun in B asking for A's type.
	newShared := func(name string, p any) *workflowv1alpha1.WorkflowRun {
		wfr := newRun(nsB, name, typ, p)
		wfr.Spec.TypeNamespace = nsA
		return wfr
	}
	// claimAs claims runs of the spec's prefix as a worker serving ns.
	claimAs := func(ns, worker string) []engine.ClaimedRun {
		got, err := eng.ClaimRuns(ctx, engine.ClaimParams{
			WorkerID: worker, TypePrefixes: []string{prefix}, Namespace: ns,
			LeaseDuration: time.Minute, Limit: 10,
		})
		Expect(err).NotTo(HaveOccurred())
		return got
	}
	// claimOne waits until the worker serving ns claims a run, and
	// expects it to be the only one.
	claimOne := func(ns, worker string) engine.ClaimedRun {
		var got []engine.ClaimedRun
		EventuallyWithOffset(1, func() int { got = claimAs(ns, worker); return len(got) }).Should(BeNumerically(">", 0))
		ExpectWithOffset(1, got).To(HaveLen(1))
		return got[0]
	}
	complete := func(worker string, c engine.ClaimedRun, result string) {
		done, err := eng.CompleteRuns(ctx, worker, []engine.Completion{{LeaseRef: c.Ref(), Result: json.RawMessage(result)}})
		ExpectWithOffset(1, err).NotTo(HaveOccurred())
		ExpectWithOffset(1, done).To(HaveLen(1))
		ExpectWithOffset(1, done[0].Status).To(Equal(engine.StatusSucceeded))
	}
	accepted := func(name string) {
		EventuallyWithOffset(1, func(g Gomega) {
			got := getRun(nsB, name)()
			g.Expect(got).NotTo(BeNil())
			c := condition(got.Status.Conditions, workflowv1alpha1.ConditionAccepted)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(got.Status.RunID).NotTo(BeEmpty())
		}).Should(Succeed())
	}

	// refusedMessage waits for B's WorkflowRun name to be refused as
	// TypeNotShared, checks that nothing was recorded for it, and returns
	// the condition's message.
	refusedMessage := func(name string) string {
		var msg string
		EventuallyWithOffset(1, func(g Gomega) {
			got := getRun(nsB, name)()
			g.Expect(got).NotTo(BeNil())
			c := condition(got.Status.Conditions, workflowv1alpha1.ConditionAccepted)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(workflowv1alpha1.ReasonTypeNotShared))
			msg = c.Message
		}).Should(Succeed())
		EventuallyWithOffset(1, func(g Gomega) {
			var warnings []string
			for _, e := range eventsFor(nsB, name) {
				if e.Reason == workflowv1alpha1.ReasonTypeNotShared {
					g.Expect(e.Type).To(Equal(corev1.EventTypeWarning))
					warnings = append(warnings, e.Note)
				}
			}
			g.Expect(warnings).To(HaveLen(1))
		}).Should(Succeed())
		got := getRun(nsB, name)()
		ExpectWithOffset(1, got.Status.RunID).To(BeEmpty())
		ExpectWithOffset(1, got.Status.Phase).To(BeEmpty())
		_, err := eng.FindRunByIdempotencyKey(ctx, "k8s-uid:"+string(got.UID))
		ExpectWithOffset(1, err).To(MatchError(engine.ErrNotFound), "no run holds the object's idempotency key")
		return msg
	}

	It("refuses a type that is not shared with the run's namespace, saying the same whether the other namespace has it or not", func() {
		// A has no such type yet.
		Expect(k8sClient.Create(ctx, newShared("before", map[string]any{"n": 1}))).To(Succeed())
		without := refusedMessage("before")
		Expect(without).To(Equal("namespace " + nsA + " does not share workflow type " + typ + " with namespace " + nsB +
			" (a WorkflowRegistry there lists this namespace in the workflow's sharedWith); nothing was recorded"))

		// A declares it, shared with a third namespace but not with B.
		registerInA(newNamespace())
		Expect(k8sClient.Create(ctx, newShared("after", map[string]any{"n": 2}))).To(Succeed())
		Expect(refusedMessage("after")).To(Equal(without), "the message tells B nothing of A's registry")

		// The earlier one stays refused now that A has the type; nothing of
		// either reaches A's workers or B's.
		Consistently(func(g Gomega) {
			for _, name := range []string{"before", "after"} {
				got := getRun(nsB, name)()
				g.Expect(got.Status.RunID).To(BeEmpty())
				g.Expect(condition(got.Status.Conditions, workflowv1alpha1.ConditionAccepted).Reason).To(Equal(workflowv1alpha1.ReasonTypeNotShared))
			}
			g.Expect(claimAs(nsA, "a-worker")).To(BeEmpty())
			g.Expect(claimAs(nsB, "b-worker")).To(BeEmpty())
		}, 2*time.Second, 200*time.Millisecond).Should(Succeed())
		Expect(eventNotes(nsB, "before", workflowv1alpha1.ReasonTypeNotShared)).To(HaveLen(1), "refused once, not again on every look")
	})

	It("records a shared type's run as the producer's, runs it among the owner's workers and reports to the producer", func() {
		registerInA(nsB)
		Expect(k8sClient.Create(ctx, newShared("shared", map[string]any{"invoice": 7}))).To(Succeed())
		accepted("shared")
		wfr := getRun(nsB, "shared")()
		run, err := eng.GetRun(ctx, wfr.Status.RunID)
		Expect(err).NotTo(HaveOccurred())
		Expect(run.Namespace).To(Equal(nsB), "the run is B's")
		Expect(run.TypeNamespace).To(Equal(nsA), "A's workers run it")
		Expect(run.Type).To(Equal(typ))
		Expect(run.Source).To(Equal(&engine.Source{Namespace: nsB, Name: "shared", UID: string(wfr.UID)}))

		// B's workers serve B's types: the run is not theirs to claim.
		Expect(claimAs(nsB, "b-worker")).To(BeEmpty())
		c := claimOne(nsA, "a-worker")
		Expect(c.ID).To(Equal(wfr.Status.RunID))
		Expect(c.Type).To(Equal(typ))
		Expect(string(c.Payload)).To(MatchJSON(`{"invoice": 7}`))
		Eventually(phase(nsB, "shared")).Should(Equal(workflowv1alpha1.PhaseRunning))
		Expect(getRun(nsB, "shared")().Status.LeasedBy).To(Equal("a-worker"))

		complete("a-worker", c, `{"sent": true}`)
		Eventually(phase(nsB, "shared")).Should(Equal(workflowv1alpha1.PhaseSucceeded))
		got := getRun(nsB, "shared")()
		Expect(string(got.Status.Result.Raw)).To(MatchJSON(`{"sent": true}`))
		fin := condition(got.Status.Conditions, workflowv1alpha1.ConditionFinished)
		Expect(fin).NotTo(BeNil())
		Expect(fin.Reason).To(Equal("Succeeded"))
		Expect(eventNotes(nsB, "shared", workflowv1alpha1.ReasonTypeNotShared)).To(BeEmpty())
		out, err := kubectl("get", "wfr", "shared", "-n", nsB, "-o", "wide")
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(MatchRegexp(`(?m)^shared\s+` + regexp.QuoteMeta(typ) + `\s+Succeeded\s.*\sa-worker\s+` +
			got.Status.RunID + `\s+` + nsA + `$`))
	})

	It("keeps B's own type of the same name among B's workers, away from A's", func() {
		registerInA(nsB)
		// B's plain run names the same type, without spec.typeNamespace:
		// B's own type (B declares none, so any B worker may run it).
		Expect(k8sClient.Create(ctx, newRun(nsB, "own", typ, map[string]any{"mine": true}))).To(Succeed())
		accepted("own")
		wfr := getRun(nsB, "own")()
		run, err := eng.GetRun(ctx, wfr.Status.RunID)
		Expect(err).NotTo(HaveOccurred())
		Expect(run.Namespace).To(Equal(nsB))
		Expect(run.TypeNamespace).To(Equal(nsB))

		// And a shared one beside it: A's worker gets that one alone.
		Expect(k8sClient.Create(ctx, newShared("shared", nil))).To(Succeed())
		accepted("shared")
		c := claimOne(nsA, "a-worker")
		Expect(c.ID).To(Equal(getRun(nsB, "shared")().Status.RunID))
		Consistently(func() []engine.ClaimedRun { return claimAs(nsA, "a-worker") }, time.Second, 100*time.Millisecond).
			Should(BeEmpty(), "B's own run never reaches A's workers")
		Expect(phase(nsB, "own")()).To(Equal(workflowv1alpha1.PhasePending))

		// B's worker runs it.
		own := claimOne(nsB, "b-worker")
		Expect(own.ID).To(Equal(wfr.Status.RunID))
		complete("b-worker", own, `{"by": "b"}`)
		Eventually(phase(nsB, "own")).Should(Equal(workflowv1alpha1.PhaseSucceeded))
		Expect(getRun(nsB, "own")().Status.LeasedBy).To(Equal("b-worker"))
	})
})
