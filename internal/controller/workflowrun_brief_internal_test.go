package controller

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/engine"
)

func TestHeldAttemptsHoldEveryLookWithinTheDelayOfTheFirst(t *testing.T) {
	var h heldAttempts
	a, b := types.UID("a"), types.UID("b")
	t0 := time.Unix(1000, 0)
	const delay = 500 * time.Millisecond
	if left, ok := h.hold(a, 1, t0, delay); !ok || left != delay {
		t.Fatalf("the first look at attempt 1: held %v for %s, want held for %s", ok, left, delay)
	}
	// A second look (the start's announcement after the finalizer's
	// update, say) within the hold is held for what remains of it.
	if left, ok := h.hold(a, 1, t0.Add(200*time.Millisecond), delay); !ok || left != 300*time.Millisecond {
		t.Fatalf("a look 200 ms into the hold: held %v for %s, want held for 300ms", ok, left)
	}
	if _, ok := h.hold(a, 1, t0.Add(delay), delay); ok {
		t.Fatal("attempt 1 was held past its delay")
	}
	if _, ok := h.hold(b, 1, t0.Add(delay), delay); !ok {
		t.Fatal("another object's attempt 1 was not held")
	}
	if _, ok := h.hold(a, 2, t0.Add(delay), delay); !ok {
		t.Fatal("attempt 2 was not held")
	}
	h.forget(a)
	if _, ok := h.hold(a, 2, t0.Add(10*delay), delay); !ok {
		t.Fatal("a forgotten object was not held again")
	}
}

func TestHeldAttemptsSweepObjectsGoneUnseen(t *testing.T) {
	var h heldAttempts
	t0 := time.Unix(1000, 0)
	const delay = 500 * time.Millisecond
	h.hold("gone", 1, t0, delay)
	h.hold("kept", 1, t0.Add(heldSweepAfter), delay)
	h.hold("new", 1, t0.Add(2*heldSweepAfter), delay) // the next sweep
	if _, ok := h.m["gone"]; ok {
		t.Fatal("an entry a minute past its hold was kept")
	}
	if _, ok := h.m["kept"]; !ok {
		t.Fatal("an entry within a minute of its hold was swept")
	}
}

func TestBriefRunningOnlyForAPlainRunningAttempt(t *testing.T) {
	leased := engine.Run{ID: "r", Status: engine.StatusLeased, Attempt: 1}
	plain := func() *workflowv1alpha1.WorkflowRun { return &workflowv1alpha1.WorkflowRun{} }
	if !briefRunning(plain(), leased) {
		t.Fatal("a plain leased run was not held")
	}
	cases := map[string]func() (*workflowv1alpha1.WorkflowRun, engine.Run){
		"pending": func() (*workflowv1alpha1.WorkflowRun, engine.Run) {
			r := leased
			r.Status = engine.StatusPending
			return plain(), r
		},
		"already shown running": func() (*workflowv1alpha1.WorkflowRun, engine.Run) {
			w := plain()
			w.Status.Phase = workflowv1alpha1.PhaseRunning
			return w, leased
		},
		"cancel asked": func() (*workflowv1alpha1.WorkflowRun, engine.Run) {
			w := plain()
			w.Spec.Cancel = true
			return w, leased
		},
		"a signal to send": func() (*workflowv1alpha1.WorkflowRun, engine.Run) {
			w := plain()
			w.Spec.Signals = []workflowv1alpha1.WorkflowSignal{{Name: "go"}}
			return w, leased
		},
		"waiting": func() (*workflowv1alpha1.WorkflowRun, engine.Run) {
			r := leased
			r.Wait = &engine.Wait{Kind: engine.StepKindSleep}
			return plain(), r
		},
	}
	for name, c := range cases {
		w, r := c()
		if briefRunning(w, r) {
			t.Errorf("%s: held", name)
		}
	}
}
