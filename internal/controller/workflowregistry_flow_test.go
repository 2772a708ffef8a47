package controller_test

import (
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// Flow limits declared on a WorkflowRegistry and concurrency keys on
// WorkflowRuns: refused at admission when malformed, mirrored into the
// inbox, and a run held back shown as waiting on its limit.
var _ = Describe("Flow limits from Kubernetes", func() {
	var ns, prefix string
	BeforeEach(func() {
		ns = newNamespace()
		prefix = "flow" + randomSuffix()
	})

	flowRegistry := func(name string, wf workflowv1alpha1.WorkflowDefinition) *workflowv1alpha1.WorkflowRegistry {
		return &workflowv1alpha1.WorkflowRegistry{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec:       workflowv1alpha1.WorkflowRegistrySpec{Workflows: []workflowv1alpha1.WorkflowDefinition{wf}},
		}
	}
	period := func(d time.Duration) metav1.Duration { return metav1.Duration{Duration: d} }

	DescribeTable("admission refuses malformed limits",
		func(wf workflowv1alpha1.WorkflowDefinition, message string) {
			err := k8sClient.Create(ctx, flowRegistry("bad", wf))
			Expect(err).To(HaveOccurred())
			Expect(err.Error()).To(ContainSubstring(message))
		},
		Entry("an empty concurrency", workflowv1alpha1.WorkflowDefinition{
			Name: "flow.bad.v1", Runtime: "go", Concurrency: &workflowv1alpha1.ConcurrencyLimit{},
		}, "concurrency sets maxRuns, maxRunsPerKey or both"),
		Entry("maxRuns 0", workflowv1alpha1.WorkflowDefinition{
			Name: "flow.bad.v1", Runtime: "go", Concurrency: &workflowv1alpha1.ConcurrencyLimit{MaxRuns: int32p(0)},
		}, "spec.workflows[0].concurrency.maxRuns"),
		Entry("maxRunsPerKey above 100000", workflowv1alpha1.WorkflowDefinition{
			Name: "flow.bad.v1", Runtime: "go", Concurrency: &workflowv1alpha1.ConcurrencyLimit{MaxRunsPerKey: int32p(100001)},
		}, "spec.workflows[0].concurrency.maxRunsPerKey"),
		Entry("a period of 25h", workflowv1alpha1.WorkflowDefinition{
			Name: "flow.bad.v1", Runtime: "go", RateLimit: &workflowv1alpha1.RateLimit{Starts: 5, Period: period(25 * time.Hour)},
		}, "rateLimit.period must be between 1ms and 24h"),
		Entry("a period under 1ms", workflowv1alpha1.WorkflowDefinition{
			Name: "flow.bad.v1", Runtime: "go", RateLimit: &workflowv1alpha1.RateLimit{Starts: 5, Period: period(time.Microsecond)},
		}, "rateLimit.period must be between 1ms and 24h"),
		Entry("no starts", workflowv1alpha1.WorkflowDefinition{
			Name: "flow.bad.v1", Runtime: "go", RateLimit: &workflowv1alpha1.RateLimit{Period: period(time.Second)},
		}, "spec.workflows[0].rateLimit.starts"),
		Entry("limits on a workflow with steps", workflowv1alpha1.WorkflowDefinition{
			Name: "flow.bad.v1", Steps: []workflowv1alpha1.WorkflowStep{dagStep("a", "flow.step.v1")},
			Concurrency: &workflowv1alpha1.ConcurrencyLimit{MaxRuns: int32p(1)},
		}, "concurrency and rateLimit apply to types that workers run"),
	)

	DescribeTable("admission refuses malformed concurrency keys",
		func(key, message string) {
			wfr := newRun(ns, "bad-key", "flow.key.v1", nil)
			wfr.Spec.ConcurrencyKey = key
			err := k8sClient.Create(ctx, wfr)
			Expect(err).To(HaveOccurred())
			Expect(err.Error()).To(ContainSubstring(message))
		},
		Entry("256 characters", strings.Repeat("k", 256), "spec.concurrencyKey"),
		Entry("a NUL", "cust\x00omer", "spec.concurrencyKey must not contain the NUL character"),
	)

	It("mirrors the limits, gives runs their key, and shows a run held back as waiting on its limit", func() {
		typ := prefix + ".charge.v1"
		Expect(k8sClient.Create(ctx, flowRegistry("payments", workflowv1alpha1.WorkflowDefinition{
			Name: typ, Runtime: "go",
			Concurrency: &workflowv1alpha1.ConcurrencyLimit{MaxRunsPerKey: int32p(1)},
			RateLimit:   &workflowv1alpha1.RateLimit{Starts: 50, Period: period(time.Second)},
		}))).To(Succeed())
		Eventually(func(g Gomega) {
			e, err := eng.GetRegistryEntry(ctx, ns, typ)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(e.Flow.MaxLeasedPerKey).To(Equal(int32p(1)))
			g.Expect(e.Flow.RateLimit).To(Equal(int32p(50)))
			g.Expect(e.Flow.RatePeriod).To(Equal(time.Second))
			g.Expect(e.Flow.MaxLeased).To(BeNil())
		}).Should(Succeed())

		for _, name := range []string{"first", "second"} {
			wfr := newRun(ns, name, typ, nil)
			wfr.Spec.ConcurrencyKey = "customer-42"
			Expect(k8sClient.Create(ctx, wfr)).To(Succeed())
			Eventually(func() string { return getRun(ns, name)().Status.RunID }).ShouldNot(BeEmpty())
		}
		first, err := eng.GetRun(ctx, getRun(ns, "first")().Status.RunID)
		Expect(err).NotTo(HaveOccurred())
		Expect(first.ConcurrencyKey).To(Equal("customer-42"))

		claimed, err := eng.ClaimRuns(ctx, engine.ClaimParams{
			WorkerID: "flow-spec", TypePrefixes: []string{prefix + "."}, Runtime: "go", Limit: 10,
			LeaseDuration: time.Minute, Namespace: ns,
		})
		Expect(err).NotTo(HaveOccurred())
		Expect(claimed).To(HaveLen(1), "one run of the key at a time")
		held := "second"
		if claimed[0].ID == getRun(ns, "second")().Status.RunID {
			held = "first"
		}
		Eventually(func(g Gomega) {
			wfr := getRun(ns, held)()
			g.Expect(wfr.Status.Phase).To(Equal(workflowv1alpha1.PhaseWaiting))
			g.Expect(wfr.Status.WaitingFor).NotTo(BeNil())
			g.Expect(wfr.Status.WaitingFor.Kind).To(Equal("limit"))
		}).Should(Succeed())

		// The key is immutable.
		wfr := getRun(ns, held)()
		wfr.Spec.ConcurrencyKey = "another"
		Expect(k8sClient.Update(ctx, wfr)).To(MatchError(ContainSubstring("spec.concurrencyKey is immutable")))

		// The held run goes once the first finishes.
		_, err = eng.CompleteRuns(ctx, "flow-spec", []engine.Completion{{LeaseRef: engine.LeaseRef{
			ID: claimed[0].ID, Token: claimed[0].LeaseToken, Attempt: claimed[0].Attempt}}})
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() workflowv1alpha1.WorkflowRunPhase { return getRun(ns, held)().Status.Phase }).
			Should(Equal(workflowv1alpha1.PhasePending))
	})
})
