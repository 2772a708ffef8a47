# simple-workflow

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

LOCALBIN ?= $(CURDIR)/bin
GO ?= go

# Pinned tool versions. The control plane is built from these Go modules
# (hack/tools/*), never downloaded as release binaries.
CONTROLLER_TOOLS_VERSION ?= v0.23.0
SQLC_VERSION ?= v1.31.1
KUBERNETES_VERSION ?= v1.37.2
ETCD_VERSION ?= v3.7.3
HELM_VERSION ?= v3.22.0
GOLANGCI_LINT_VERSION ?= v2.15.0

CONTROLLER_GEN ?= $(LOCALBIN)/controller-gen-$(CONTROLLER_TOOLS_VERSION)
SQLC ?= $(LOCALBIN)/sqlc-$(SQLC_VERSION)
ENVTEST_DIR ?= $(LOCALBIN)/k8s/$(KUBERNETES_VERSION)
KUBE_APISERVER ?= $(ENVTEST_DIR)/kube-apiserver
ETCD ?= $(ENVTEST_DIR)/etcd
KUBECTL ?= $(ENVTEST_DIR)/kubectl
HELM ?= $(LOCALBIN)/helm-$(HELM_VERSION)
GOLANGCI_LINT ?= $(LOCALBIN)/golangci-lint-$(GOLANGCI_LINT_VERSION)

# Images (make image): podman or docker, tagged with the chart's appVersion.
CONTAINER_ENGINE ?= podman
IMAGE_REGISTRY ?= ghcr.io/simple-workflow
export CONTAINER_ENGINE IMAGE_REGISTRY
export KUBEBUILDER_ASSETS ?= $(ENVTEST_DIR)
export HELM

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*?##/ { printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Development

.PHONY: fmt
fmt: ## Format the Go code.
	gofmt -w $$(git ls-files '*.go')

.PHONY: fmt-check
fmt-check: ## Fail when gofmt would change a file.
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

.PHONY: vet
vet: ## Run go vet (also over hack/riverbench and hack/dbosbench, the benchmark's peer modules, so they keep building).
	$(GO) vet ./...
	cd hack/riverbench && $(GO) vet ./...
	cd hack/dbosbench && $(GO) vet ./...

.PHONY: lint
lint: lint-go lint-python ## Every linter: Go's and the Python SDK's.

.PHONY: lint-go
lint-go: $(GOLANGCI_LINT) ## Run golangci-lint (.golangci.yml says which checks are off and why), also over the benchmark's peer modules.
	$(GOLANGCI_LINT) run ./...
	cd hack/riverbench && $(GOLANGCI_LINT) run ./...
	cd hack/dbosbench && $(GOLANGCI_LINT) run ./...

.PHONY: lint-python
lint-python: ## The Python SDK's formatting (black, line length in sdk/python/pyproject.toml) and types (mypy --strict).
	PY=$$(hack/python-deps.sh --dev) && cd sdk/python && \
	{ command -v black >/dev/null || { echo "black is missing (Debian: apt-get install black)"; exit 1; }; } && \
	black --check --quiet . && $$PY -m mypy --strict --no-error-summary --cache-dir ../../.cache/mypy simpleworkflow examples/example_worker.py

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate the CRDs and the RBAC role (and sync them into the chart).
	$(CONTROLLER_GEN) rbac:roleName=manager-role crd:maxDescLen=512 paths="./..." output:crd:artifacts:config=config/crd/bases
	hack/sync-chart.sh

.PHONY: generate
generate: $(CONTROLLER_GEN) $(SQLC) ## Generate the deepcopy methods, both SDKs' maps of the inbox's SQLSTATEs (testdata/contract/errors.json) and the typed queries (sqlc.yaml).
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./..."
	$(GO) run ./hack/gen-errors
	hack/gen-queries.sh $(SQLC)

