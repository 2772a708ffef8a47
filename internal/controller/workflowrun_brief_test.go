package controller_test

import (
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// runningStatusDelay is the suite's WorkflowRunReconciler.RunningStatusDelay.
const runningStatusDelay = 1500 * time.Millisecond

var _ = Describe("A brief Running phase", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	// phasesOf follows the object's status through a watch until it
	// finishes, and returns every phase it showed, in order.
	phasesOf := func(name string, within time.Duration) []workflowv1alpha1.WorkflowRunPhase {
		wc, err := client.NewWithWatch(cfg, client.Options{Scheme: k8sClient.Scheme()})
		Expect(err).NotTo(HaveOccurred())
		w, err := wc.Watch(ctx, &workflowv1alpha1.WorkflowRunList{}, client.InNamespace(ns),
			client.MatchingFields{"metadata.name": name})
		Expect(err).NotTo(HaveOccurred())
		defer w.Stop()
		var seen []workflowv1alpha1.WorkflowRunPhase
		deadline := time.After(within)
		for {
			select {
			case ev, ok := <-w.ResultChan():
				Expect(ok).To(BeTrue(), "the watch ended; phases so far %v", seen)
				wfr, isRun := ev.Object.(*workflowv1alpha1.WorkflowRun)
				if !isRun || ev.Type == watch.Deleted {
					continue
				}
				if p := wfr.Status.Phase; p != "" && (len(seen) == 0 || seen[len(seen)-1] != p) {
					seen = append(seen, p)
				}
				if wfr.Status.Phase.Finished() {
					return seen
				}
			case <-deadline:
				Fail(fmt.Sprintf("the run did not finish within %s; phases shown: %v", within, seen))
			}
		}
	}

	It("is not shown: a run that ends within half a second of its start shows only its end and one Event", func() {
		// 400 ms: the look that follows the start's announcement (250 ms
		// later) finds the run running, and leaves its status to the next
		// look, which the end's announcement brings well within the
		// suite's runningStatusDelay.
		Expect(k8sClient.Create(ctx, newRun(ns, "brief", "test.pause.v1", map[string]any{"ms": 400}))).To(Succeed())
		Expect(phasesOf("brief", time.Minute)).To(Equal([]workflowv1alpha1.WorkflowRunPhase{workflowv1alpha1.PhaseSucceeded}))
		Eventually(func() []string { return eventReasons(ns, "brief") }).Should(Equal([]string{"Succeeded"}))
		Consistently(func() []string { return eventReasons(ns, "brief") }, time.Second).Should(Equal([]string{"Succeeded"}))
	})

	It("is shown for a run that keeps running, after the delay, with its Started Event", func() {
		start := time.Now()
		Expect(k8sClient.Create(ctx, newRun(ns, "slow", "test.pause.v1", map[string]any{"ms": 8000}))).To(Succeed())
		Eventually(phase(ns, "slow"), 6*time.Second, 50*time.Millisecond).Should(Equal(workflowv1alpha1.PhaseRunning))
		shownAfter := time.Since(start)
		got := getRun(ns, "slow")()
		run, err := eng.GetRun(ctx, got.Status.RunID)
		Expect(err).NotTo(HaveOccurred())
		Expect(run.Status).To(Equal(engine.StatusLeased))
		Expect(got.Status.LeasedBy).To(Equal("suite-worker"))
		Eventually(func() []string { return eventReasons(ns, "slow") }).Should(ContainElement(workflowv1alpha1.ReasonStarted))
		// Held (the delay passed before it was shown), and held no longer than the delay: shown
		// while it still ran, within the 6 s bound above.
		Expect(shownAfter).To(BeNumerically(">=", runningStatusDelay))
		Eventually(phase(ns, "slow"), 15*time.Second).Should(Equal(workflowv1alpha1.PhaseSucceeded))
	})
})
