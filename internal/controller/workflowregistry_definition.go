package controller

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// maxEventNoteBytes bounds the note of an Event listing several messages
// (the API server refuses a note above 1,024 bytes).
const maxEventNoteBytes = 1000

// registryEntry is the inbox's registry row for one declared workflow of
// reg: a runtime, or the steps the database runs.
func registryEntry(reg *workflowv1alpha1.WorkflowRegistry, wf workflowv1alpha1.WorkflowDefinition) engine.RegistryEntry {
	return engine.RegistryEntry{
		WorkflowName: wf.Name, Runtime: string(wf.Runtime), Enabled: wf.Enabled == nil || *wf.Enabled,
		Description: wf.Description, OwnerNamespace: reg.Namespace, OwnerName: reg.Name,
		Definition: definitionOf(wf), Flow: flowLimitsOf(wf), SharedWith: wf.SharedWith,
	}
}

// flowLimitsOf converts a workflow's concurrency and rate limits into the
// registry's flow limits.
func flowLimitsOf(wf workflowv1alpha1.WorkflowDefinition) engine.FlowLimits {
	var f engine.FlowLimits
	if c := wf.Concurrency; c != nil {
		f.MaxLeased, f.MaxLeasedPerKey = c.MaxRuns, c.MaxRunsPerKey
	}
	if r := wf.RateLimit; r != nil {
		starts := r.Starts
		f.RateLimit, f.RatePeriod, f.RatePerKey = &starts, r.Period.Duration, r.PerKey
	}
	return f
}

// definitionOf converts a workflow's steps into the definition the database
// runs, or nil for a workflow without steps. Retry delays become
// milliseconds; the payload is passed through as it was written.
func definitionOf(wf workflowv1alpha1.WorkflowDefinition) *engine.DAGDefinition {
	if len(wf.Steps) == 0 {
		return nil
	}
	def := &engine.DAGDefinition{Steps: make([]engine.DAGStepDefinition, len(wf.Steps))}
	for i, s := range wf.Steps {
		d := engine.DAGStepDefinition{Name: s.Name, Type: s.Type, DependsOn: s.DependsOn, Final: s.Final, When: s.When,
			ForEach: s.ForEach, ForEachFailure: s.ForEachFailure, TypeNamespace: s.TypeNamespace}
		if s.Payload != nil && len(s.Payload.Raw) > 0 {
			d.Payload = json.RawMessage(s.Payload.Raw)
		}
		if s.MaxAttempts != nil {
			d.MaxAttempts = int(*s.MaxAttempts)
		}
		if rp := s.RetryPolicy; rp != nil {
			if rp.BaseDelay != nil {
				d.RetryBaseDelayMs = rp.BaseDelay.Milliseconds()
			}
			if rp.MaxDelay != nil {
				d.RetryMaxDelayMs = rp.MaxDelay.Milliseconds()
			}
		}
		def.Steps[i] = d
	}
	return def
}

// refusalMessage says why the database refused a workflow's registration,
// in its own words ("invalid definition of order.fulfil.v1: cycle: a → b →
// a (each step depends on the next); order.fulfil.v1 was not registered"),
// and what stays in force.
func refusalMessage(name string, err error, registeredBefore bool) string {
	why := err.Error()
	if _, after, ok := strings.Cut(why, engine.ErrInvalid.Error()+": "); ok {
		why = after
	}
	if !strings.Contains(why, name) {
		why = "workflow " + name + ": " + why
	}
	tail := "; " + name + " was not registered"
	if registeredBefore {
		tail += " (the definition registered before stays in force)"
	}
	// A cycle of 100 steps is a long message: keep each within what one
	// Event note holds.
	return truncate(why, maxEventNoteBytes-len(tail)) + tail
}

// isRefusal reports whether an upsert error is the database refusing the
// entry as invalid, which only a change of the spec can fix.
func isRefusal(err error) bool { return errors.Is(err, engine.ErrInvalid) }

// definitionsCondition is the DefinitionsValid condition of a registry that
// declares steps: true when the database accepted every workflow's steps,
// false with the refusals otherwise.
func definitionsCondition(gen int64, accepted int, refusals []string) metav1.Condition {
	c := metav1.Condition{Type: workflowv1alpha1.ConditionDefinitionsValid, Status: metav1.ConditionTrue, Reason: workflowv1alpha1.ReasonAccepted,
		Message: fmt.Sprintf("the database accepted the steps of %d workflow(s)", accepted), ObservedGeneration: gen}
	if len(refusals) > 0 {
		c.Status, c.Reason = metav1.ConditionFalse, workflowv1alpha1.ReasonInvalidDefinition
		c.Message = listWithinBytes(refusals, "; ", MaxConditionMessageBytes)
	}
	return c
}
