package kubectlworkflow

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
)

// A write that raced with another one is refused by the API server (the
// patch carries the resourceVersion read) and made again on the run as it
// is then: the concurrent change survives and the decision is taken again.
func TestPatchIsRefusedWhenTheRunChangedAndRetried(t *testing.T) {
	e := newEnv(t)
	e.createRun("contended", "demo.order.v1")
	e.setStatus("contended", func(s *workflowv1alpha1.WorkflowRunStatus) {
		s.Phase = workflowv1alpha1.PhaseWaiting
		s.WaitingFor = &workflowv1alpha1.WaitingFor{Kind: "signal", Signal: "approve"}
	})
	dc, err := dynamic.NewForConfig(e.cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	rs := &runs{dc: dc, ns: e.ns}

	var seen []string
	err = sendSignal(e.ctx, rs, "contended", "", nil, func(run *workflowv1alpha1.WorkflowRun) (string, error) {
		seen = append(seen, run.Status.WaitingFor.Signal)
		if len(seen) == 1 {
			// Between our read and our write, the run moves on to wait for
			// another signal, and someone else appends one.
			e.setStatus("contended", func(s *workflowv1alpha1.WorkflowRunStatus) { s.WaitingFor.Signal = "ship" })
			if _, err := rs.patch(e.ctx, "contended", func(*unstructured.Unstructured, *workflowv1alpha1.WorkflowRun) ([]patchOp, error) {
				return []patchOp{{Op: "add", Path: "/spec/signals/-", Value: map[string]any{"name": "other"}}}, nil
			}); err != nil {
				t.Fatal(err)
			}
		}
		return run.Status.WaitingFor.Signal, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 2 || seen[0] != "approve" || seen[1] != "ship" {
		t.Errorf("want the run read twice, waiting for approve then ship; saw %v", seen)
	}
	wantSignals(t, e.run("contended"), "other=<none>", "ship=<none>")
}
