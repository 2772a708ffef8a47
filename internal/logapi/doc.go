// Package logapi serves the log API, logs.simpleworkflow.dev/v1alpha1, as
// an aggregated API server behind kube-apiserver (as metrics-server serves
// metrics.k8s.io for kubectl top): GET
// /apis/logs.simpleworkflow.dev/v1alpha1/namespaces/NS/workflowrunlogs/NAME
// returns what the handlers of WorkflowRun NS/NAME logged, read from the
// inbox serving NS.
//
// Only kube-apiserver may call it: a request must carry a client
// certificate signed by the request-header CA that the API server publishes
// in the ConfigMap kube-system/extension-apiserver-authentication (with one
// of its allowed names); the user is then the one the request's X-Remote-*
// headers (as that ConfigMap names them) carry. Each read is authorized
// with a SubjectAccessReview for that user: get workflowrunlogs in the
// namespace.
package logapi