.PHONY: check-generated
check-generated: manifests generate ## Fail when committed generated files are stale.
	@if [ -n "$$(git status --porcelain -- config api charts)" ]; then \
		echo "Generated files are stale; run 'make manifests generate' and commit:"; \
		git status --porcelain -- config api charts; \
		git --no-pager diff --stat -- config api charts; exit 1; fi
	@if [ -n "$$(git status --porcelain -- internal/engine/error_codes.go sdk/python/simpleworkflow/_error_codes.py)" ]; then \
		echo "The SDKs' error maps are stale; run 'make generate' and commit:"; \
		git --no-pager diff -- internal/engine/error_codes.go sdk/python/simpleworkflow/_error_codes.py; exit 1; fi
	@if [ -n "$$(git status --porcelain -- internal/engine/queries)" ]; then \
		echo "The typed queries are stale; run 'make generate' and commit:"; \
		git status --porcelain -- internal/engine/queries; \
		git --no-pager diff -- internal/engine/queries; exit 1; fi

.PHONY: test
test: fmt-check vet lint check-generated envtest test-chart test-python container-engine browser prometheus ## Run every test (real Postgres, real kube-apiserver, e2e, the images under podman).
	$(GO) test -count=1 -timeout 40m ./...

.PHONY: test-python
test-python: ## Test the Python SDK against a throwaway Postgres.
	PY=$$(hack/python-deps.sh --dev) && $$PY -W error::ResourceWarning -m unittest discover -s sdk/python -t sdk/python -p 'test_*.py' -v

