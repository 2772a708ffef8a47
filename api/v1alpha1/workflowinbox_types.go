package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// InboxSecretRef names the Secret key holding an inbox's Postgres URL.
type InboxSecretRef struct {
	// Namespace of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="namespace must be a DNS label: lowercase letters, digits and -, starting and ending with a letter or digit"
	Namespace string `json:"namespace"`
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="name must be a DNS subdomain: lowercase letters, digits, - and ."
	Name string `json:"name"`
	// Key of the Secret's data holding the URL.
	// +kubebuilder:default=url
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[-._a-zA-Z0-9]+$')",message="key must be a Secret data key: letters, digits, -, _ and ."
	Key string `json:"key,omitempty"`
}

// WorkflowInboxSpec names an inbox database and the namespaces it serves.
type WorkflowInboxSpec struct {
	// SecretRef names the Secret key holding the inbox's Postgres URL. The
	// manager reads it (and reads it again every 30 seconds, so a rotated
	// password is picked up), migrates the database and serves it.
	SecretRef InboxSecretRef `json:"secretRef"`
	// NamespaceSelector selects the namespaces whose runs, registries and
	// schedules live in this inbox, by the labels of the Namespace. It must
	// name at least one label: an empty selector would take every
	// namespace. A namespace two inboxes select stays with the older
	// inbox; a namespace no inbox selects lives in the default inbox (the
	// chart's database).
	// +kubebuilder:validation:XValidation:rule="(has(self.matchLabels) && size(self.matchLabels) > 0) || (has(self.matchExpressions) && size(self.matchExpressions) > 0)",message="namespaceSelector must name at least one label (matchLabels or matchExpressions): an empty selector would take every namespace"
	NamespaceSelector metav1.LabelSelector `json:"namespaceSelector"`
}

// WorkflowInboxStatus is what the manager observed of an inbox.
type WorkflowInboxStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready (connected and migrated) and NamespacesHeld (a
	// namespace this inbox selects stays, for now, with another inbox).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// SchemaVersion is the version of the workflow schema in the database.
	// +optional
	SchemaVersion int `json:"schemaVersion,omitempty"`
	// Database names the database it connected to, whatever the URL (its
	// cluster's system identifier and its oid): while the inbox serves
	// namespaces, a URL that reaches another database is refused
	// (DatabaseChanged), across restarts too.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Database string `json:"database,omitempty"`
	// Namespaces are the namespaces this inbox serves, sorted.
	// +optional
	// +listType=set
	Namespaces []string `json:"namespaces,omitempty"`
	// NamespaceCount is the number of namespaces served.
	// +optional
	NamespaceCount int `json:"namespaceCount,omitempty"`
	// HeldNamespaces are namespaces this inbox selects that another inbox
	// still serves, because that inbox holds unfinished runs of theirs or
	// an older inbox selects them too; sorted.
	// +optional
	// +listType=set
	HeldNamespaces []string `json:"heldNamespaces,omitempty"`
}

// Condition types of a WorkflowInbox.
const (
	// ConditionInboxReady: whether the manager is connected to the inbox's
	// database and has migrated it.
	//   - True, ReasonConnected.
	//   - False, ReasonSecretNotFound, ReasonSecretKeyMissing,
	//     ReasonUnreachable or ReasonMigrationFailed: the message says why.
	//   - False, ReasonSelectorInvalid: namespaceSelector does not parse;
	//     the inbox keeps the namespaces it serves and takes no other.
	//   - False, ReasonDatabaseTaken: the URL reaches the database of
	//     another inbox (named in the message); it is not served.
	//   - False, ReasonDatabaseChanged: the URL now reaches another
	//     database while the inbox serves namespaces; it keeps serving
	//     them from the database it had.
	ConditionInboxReady = "Ready"
	// ConditionNamespacesHeld: whether a namespace this inbox selects is
	// still served by another inbox.
	//   - True, ReasonUnfinishedRuns: the other inbox holds unfinished runs
	//     of the namespace; it moves once they finish (the message names
	//     the namespaces and counts).
	//   - True, ReasonSelectedByOlderInbox: an older inbox selects the
	//     namespace too and keeps it.
	//   - False, ReasonNoneHeld.
	ConditionNamespacesHeld = "NamespacesHeld"
	// ConditionNamespacesContested: whether a namespace this inbox serves
	// is selected by a newer inbox too (which leaves it here).
	//   - True, ReasonSelectedByNewerInbox: the message names the
	//     namespaces and the inboxes.
	//   - False, ReasonNoneContested.
	ConditionNamespacesContested = "NamespacesContested"
)

