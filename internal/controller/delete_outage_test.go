package controller_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/controller"
	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// errUnreachable is what a call to a database that is down returns.
var errUnreachable = errors.New("failed to connect to `host=127.0.0.1 port=1`: dial error: connect: connection refused")

// outageInbox is the suite's engine, or, while down, an inbox whose every
// call fails as with the database unreachable.
type outageInbox struct {
	controller.Inbox
	down atomic.Bool
}

func (o *outageInbox) GetRun(ctx context.Context, id string) (engine.Run, error) {
	if o.down.Load() {
		return engine.Run{}, errUnreachable
	}
	return o.Inbox.GetRun(ctx, id)
}

func (o *outageInbox) FindRunByIdempotencyKey(ctx context.Context, key string) (string, error) {
	if o.down.Load() {
		return "", errUnreachable
	}
	return o.Inbox.FindRunByIdempotencyKey(ctx, key)
}

func (o *outageInbox) RetryRun(ctx context.Context, p engine.RetryParams) error {
	if o.down.Load() {
		return errUnreachable
	}
	return o.Inbox.RetryRun(ctx, p)
}

func (o *outageInbox) CancelRunAs(ctx context.Context, id, by string) (bool, error) {
	if o.down.Load() {
		return false, errUnreachable
	}
	return o.Inbox.CancelRunAs(ctx, id, by)
}

func (o *outageInbox) ListRegistryEntriesByOwner(ctx context.Context, ns, name string) ([]engine.RegistryEntry, error) {
	if o.down.Load() {
		return nil, errUnreachable
	}
	return o.Inbox.ListRegistryEntriesByOwner(ctx, ns, name)
}

func (o *outageInbox) DeleteRegistryEntry(ctx context.Context, name, ns, owner string) (bool, error) {
	if o.down.Load() {
		return false, errUnreachable
	}
	return o.Inbox.DeleteRegistryEntry(ctx, name, ns, owner)
}

// recordedEvent is one Event a reconciler recorded.
type recordedEvent struct{ Type, Reason, Note string }

// eventLog records the Events of a reconciler.
type eventLog struct {
	mu     sync.Mutex
	events []recordedEvent
}

func (l *eventLog) Eventf(_ runtime.Object, _ runtime.Object, eventtype, reason, _, note string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, recordedEvent{eventtype, reason, fmt.Sprintf(note, args...)})
}

func (l *eventLog) AnnotatedEventf(o runtime.Object, r runtime.Object, _ map[string]string, eventtype, reason, action, note string, args ...any) {
	l.Eventf(o, r, eventtype, reason, action, note, args...)
}

func (l *eventLog) withReason(reason string) []recordedEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []recordedEvent
	for _, e := range l.events {
		if e.Reason == reason {
			out = append(out, e)
		}
	}
	return out
}

