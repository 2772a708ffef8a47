//go:build tools

// Package kube pins the Kubernetes commands built for tests and the demo.
package kube

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