// Reasons of a WorkflowInbox's conditions.
const (
	ReasonConnected            = "Connected"
	ReasonSecretNotFound       = "SecretNotFound"
	ReasonSecretKeyMissing     = "SecretKeyMissing"
	ReasonUnreachable          = "Unreachable"
	ReasonMigrationFailed      = "MigrationFailed"
	ReasonSelectorInvalid      = "SelectorInvalid"
	ReasonDatabaseTaken        = "DatabaseTaken"
	ReasonDatabaseChanged      = "DatabaseChanged"
	ReasonUnfinishedRuns       = "UnfinishedRuns"
	ReasonSelectedByOlderInbox = "SelectedByOlderInbox"
	ReasonNoneHeld             = "NoneHeld"
	ReasonSelectedByNewerInbox = "SelectedByNewerInbox"
	ReasonNoneContested        = "NoneContested"
)

// ConditionInboxAvailable is set on a WorkflowRun, WorkflowRegistry or
// WorkflowSchedule whose namespace's inbox the manager cannot use now.
//   - False, ReasonInboxUnavailable: the inbox (named in the message) is
//     not connected or its database does not answer; the object is
//     brought up to date when it answers again, nothing is lost.
//   - False, ReasonNamespaceNotYetPlaced: a WorkflowInbox selects the
//     namespace but has not yet taken it; a moment later it has.
//   - True, ReasonInboxAvailable: set only once the inbox had been
//     unavailable.
const ConditionInboxAvailable = "InboxAvailable"

// Reasons of ConditionInboxAvailable.
const (
	ReasonInboxUnavailable      = "InboxUnavailable"
	ReasonNamespaceNotYetPlaced = "NamespaceNotYetPlaced"
	ReasonInboxAvailable        = "InboxAvailable"
)

// DefaultInboxName names the default inbox (the chart's database) in
// status, metrics and messages; no WorkflowInbox may take the name.
const DefaultInboxName = "default"

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=wfinbox;wfinboxes,categories=workflow
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Schema",type=integer,JSONPath=`.status.schemaVersion`
// +kubebuilder:printcolumn:name="Namespaces",type=integer,JSONPath=`.status.namespaceCount`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Secret",type=string,JSONPath=`.spec.secretRef.name`,priority=1
// +kubebuilder:printcolumn:name="Held",type=string,JSONPath=`.status.conditions[?(@.type=="NamespacesHeld")].status`,priority=1

// WorkflowInbox is one more inbox database: the namespaces it selects keep
// their runs, registries and schedules there instead of in the default
// inbox. One manager serves every inbox; a database that is down stops only
// the namespaces it serves.
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 63",message="a WorkflowInbox's name is at most 63 characters (it labels metrics)"
// +kubebuilder:validation:XValidation:rule="self.metadata.name != 'default'",message="the name default is the default inbox's (the chart's database)"
type WorkflowInbox struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   WorkflowInboxSpec   `json:"spec"`
	Status WorkflowInboxStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// WorkflowInboxList is a list of WorkflowInboxes.
type WorkflowInboxList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []WorkflowInbox `json:"items"`
}

func init() {
	register(&WorkflowInbox{}, &WorkflowInboxList{})
}