.PHONY: test-chart
test-chart: $(HELM) $(KUBECTL) ## helm lint/template the chart (a typo in values must fail); kustomize builds config/.
	@$(KUBECTL) version --client >/dev/null && $(HELM) version | grep -q 'GitCommit:"[^"]' || { \
		echo "kubectl or helm answers no version: rebuild them (rm -rf bin; make envtest)"; exit 1; }
	$(KUBECTL) kustomize config/default > /dev/null
	@$(KUBECTL) kustomize config/default | grep -q 'name: simple-workflow-edit' || { \
		echo "config/default lacks the aggregated ClusterRoles"; exit 1; }
	$(KUBECTL) kustomize config/samples > /dev/null
	$(HELM) lint charts/simple-workflow --set database.url=postgres://x
	$(HELM) lint charts/simple-workflow --set database.existingSecret=db --set exampleWorker.enabled=true --set replicaCount=2 --set metrics.serviceMonitor.enabled=true \
		--set networkPolicy.apiServerCIDRs[0]=10.0.0.1/32 --set networkPolicy.databaseEgress[0].ipBlock.cidr=10.20.0.0/16
	$(HELM) lint charts/simple-workflow --set database.existingSecret=db --set exampleWorker.enabled=true --set networkPolicy.enabled=false
	$(HELM) lint charts/simple-workflow --set database.existingSecret=db --set console.enabled=true --set console.namespaceSelector.matchLabels.team=ops
	$(HELM) lint charts/simple-workflow --set database.existingSecret=db --set exampleWorker.enabled=true --set exampleWorker.database.existingSecret=worker-db --set rbac.aggregateRoles=false
	$(HELM) template sw charts/simple-workflow --set database.existingSecret=db > /dev/null
	@$(HELM) template sw charts/simple-workflow --set database.existingSecret=db | grep -q 'rbac.authorization.k8s.io/aggregate-to-edit: "true"' || { \
		echo "the chart did not render the aggregated ClusterRoles"; exit 1; }
	@if $(HELM) template sw charts/simple-workflow --set database.existingSecret=db --set rbac.aggregateRoles=false | grep -q 'aggregate-to-'; then \
		echo "rbac.aggregateRoles=false still rendered the aggregated ClusterRoles"; exit 1; fi
	@if $(HELM) template sw charts/simple-workflow --set database.url=x --set manager.retenton=1h >/dev/null 2>&1; then \
		echo "values.schema.json accepted a misspelt value"; exit 1; fi
	@for bad in networkPolicy.apiServerCIDR[0]=10.0.0.1/32 networkPolicy.apiServerCIDRs[0]=10.0.0.1 networkPolicy.databaseEgress[0].ipblock.cidr=10.0.0.0/8 \
		resources.limits.ephemeral_storage=1Gi resources.limit.memory=1Gi exampleWorker.resources.requests.memory=lots; do \
		if $(HELM) template sw charts/simple-workflow --set database.url=x --set "$$bad" >/dev/null 2>&1; then \
			echo "values.schema.json accepted $$bad"; exit 1; fi; done
	@$(HELM) template sw charts/simple-workflow --set database.url=x --set exampleWorker.enabled=true | grep -c '^kind: NetworkPolicy$$' | grep -qx 2 || { \
		echo "the chart did not render the NetworkPolicies of the manager and the example worker by default"; exit 1; }
	@$(HELM) template sw charts/simple-workflow --set database.url=x --set exampleWorker.enabled=true | grep -c '^ *ephemeral-storage: ' | grep -qx 4 || { \
		echo "the manager and the example worker lack ephemeral-storage requests and limits"; exit 1; }
	@$(HELM) template sw charts/simple-workflow --set database.url=x --set console.enabled=true | grep -q -- '--console-bind-address=:8082' && \
		$(HELM) template sw charts/simple-workflow --set database.url=x --set console.enabled=true | grep -q 'name: sw-simple-workflow-console' && \
		$(HELM) template sw charts/simple-workflow --set database.url=x --set console.enabled=true | grep -q '# The web console.' || { \
		echo "console.enabled=true did not render the console's flag, Service and NetworkPolicy port"; exit 1; }
	@$(HELM) template sw charts/simple-workflow --set database.url=x --set console.enabled=true | grep -q -- '--console-auth=kubernetes' && \
		$(HELM) template sw charts/simple-workflow --set database.url=x --set console.enabled=true | grep -q 'name: sw-simple-workflow-console-inbox-reader' || { \
		echo "console.enabled=true did not render Kubernetes authentication and the inbox-reader ClusterRole"; exit 1; }
	@if $(HELM) template sw charts/simple-workflow --set database.url=x --set console.enabled=true --set console.auth=open >/dev/null 2>&1; then \
		echo "values.schema.json accepted console.auth=open"; exit 1; fi
	@if $(HELM) template sw charts/simple-workflow --set database.url=x | grep -q 'console'; then \
		echo "the console is rendered although console.enabled is false"; exit 1; fi
	@if $(HELM) template sw charts/simple-workflow --set database.url=x --set console.enabled=true --set 'console.databaseRole=x;y' >/dev/null 2>&1; then \
		echo "values.schema.json accepted a console.databaseRole that is no role name"; exit 1; fi
	$(HELM) lint charts/simple-workflow --set database.existingSecret=db --set logAPI.enabled=true --set networkPolicy.apiServerCIDRs[0]=10.0.0.1/32
	@out=$$($(HELM) template sw charts/simple-workflow --set database.url=x --set logAPI.enabled=true) && \
		echo "$$out" | grep -q -- '--log-api-bind-address=:8443' && echo "$$out" | grep -q -- '--log-api-cert-dir=/etc/simple-workflow/log-api' && \
		echo "$$out" | grep -q '^kind: APIService$$' && echo "$$out" | grep -q 'name: v1alpha1.logs.simpleworkflow.dev' && \
		echo "$$out" | grep -q '^  caBundle: [A-Za-z0-9+/=]\{100,\}$$' && echo "$$out" | grep -q 'name: extension-apiserver-authentication-reader' && \
		echo "$$out" | grep -q '# The log API, which kube-apiserver.s aggregator calls' && echo "$$out" | grep -q 'secretName: sw-simple-workflow-log-api-tls' || { \
		echo "logAPI.enabled=true did not render the manager's flags, the APIService with its caBundle, the auth-reader binding, the NetworkPolicy port and the certificate"; exit 1; }
	@if $(HELM) template sw charts/simple-workflow --set database.url=x | grep -q 'APIService\|log-api'; then \
		echo "the log API is rendered although logAPI.enabled is false"; exit 1; fi
	@$(HELM) template sw charts/simple-workflow --set database.url=x | grep -c 'logs.simpleworkflow.dev' | grep -qx 2 || { \
		echo "the -view and -edit ClusterRoles do not grant get on workflowrunlogs"; exit 1; }
	@for bad in logAPI.port=0 logAPI.service.port=70000 logAPI.servicePort=443 logAPI.certificateValidityDays=0; do \
		if $(HELM) template sw charts/simple-workflow --set database.url=x --set logAPI.enabled=true --set "$$bad" >/dev/null 2>&1; then \
			echo "values.schema.json accepted $$bad"; exit 1; fi; done
	@$(HELM) template sw charts/simple-workflow --set database.url=x --api-versions admissionregistration.k8s.io/v1/MutatingAdmissionPolicy | \
		grep -q 'policyName: sw-simple-workflow-workflowrun-finalizer' || { \
		echo "the chart did not render the finalizer policy for a cluster that serves MutatingAdmissionPolicy"; exit 1; }
	@if $(HELM) template sw charts/simple-workflow --set database.url=x | grep -q 'MutatingAdmissionPolicy' || \
		$(HELM) template sw charts/simple-workflow --set database.url=x --set manager.finalizerPolicy=false \
			--api-versions admissionregistration.k8s.io/v1/MutatingAdmissionPolicy | grep -q 'MutatingAdmissionPolicy'; then \
		echo "the finalizer policy rendered for a cluster without the API, or with manager.finalizerPolicy=false"; exit 1; fi
	@$(KUBECTL) kustomize config/default | grep -q 'policyName: simple-workflow-workflowrun-finalizer' || { \
		echo "config/default's finalizer policy binding does not name its prefixed policy"; exit 1; }
	@if $(HELM) template sw charts/simple-workflow >/dev/null 2>&1; then \
		echo "the chart rendered without a database"; exit 1; fi
	@tag=$$(sed -n 's/^ *newTag: *//p' config/manager/kustomization.yaml); \
		grep -q "^appVersion: \"$$tag\"$$" charts/simple-workflow/Chart.yaml && grep -q "example-worker:$$tag\"" hack/demo/main.go || { \
		echo "image tags differ: config/manager newTag $$tag, the chart's appVersion and hack/demo must match"; exit 1; }
	@repo=$$(sed -n 's/^ *newName: *//p' config/manager/kustomization.yaml); \
		built=$$(sed -n 's/^registry=.*IMAGE_REGISTRY:-\([^}]*\)}$$/\1/p' hack/image.sh); \
		[ "$$repo" = "$$built/manager" ] && grep -q "^  repository: $$built/manager$$" charts/simple-workflow/values.yaml && \
		grep -q "^    repository: $$built/example-worker$$" charts/simple-workflow/values.yaml && grep -q "\"$$built/example-worker:" hack/demo/main.go || { \
		echo "image names differ: make image builds $$built/manager and $$built/example-worker; the chart, config/manager ($$repo) and hack/demo must use them"; exit 1; }

