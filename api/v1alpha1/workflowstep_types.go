package v1alpha1

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// WorkflowStep is one step of a DAG workflow: a run of Type, started once
// every step of DependsOn succeeded.
//
// The formats are OpenAPI patterns rather than CEL rules: a registry holds up
// to 500 workflows of 100 steps, and a CEL rule on a step is costed 50,000
// times over (a regular expression on the type would exceed the budget).
// +kubebuilder:validation:XValidation:rule="!has(self.dependsOn) || !(self.name in self.dependsOn)",message="a step cannot depend on itself"
// +kubebuilder:validation:XValidation:rule="!has(self.final) || !self.final || !has(self.dependsOn) || size(self.dependsOn) == 0",message="a final step runs after all the others and depends on none"
// +kubebuilder:validation:XValidation:rule="!has(self.final) || !self.final || !has(self.when)",message="a final step always runs; it takes no when"
// +kubebuilder:validation:XValidation:rule="!has(self.final) || !self.final || !has(self.forEach)",message="a final step runs once; it takes no forEach"
// +kubebuilder:validation:XValidation:rule="!has(self.forEachFailure) || has(self.forEach)",message="forEachFailure applies to a step with forEach"
// +kubebuilder:validation:XValidation:rule="!has(self.forEach) || size(self.name) <= 57",message="a step with forEach has a name of at most 57 characters (its runs are named <name>[<index>])"
type WorkflowStep struct {
	// Name is unique within the workflow: 1 to 63 letters, digits, '.', '_'
	// or '-', starting with a letter or digit. It keys the step's result in
	// the workflow's result.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`
	Name string `json:"name"`
	// Type is the workflow type the step runs, such as billing.charge.v1
	// (dot-separated lowercase segments ending in a version). Its workers
	// run it as any other run; it cannot itself be a type with steps.
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9_]+(\.[a-z0-9_]+)*\.v[0-9]+$`
	Type string `json:"type"`
	// DependsOn names the steps of the same workflow that must succeed
	// before this one starts; none starts it with the workflow.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=100
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`
	DependsOn []string `json:"dependsOn,omitempty"`
	// Payload is merged over the top-level keys of the workflow run's
	// payload to make the step's payload: any JSON object.
	// +optional
	// +kubebuilder:validation:Type=object
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:MaxProperties=256
	Payload *apiextensionsv1.JSON `json:"payload,omitempty"`
	// MaxAttempts bounds the attempts of the step's run, 1 to 1000.
	// Defaults to the inbox default (3).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	MaxAttempts *int32 `json:"maxAttempts,omitempty"`
	// RetryPolicy is the backoff of the step's run, as a WorkflowRun's.
	// +optional
	RetryPolicy *StepRetryPolicy `json:"retryPolicy,omitempty"`
	// Final makes this the step that runs after all the others, whatever
	// their outcome (succeeded, a step failed, the workflow cancelled or
	// past its deadline), with the outcome in its payload under "outcome"
	// and the results of the steps that succeeded under "steps". At most
	// one per workflow; it depends on no step and no step depends on it.
	// The workflow ends when it does (a cancelled one ends at once, and the
	// final step runs after it).
	// +optional
	Final bool `json:"final,omitempty"`
	// When is the step's condition, an SQL/JSON path predicate (the
	// language of PostgreSQL's jsonb_path_match, evaluated by the database
	// as the workflow advances) over {"payload": the workflow's payload,
	// "steps": {"<dependency>": {"status": "succeeded" | "skipped",
	// "result": ...}}}, such as $.steps.check.result.score > 10. The step
	// runs only when it holds; otherwise (false, or no boolean) it is
	// Skipped, which counts as done for the steps depending on it (they see
	// its result as null). Checked by the database when the registry is
	// mirrored (condition DefinitionsValid).
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	When string `json:"when,omitempty"`
	// ForEach fans the step out: an SQL/JSON path over the same input as
	// When selecting a list (from the payload, such as $.payload.items, or
	// from a dependency's result, such as $.steps.list.result.ids) of at
	// most 1,000 elements. The step then runs once per element, as runs
	// named <name>[<index>] whose payload is the step's plus "item" and
	// "index", and its result is the list of their results in index order.
	// A path that selects no list, or more than 1,000 elements, fails the
	// workflow with the reason.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	ForEach string `json:"forEach,omitempty"`
	// ForEachFailure is what an element that fails for good does: failStep
	// (the default) fails the step, and the workflow, cancelling the other
	// elements; continue leaves null in its place in the step's result.
	// +optional
	// +kubebuilder:validation:Enum=failStep;continue
	ForEachFailure string `json:"forEachFailure,omitempty"`
	// TypeNamespace runs Type from another namespace's WorkflowRegistry,
	// which must share it with the namespace of the WorkflowRun (its
	// workflow entry lists that namespace in sharedWith). Unset: a type of
	// this registry's namespace. A step whose type is not shared fails the
	// workflow (reason type_not_shared) before the step starts; revoking a
	// share fails the workflows that have not started the step yet.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	TypeNamespace string `json:"typeNamespace,omitempty"`
}

// StepRetryPolicy is a step's own backoff, as a WorkflowRun's RetryPolicy.
// Its durations are short strings, so that their rules fit the CEL budget of
// 50,000 steps; that maxDelay is at least baseDelay is checked by the
// database when the registry is mirrored (condition DefinitionsValid).
type StepRetryPolicy struct {
	// BaseDelay is the delay unit, from 1s to 24h. Defaults to 1m.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+(\\\\.[0-9]*)?(ns|us|ms|s|m|h))+$') && duration(self) >= duration('1s') && duration(self) <= duration('24h')",message="retryPolicy.baseDelay must be a duration such as 30s or 5m, between 1s and 24h"
	BaseDelay *metav1.Duration `json:"baseDelay,omitempty"`
	// MaxDelay caps the delay, from 1s to 168h (7 days).
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+(\\\\.[0-9]*)?(ns|us|ms|s|m|h))+$') && duration(self) >= duration('1s') && duration(self) <= duration('168h')",message="retryPolicy.maxDelay must be a duration such as 30s or 5m, between 1s and 168h"
	MaxDelay *metav1.Duration `json:"maxDelay,omitempty"`
}
