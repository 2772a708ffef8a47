// Package devenv runs a local environment for the demo and the end-to-end
// suite: a control plane (kube-apiserver and etcd built by `make envtest`,
// started through controller-runtime's envtest) with a kubeconfig on disk,
// and worker processes that follow a Deployment's replica count, since there
// is no kubelet to start pods.
package devenv
