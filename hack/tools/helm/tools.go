//go:build tools

// Package helm pins the helm CLI built for tests.
package helm

import _ "helm.sh/helm/v3/cmd/helm"