.PHONY: bench
bench: ## Benchmark the engine side by side with River (DATABASE_URL, else a throwaway Postgres).
	$(GO) run ./hack/bench

.PHONY: soak
soak: ## Steady load at half the burn-down for 10 minutes (SOAK_ARGS="-duration 60m"), retention 1m, history partitions of 2m; then River under the same load; side by side.
	$(GO) run ./hack/soak $(SOAK_ARGS)

.PHONY: bench-operator
bench-operator: envtest ## Benchmark the operator: 10,000 WorkflowRuns at once in one inbox, then spread over three.
	$(GO) run ./hack/scalebench -inboxes 1
	$(GO) run ./hack/scalebench -inboxes 3

##@ Build

.PHONY: build
build: ## Build the manager, the example worker and the kubectl workflow plugin (bin/kubectl-workflow) into bin/.
	$(GO) build -o $(LOCALBIN)/manager ./cmd
	$(GO) build -o $(LOCALBIN)/example-worker ./cmd/example-worker
	$(GO) build -o $(LOCALBIN)/kubectl-workflow ./cmd/kubectl-workflow

.PHONY: krew-release
krew-release: ## Build the kubectl workflow plugin's release archives and its krew manifest with their sha256 into dist/krew/ (VERSION=vX.Y.Z, default the chart's appVersion).
	hack/krew-release.sh $(VERSION)

