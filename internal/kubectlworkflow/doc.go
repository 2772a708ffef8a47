// Package kubectlworkflow is the kubectl workflow plugin: it lists, shows,
// signals, approves, cancels, retries and watches WorkflowRuns, and prints
// what their handlers logged, through the API server alone, with the
// user's kubeconfig, as kubectl does (the logs come from the log API, an
// APIService that the manager serves).
//
// Every write is a JSON patch that carries the resourceVersion the command
// read, so the API server refuses it (409 Conflict) when the run changed in
// between; the command then reads the run again, checks again and retries.
package kubectlworkflow
