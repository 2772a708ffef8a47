// Package kubectlworkflow is the kubectl workflow plugin: it lists, shows,
// signals, approves, cancels, retries and watches WorkflowRuns through the
// API server alone, with the user's kubeconfig, as kubectl does.
//
// Every write is a JSON patch that carries the resourceVersion the command
// read, so the API server refuses it (409 Conflict) when the run changed in
// between; the command then reads the run again, checks again and retries.
package kubectlworkflow