.PHONY: image
image: $(if $(filter podman,$(CONTAINER_ENGINE)),container-engine) ## Build the images ghcr.io/simple-workflow/{manager,example-worker}:<appVersion> (no network needed; docs/images.md).
	hack/image.sh

.PHONY: image-context
image-context: ## Only build bin/image/ (static binaries, CA certificates, /etc/passwd), the Dockerfile's build context.
	hack/image.sh context

.PHONY: prometheus
prometheus: ## Install Debian's prometheus (promtool, prometheus) when missing (as root), for the alert rules' and dashboard's tests.
	@hack/prometheus.sh

.PHONY: browser
browser: ## Install Debian's chromium when missing (as root), for the console's browser spec.
	@hack/chromium.sh

.PHONY: container-engine
container-engine: ## Install podman and runc when missing (Debian, as root) and write the podman settings that work here.
	@hack/podman.sh

.PHONY: build-installer
build-installer: manifests $(KUBECTL) ## Write dist/install.yaml (CRDs, RBAC, manager) from config/default.
	mkdir -p dist
	$(KUBECTL) kustomize config/default > dist/install.yaml

##@ Run locally

.PHONY: demo
demo: envtest build ## Postgres + control plane + manager + example workers; applies config/samples. Ctrl-C stops.
	$(GO) build -o $(LOCALBIN)/demo ./hack/demo
	$(LOCALBIN)/demo

.PHONY: demo-env
demo-env: envtest ## Only Postgres and the control plane, for development. Ctrl-C stops.
	$(GO) build -o $(LOCALBIN)/demo ./hack/demo
	$(LOCALBIN)/demo -env-only

.PHONY: localnode-up
localnode-up: envtest ## A real single-node Kubernetes here (kubelet on containerd, kube-proxy, CNI bridge); prints its KUBECONFIG.
	hack/localnode.sh up

.PHONY: test-localnode
test-localnode: envtest ## The user's path on a real node: make image, helm install, runs scale the worker from zero (root; starts and stops the node).
	$(GO) test -count=1 -tags localnode -timeout 30m -v ./test/localnode/

.PHONY: localnode-down
localnode-down: ## Stop the local node and remove everything it made.
	hack/localnode.sh down

##@ Tools

$(LOCALBIN):
	mkdir -p $(LOCALBIN)

$(GOLANGCI_LINT): | $(LOCALBIN)
	GOBIN=$(LOCALBIN) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	mv $(LOCALBIN)/golangci-lint $(GOLANGCI_LINT)

$(SQLC): | $(LOCALBIN)
	GOBIN=$(LOCALBIN) CGO_ENABLED=1 $(GO) install github.com/sqlc-dev/sqlc/cmd/sqlc@$(SQLC_VERSION)
	mv $(LOCALBIN)/sqlc $(SQLC)

$(CONTROLLER_GEN): | $(LOCALBIN)
	GOBIN=$(LOCALBIN) $(GO) install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_TOOLS_VERSION)
	mv $(LOCALBIN)/controller-gen $(CONTROLLER_GEN)

.PHONY: envtest
envtest: $(KUBE_APISERVER) $(ETCD) $(KUBECTL) $(HELM) ## Build kube-apiserver, etcd, kubectl and helm from Go modules into bin/.

$(HELM): | $(LOCALBIN)
	cd hack/tools/helm && $(GO) build -ldflags "$$(../version-ldflags.sh helm)" -o $@ helm.sh/helm/v3/cmd/helm

$(KUBE_APISERVER):
	mkdir -p $(ENVTEST_DIR)
	cd hack/tools/kube && $(GO) build -ldflags "$$(../version-ldflags.sh kube)" -o $@ k8s.io/kubernetes/cmd/kube-apiserver

$(KUBECTL):
	mkdir -p $(ENVTEST_DIR)
	cd hack/tools/kube && $(GO) build -ldflags "$$(../version-ldflags.sh kube)" -o $@ k8s.io/kubernetes/cmd/kubectl

$(ETCD):
	mkdir -p $(ENVTEST_DIR)
	cd hack/tools/etcd && $(GO) build -o $@ go.etcd.io/etcd/server/v3