// Deleting a WorkflowRun or WorkflowRegistry while the
// database is down kept the object Terminating for as long as the outage
// lasted, with nothing saying why. The deletion now retries, sets the
// Deleting condition (reason InboxUnreachable) and a Warning Event, and
// after the deletion grace period removes the finalizer anyway, saying
// what was left in the inbox.
var _ = Describe("Deletion while the inbox is unreachable", func() {
	const grace = 10 * time.Second
	var (
		ns    string
		inbox *outageInbox
		clk   *clocktesting.FakePassiveClock
		evs   *eventLog
	)
	BeforeEach(func() {
		ns = newNamespace()
		inbox = &outageInbox{Inbox: eng}
		clk = clocktesting.NewFakePassiveClock(time.Now())
		evs = &eventLog{}
	})

	expectDeletingCondition := func(conds []metav1.Condition) {
		GinkgoHelper()
		c := condition(conds, workflowv1alpha1.ConditionDeleting)
		Expect(c).NotTo(BeNil())
		Expect(c.Status).To(Equal(metav1.ConditionTrue))
		Expect(c.Reason).To(Equal(workflowv1alpha1.ReasonInboxUnreachable))
		Expect(c.Message).To(ContainSubstring("connection refused"))
		Expect(len(c.Message)).To(BeNumerically("<=", controller.MaxConditionMessageBytes))
		warn := evs.withReason(workflowv1alpha1.ReasonInboxUnreachable)
		Expect(warn).To(HaveLen(1))
		Expect(warn[0].Type).To(Equal(corev1.EventTypeWarning))
	}

	// deletedRun returns a reconciler and the WorkflowRun it mirrored into
	// the inbox, deleted while the inbox is down and waiting for it.
	deletedRun := func() (*controller.WorkflowRunReconciler, client.Client, *workflowv1alpha1.WorkflowRun) {
		GinkgoHelper()
		wfr := newRun(ns, "doomed", manualType(), map[string]int{"n": 1})
		wfr.UID = types.UID("uid-" + randomSuffix())
		c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(wfr).
			WithStatusSubresource(&workflowv1alpha1.WorkflowRun{}).Build()
		r := &controller.WorkflowRunReconciler{Client: c, Inbox: inbox, Recorder: evs, Clock: clk, DeletionGracePeriod: grace}
		var got workflowv1alpha1.WorkflowRun
		Eventually(func(g Gomega) {
			_, err := r.Reconcile(ctx, reconcileRequest(ns, "doomed"))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(wfr), &got)).To(Succeed())
			g.Expect(got.Status.RunID).NotTo(BeEmpty())
		}).Should(Succeed())

		inbox.down.Store(true)
		Expect(c.Delete(ctx, &got)).To(Succeed())
		res, err := r.Reconcile(ctx, reconcileRequest(ns, "doomed"))
		Expect(err).NotTo(HaveOccurred())
		Expect(res.RequeueAfter).To(BeNumerically(">", 0))
		Expect(res.RequeueAfter).To(BeNumerically("<=", grace))
		Expect(c.Get(ctx, client.ObjectKeyFromObject(wfr), &got)).To(Succeed())
		expectDeletingCondition(got.Status.Conditions)

		// Still there within the grace period, retrying.
		clk.SetTime(got.DeletionTimestamp.Add(grace - time.Second))
		res, err = r.Reconcile(ctx, reconcileRequest(ns, "doomed"))
		Expect(err).NotTo(HaveOccurred())
		Expect(res.RequeueAfter).To(BeNumerically(">", 0))
		Expect(res.RequeueAfter).To(BeNumerically("<=", time.Second))
		Expect(c.Get(ctx, client.ObjectKeyFromObject(wfr), &got)).To(Succeed())
		Expect(got.Finalizers).To(ContainElement(controller.Finalizer))
		Expect(evs.withReason(workflowv1alpha1.ReasonInboxUnreachable)).To(HaveLen(1), "one Warning per change of the condition")
		return r, c, &got
	}

	It("removes the finalizer of a WorkflowRun after the grace period, leaving its run in the inbox", func() {
		r, c, wfr := deletedRun()
		runID := wfr.Status.RunID

		clk.SetTime(wfr.DeletionTimestamp.Add(grace + time.Second))
		_, err := r.Reconcile(ctx, reconcileRequest(ns, wfr.Name))
		Expect(err).NotTo(HaveOccurred())
		Expect(apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(wfr), wfr))).To(BeTrue())
		gone := evs.withReason(workflowv1alpha1.ReasonDeletedWithoutInbox)
		Expect(gone).To(HaveLen(1))
		Expect(gone[0].Type).To(Equal(corev1.EventTypeWarning))
		Expect(gone[0].Note).To(ContainSubstring("without cancelling the run"))
		Expect(gone[0].Note).To(ContainSubstring(runID))

		// The run was not cancelled: it stays pending in the inbox.
		run, err := eng.GetRun(ctx, runID)
		Expect(err).NotTo(HaveOccurred())
		Expect(run.Status).To(Equal(engine.StatusPending))
		Expect(evs.withReason(workflowv1alpha1.ReasonCancelledOnDelete)).To(BeEmpty())
	})

	It("cancels the run of a WorkflowRun and lets it go when the inbox returns within the grace period", func() {
		r, c, wfr := deletedRun()
		runID := wfr.Status.RunID

		inbox.down.Store(false)
		_, err := r.Reconcile(ctx, reconcileRequest(ns, wfr.Name))
		Expect(err).NotTo(HaveOccurred())
		Expect(apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(wfr), wfr))).To(BeTrue())
		run, err := eng.GetRun(ctx, runID)
		Expect(err).NotTo(HaveOccurred())
		Expect(run.Status).To(Equal(engine.StatusCancelled))
		Expect(evs.withReason(workflowv1alpha1.ReasonCancelledOnDelete)).To(HaveLen(1))
		Expect(evs.withReason(workflowv1alpha1.ReasonDeletedWithoutInbox)).To(BeEmpty())
	})

	// deletedRegistry returns a reconciler and the WorkflowRegistry whose
	// workflow it registered, deleted while the inbox is down.
	deletedRegistry := func(name string) (*controller.WorkflowRegistryReconciler, client.Client, *workflowv1alpha1.WorkflowRegistry) {
		GinkgoHelper()
		reg := &workflowv1alpha1.WorkflowRegistry{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "doomed", UID: types.UID("uid-" + randomSuffix())},
			Spec: workflowv1alpha1.WorkflowRegistrySpec{Workflows: []workflowv1alpha1.WorkflowDefinition{
				{Name: name, Runtime: workflowv1alpha1.RuntimeGo},
			}},
		}
		c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(reg).
			WithStatusSubresource(&workflowv1alpha1.WorkflowRegistry{}).Build()
		r := &controller.WorkflowRegistryReconciler{Client: c, Inbox: inbox, Recorder: evs, Clock: clk, DeletionGracePeriod: grace}
		_, err := r.Reconcile(ctx, reconcileRequest(ns, "doomed"))
		Expect(err).NotTo(HaveOccurred())
		_, err = eng.GetRegistryEntry(ctx, ns, name)
		Expect(err).NotTo(HaveOccurred())

		var got workflowv1alpha1.WorkflowRegistry
		Expect(c.Get(ctx, client.ObjectKeyFromObject(reg), &got)).To(Succeed())
		inbox.down.Store(true)
		Expect(c.Delete(ctx, &got)).To(Succeed())
		res, err := r.Reconcile(ctx, reconcileRequest(ns, "doomed"))
		Expect(err).NotTo(HaveOccurred())
		Expect(res.RequeueAfter).To(BeNumerically(">", 0))
		Expect(c.Get(ctx, client.ObjectKeyFromObject(reg), &got)).To(Succeed())
		expectDeletingCondition(got.Status.Conditions)

		clk.SetTime(got.DeletionTimestamp.Add(grace - time.Second))
		_, err = r.Reconcile(ctx, reconcileRequest(ns, "doomed"))
		Expect(err).NotTo(HaveOccurred())
		Expect(c.Get(ctx, client.ObjectKeyFromObject(reg), &got)).To(Succeed())
		Expect(got.Finalizers).To(ContainElement(controller.Finalizer))
		return r, c, &got
	}

	It("removes the finalizer of a WorkflowRegistry after the grace period, leaving its rows in the inbox", func() {
		name := "outage" + randomSuffix() + ".a.v1"
		r, c, reg := deletedRegistry(name)

		clk.SetTime(reg.DeletionTimestamp.Add(grace + time.Second))
		_, err := r.Reconcile(ctx, reconcileRequest(ns, reg.Name))
		Expect(err).NotTo(HaveOccurred())
		Expect(apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(reg), reg))).To(BeTrue())
		gone := evs.withReason(workflowv1alpha1.ReasonDeletedWithoutInbox)
		Expect(gone).To(HaveLen(1))
		Expect(gone[0].Type).To(Equal(corev1.EventTypeWarning))
		Expect(gone[0].Note).To(ContainSubstring("without unregistering"))

		e, err := eng.GetRegistryEntry(ctx, ns, name)
		Expect(err).NotTo(HaveOccurred())
		Expect(e.OwnerNamespace).To(Equal(ns))
		Expect(e.OwnerName).To(Equal("doomed"))
	})

	It("unregisters the workflows of a WorkflowRegistry and lets it go when the inbox returns within the grace period", func() {
		name := "outage" + randomSuffix() + ".a.v1"
		r, c, reg := deletedRegistry(name)

		inbox.down.Store(false)
		_, err := r.Reconcile(ctx, reconcileRequest(ns, reg.Name))
		Expect(err).NotTo(HaveOccurred())
		Expect(apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(reg), reg))).To(BeTrue())
		_, err = eng.GetRegistryEntry(ctx, ns, name)
		Expect(err).To(MatchError(engine.ErrNotFound))
		Expect(evs.withReason(workflowv1alpha1.ReasonDeletedWithoutInbox)).To(BeEmpty())
	})
})
