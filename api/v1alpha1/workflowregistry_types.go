package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Runtime is the language a workflow type's workers are written in.
// +kubebuilder:validation:Enum=go;python
type Runtime string

// The supported runtimes.
const (
	RuntimeGo     Runtime = "go"
	RuntimePython Runtime = "python"
)

// WorkflowDefinition registers one workflow type: either run by workers of
// a runtime, or a DAG of steps that the database runs, each step a run of its
// own type.
//
// Admission checks what the CEL cost budget affords for a registry of 500
// workflows of 100 steps each: runtime or steps, unique step names, the
// format of names and types, no step depending on itself. Walking the graph
// does not fit, so the database checks it when the registry is mirrored
// (every dependsOn names a step of the workflow, no cycle, no step of a type
// with steps); a refused definition is reported on the registry's status
// (condition DefinitionsValid, reason InvalidDefinition) and not registered.
// +kubebuilder:validation:XValidation:rule="has(self.runtime) != has(self.steps)",message="a workflow has either a runtime (its workers run it) or steps (the database runs them), not both"
// +kubebuilder:validation:XValidation:rule="!has(self.steps) || (!has(self.concurrency) && !has(self.rateLimit))",message="concurrency and rateLimit apply to types that workers run; set them on the types of the steps"
// +kubebuilder:validation:XValidation:rule="!has(self.steps) || self.steps.filter(s, has(s.final) && s.final).size() <= 1",message="a workflow has at most one final step"
// +kubebuilder:validation:XValidation:rule="!has(self.steps) || self.steps.exists(s, !has(s.final) || !s.final)",message="a workflow needs a step besides its final step"
type WorkflowDefinition struct {
	// Name is the workflow type, such as billing.invoice.v1.
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9_]+(\\\\.[a-z0-9_]+)*\\\\.v[0-9]+$')",message="workflow name must be dot-separated lowercase segments of letters, digits and underscores ending in a version, such as billing.invoice.v1"
	Name string `json:"name"`
	// Runtime is the only runtime whose workers may claim this type. A
	// workflow with steps has none (each step's type has its own).
	// +optional
	Runtime Runtime `json:"runtime,omitempty"`
	// Enabled false keeps runs of this type pending. Defaults to true.
	// +optional
	// +kubebuilder:default=true
	Enabled *bool `json:"enabled,omitempty"`
	// Description says what the workflow does.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Description string `json:"description,omitempty"`
	// Steps make the workflow a DAG run by the database: a run of this type
	// starts each step, as a run of the step's type, once every step it
	// depends on succeeded, and succeeds when all steps did (its result is
	// {"steps": {"<name>": <result>}}), or fails with the first step that
	// failed for good. At most 100 steps, with unique names.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=100
	Steps []WorkflowStep `json:"steps,omitempty"`
	// Concurrency caps how many runs of this type workers hold at once,
	// across every worker: in all, and per concurrency key (a run's
	// spec.concurrencyKey). A run held back waits, spending no attempt.
	// +optional
	Concurrency *ConcurrencyLimit `json:"concurrency,omitempty"`
	// RateLimit caps how many runs of this type start per period, for the
	// whole type or for each concurrency key.
	// +optional
	RateLimit *RateLimit `json:"rateLimit,omitempty"`
	// SharedWith lists namespaces whose WorkflowRuns (and SQL producers)
	// may run this type among this namespace's workers, by naming this
	// namespace as their spec.typeNamespace. The runs stay theirs. Unset:
	// only this namespace runs it. Removing a namespace stops its new
	// runs; runs already recorded go on.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	SharedWith []string `json:"sharedWith,omitempty"`
}

// ConcurrencyLimit caps the runs of a type leased at once.
// +kubebuilder:validation:XValidation:rule="has(self.maxRuns) || has(self.maxRunsPerKey)",message="concurrency sets maxRuns, maxRunsPerKey or both"
type ConcurrencyLimit struct {
	// MaxRuns is the most runs of the type leased at once.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	MaxRuns *int32 `json:"maxRuns,omitempty"`
	// MaxRunsPerKey is the most runs of one concurrency key leased at once
	// (runs without a key are not limited by it).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	MaxRunsPerKey *int32 `json:"maxRunsPerKey,omitempty"`
}

// RateLimit caps how many runs start per period. Periods are windows
// aligned to the Unix epoch (a 1m period is each clock minute): at most
// Starts runs start within each.
type RateLimit struct {
	// Starts is the most runs that start per period.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000
	Starts int32 `json:"starts"`
	// Period is the window, between 1ms and 24h, such as 1s or 1m.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]*)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1ms') && duration(self) <= duration('24h')",message="rateLimit.period must be between 1ms and 24h"
	Period metav1.Duration `json:"period"`
	// PerKey applies the limit to each concurrency key instead of the type.
	// +optional
	PerKey bool `json:"perKey,omitempty"`
}

// ScaleTargetRef names the scalable object of a worker pool, in the
// registry's namespace.
type ScaleTargetRef struct {
	// APIVersion of the target. Defaults to apps/v1.
	// +optional
	// +kubebuilder:default="apps/v1"
	APIVersion string `json:"apiVersion,omitempty"`
	// Kind of the target. Defaults to Deployment.
	// +optional
	// +kubebuilder:default="Deployment"
	Kind string `json:"kind,omitempty"`
	// Name of the target.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// WorkerPool is a scalable set of workers serving some type prefixes; the
// operator owns its replica count.
// +kubebuilder:validation:XValidation:rule="!has(self.minReplicas) || self.minReplicas <= self.maxReplicas",message="minReplicas must not exceed maxReplicas"
type WorkerPool struct {
	// ScaleTargetRef is the Deployment (or other scalable object) to scale.
	ScaleTargetRef ScaleTargetRef `json:"scaleTargetRef"`
	// Runtime of the pool's workers.
	Runtime Runtime `json:"runtime"`
	// TypePrefixes the pool's workers claim (literal prefixes). A prefix
	// belongs to one registry cluster-wide, the oldest that declares it or an
	// overlapping one (billing. overlaps billing.invoice.); a pool with a
	// prefix owned by another registry is not scaled (reason PrefixConflict).
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=253
	TypePrefixes []string `json:"typePrefixes"`
	// MinReplicas is the floor; 0 lets the pool scale to zero. Defaults to 0.
	// +optional
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	MinReplicas *int32 `json:"minReplicas,omitempty"`
	// MaxReplicas is the ceiling.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	MaxReplicas int32 `json:"maxReplicas"`
	// RunsPerReplica is how many runnable or leased runs one replica takes.
	// Defaults to 10.
	// +optional
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=1
	RunsPerReplica *int32 `json:"runsPerReplica,omitempty"`
	// ScaleDownDelay is how long the desired count must stay lower before
	// scaling down. Defaults to 5m.
	// +optional
	// +kubebuilder:default="5m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+(\\\\.[0-9]*)?(ns|us|ms|s|m|h))+$') && duration(self) >= duration('0s') && duration(self) <= duration('24h')",message="scaleDownDelay must be a duration such as 30s or 5m, between 0s and 24h"
	ScaleDownDelay *metav1.Duration `json:"scaleDownDelay,omitempty"`
	// ActivationRuns: a pool at zero stays at zero until at least this many
	// runs are runnable. Defaults to 1.
	// +optional
	// +kubebuilder:validation:Minimum=1
	ActivationRuns *int32 `json:"activationRuns,omitempty"`
}

// WorkflowRegistrySpec declares workflow types and the workers that serve
// them.
// +kubebuilder:validation:XValidation:rule="!has(self.workers) || self.workers.all(w, self.workers.exists_one(x, x.scaleTargetRef.name == w.scaleTargetRef.name))",message="each worker pool must scale a different target"
type WorkflowRegistrySpec struct {
	// Workflows registered by this object. Names are unique within the list
	// and across registries (the first registry to claim a name keeps it).
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=500
	Workflows []WorkflowDefinition `json:"workflows,omitempty"`
	// Workers are the worker pools scaled by queue depth.
	// +optional
	// +kubebuilder:validation:MaxItems=50
	Workers []WorkerPool `json:"workers,omitempty"`
}

// WorkerPoolStatus reports a pool's queue and scale.
type WorkerPoolStatus struct {
	// Name of the scale target.
	Name string `json:"name"`
	// Runnable runs (pending, due, claimable by the pool), counted up to
	// maxReplicas × runsPerReplica (or activationRuns, if higher), the most
	// the pool can use: at that value the queue may hold more.
	Runnable int32 `json:"runnable"`
	// Leased runs of the pool's prefixes, counted up to the same bound.
	Leased int32 `json:"leased"`
	// DesiredReplicas computed from the queue.
	DesiredReplicas int32 `json:"desiredReplicas"`
	// Replicas the target has now.
	Replicas int32 `json:"replicas"`
	// LastScaleTime is when the pool was last scaled.
	// +optional
	LastScaleTime *metav1.Time `json:"lastScaleTime,omitempty"`
	// LastScaleReason says why.
	// +optional
	LastScaleReason string `json:"lastScaleReason,omitempty"`
	// Conditions: Ready (the target exists and is scalable).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// WorkflowRegistryStatus reports what was registered.
type WorkflowRegistryStatus struct {
	// ObservedGeneration is the generation last mirrored.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// RegisteredWorkflows counts the workflows this object owns in the inbox.
	// +optional
	RegisteredWorkflows int32 `json:"registeredWorkflows"`
	// ConflictingWorkflows lists names already owned by another registry.
	// +optional
	ConflictingWorkflows []string `json:"conflictingWorkflows,omitempty"`
	// DefinedWorkflows counts the registered workflows that have steps (DAGs
	// run by the database).
	// +optional
	DefinedWorkflows int32 `json:"definedWorkflows"`
	// InvalidWorkflows lists the workflows whose steps the database refused
	// (the DefinitionsValid condition says why); they were not registered.
	// +optional
	// +kubebuilder:validation:MaxItems=500
	InvalidWorkflows []string `json:"invalidWorkflows,omitempty"`
	// WorkerPools counts the declared worker pools.
	// +optional
	WorkerPools int32 `json:"workerPools"`
	// Inbox names the inbox holding the registry's types and runs:
	// default (the chart's database) or a WorkflowInbox. Workers of its
	// pools connect to that inbox's database, with a login of their own
	// bound to this namespace as a worker (not the manager's, which owns
	// the schema).
	// +optional
	Inbox string `json:"inbox,omitempty"`
	// Workers reports each worker pool.
	// +optional
	Workers []WorkerPoolStatus `json:"workers,omitempty"`
	// Conditions: Ready (every declared workflow is registered) and, for a
	// registry with steps, DefinitionsValid (the database accepted every
	// workflow's steps).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=wfreg,categories=simpleworkflow
// +kubebuilder:printcolumn:name="Workflows",type=integer,JSONPath=`.status.registeredWorkflows`
// +kubebuilder:printcolumn:name="Workers",type=integer,JSONPath=`.status.workerPools`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="DAGs",type=integer,JSONPath=`.status.definedWorkflows`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Inbox",type=string,JSONPath=`.status.inbox`,priority=1

// WorkflowRegistry declares workflow types (runtime or steps, enabled) and
// the worker pools that serve them.
type WorkflowRegistry struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   WorkflowRegistrySpec   `json:"spec,omitempty"`
	Status WorkflowRegistryStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// WorkflowRegistryList is a list of WorkflowRegistries.
type WorkflowRegistryList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []WorkflowRegistry `json:"items"`
}

func init() {
	register(&WorkflowRegistry{}, &WorkflowRegistryList{})
}
