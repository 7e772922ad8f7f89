# warmroute — prefix-aware routing for vLLM fleets on Kubernetes.
#
# Every tool is installed with `go install` at a pinned version into ./bin, and
# the control plane used by the tests is built from the Go module proxy into a
# cache outside the checkout (see hack/build-controlplane.sh). Go is the only
# prerequisite.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

IMG ?= ghcr.io/warmroute/warmroute-operator:v0.1.0
ROUTER_IMG ?= ghcr.io/warmroute/warmroute-router:v0.1.0
LORA_AGENT_IMG ?= ghcr.io/warmroute/warmroute-lora-agent:v0.1.0
SIM_IMG ?= ghcr.io/warmroute/warmroute-vllmsim:v0.1.0
VERSION ?= 0.1.0

LOCALBIN ?= $(CURDIR)/bin
CONTROLLER_GEN ?= $(LOCALBIN)/controller-gen
KUSTOMIZE ?= $(LOCALBIN)/kustomize
GINKGO ?= $(LOCALBIN)/ginkgo
HELM ?= $(LOCALBIN)/helm
CRANE ?= $(LOCALBIN)/crane
GOLANGCI_LINT ?= $(LOCALBIN)/golangci-lint

CONTROLLER_TOOLS_VERSION ?= v0.23.0
KUSTOMIZE_VERSION ?= v5.7.1
HELM_VERSION ?= v4.3.2
CRANE_VERSION ?= $(shell go list -m -f '{{.Version}}' github.com/google/go-containerregistry)
GINKGO_VERSION ?= $(shell go list -m -f '{{.Version}}' github.com/onsi/ginkgo/v2)
GOLANGCI_LINT_VERSION ?= v2.15.0

# Go test flags; FUZZTIME is how long each fuzz target runs in `make test`:
# a count of executions, not a duration. A duration races Go's fuzzing
# coordinator (golang/go#75804, fixed in Go 1.27, not in 1.26.x): when the
# deadline fires under CPU contention the target fails with a bare "context
# deadline exceeded" and no crasher, as a CI run here did. 10000 executions
# take about 2 s for the slowest target (FuzzRestore) and under 1 s for the
# others.
GOTEST_FLAGS ?= -count=1
FUZZTIME ?= 10000x

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Display this help.
	@awk 'BEGIN {FS = ":.*##"; printf "\nUsage:\n  make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

.PHONY: manifests
manifests: controller-gen ## Generate the CRD, RBAC and webhook manifests from the markers.
	$(CONTROLLER_GEN) rbac:roleName=manager-role crd webhook paths="./api/...;./controllers/...;./webhooks/..." output:crd:artifacts:config=config/crd/bases

.PHONY: generate
generate: controller-gen ## Generate DeepCopy methods for the API types and the InferencePool types the operator writes.
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./api/...;./internal/inferencepool/..."

.PHONY: fmt
fmt: ## Run go fmt.
	go fmt ./...

.PHONY: vet
vet: ## Run go vet.
	go vet ./...

.PHONY: lint
lint: golangci-lint ## Run golangci-lint with .golangci.yml (`make lint` before `make test` in .ci/run).
	$(GOLANGCI_LINT) run ./...

.PHONY: chart
chart: manifests kustomize ## Regenerate the Helm chart (dist/chart) from `kustomize build` of config/default and config/admission, so it cannot drift from config/.
	{ $(KUSTOMIZE) build config/default; echo ---; $(KUSTOMIZE) build config/admission; } | go run ./hack/chartgen --version $(VERSION) --out dist/chart

.PHONY: verify-generated
verify-generated: manifests generate bundle chart ## Fail when generated files (CRD, RBAC, webhooks, DeepCopy, OLM bundle, Helm chart) are not committed and current.
	@if [ -n "$$(git status --porcelain -- api internal/inferencepool config bundle dist)" ]; then \
	  echo "generated files are stale; run 'make manifests generate bundle chart' and commit:"; \
	  git status --porcelain -- api internal/inferencepool config bundle dist; git --no-pager diff --stat -- api internal/inferencepool config bundle dist; exit 1; fi

.PHONY: controlplane
controlplane: ## Build (or find cached) etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok.
	@hack/build-controlplane.sh >/dev/null

.PHONY: test
test: vet verify-generated controlplane test-unit test-fuzz test-e2e test-node ## Run every test: unit, integration (real API server), fuzz smoke, end-to-end (KWOK and real node).

# The router's packages run under the race detector: requests, the picker's
# counters, config reloads and leases share state across goroutines there.
.PHONY: test-unit
test-unit: controlplane node helm kustomize ## Run unit and integration tests (real API server from the local control plane; the install tests use bin/helm and bin/kustomize; test/localcluster starts a real node once); the router's with -race.
	KUBEBUILDER_ASSETS="$$(hack/build-controlplane.sh)" go test $(GOTEST_FLAGS) $$(go list ./... | grep -v -e /test/e2e -e /test/node -e /warmroute/sidecar/)
	go test -race $(GOTEST_FLAGS) ./sidecar/...

.PHONY: test-fuzz
test-fuzz: ## Run each fuzz target for FUZZTIME.
	@hack/fuzz.sh $(FUZZTIME)

.PHONY: test-e2e
test-e2e: controlplane ginkgo ## Run the end-to-end tests on a local cluster (KWOK nodes, simulated vLLM).
	@if [ -d test/e2e ]; then KUBEBUILDER_ASSETS="$$(hack/build-controlplane.sh)" $(GINKGO) -v --timeout=40m ./test/e2e; else echo "no e2e suite yet"; fi

.PHONY: node
node: controlplane ## Build (or find cached) the real node's binaries (containerd, kube-router, CoreDNS) and install its Debian packages when missing.
	@hack/build-node.sh >/dev/null

.PHONY: test-node
test-node: controlplane node ginkgo helm ## Run the end-to-end tests that need a real kubelet node (test/node, with bin/helm for its Helm install; skipped, saying why, where the machine cannot run one).
	KUBEBUILDER_ASSETS="$$(hack/build-controlplane.sh)" WARMROUTE_NODE_ASSETS="$$(hack/build-node.sh)" $(GINKGO) -v --timeout=30m ./test/node

##@ Build

.PHONY: build
build: ## Build the operator (bin/manager), the router (bin/router) and the vLLM simulator (bin/vllmsim).
	go build -o $(LOCALBIN)/manager ./cmd
	go build -o $(LOCALBIN)/router ./sidecar/cmd/router
	go build -o $(LOCALBIN)/vllmsim ./test/vllmsim/cmd/vllmsim

.PHONY: run
run: manifests generate ## Run the operator against the current kubeconfig (webhooks off: they need a serving certificate).
	ENABLE_WEBHOOKS=false go run ./cmd/main.go

.PHONY: demo
demo: build controlplane ## Start a local cluster, install warmroute and drive a workload through each strategy.
	go run ./test/demo $(DEMO_ARGS)

.PHONY: demo-inferencepool
demo-inferencepool: controlplane ginkgo ## Show an endpoint in InferencePool mode on a local cluster: CRD missing then installed, the pool, picker-only router pods, requests through ext_proc.
	KUBEBUILDER_ASSETS="$$(hack/build-controlplane.sh)" $(GINKGO) -v --focus "InferencePool mode" ./test/e2e

.PHONY: demo-down
demo-down: ## Stop everything `make demo` started.
	go run ./test/localcluster/cmd/localcluster down --workdir tmp/demo/cluster

##@ Benchmarks

# BENCH_TRACE is the Mooncake trace replayed as the fifth workload (empty
# skips it).
BENCH_TRACE ?= ../shared/traces/mooncake_synthetic_trace.jsonl
# BENCH_BASELINE is the revision whose router runs beside this one for
# before/after figures (the router the last redesign replaced: aee5bda, the
# replicas' peer protocol before one elected picker decided for them; its
# replica runs share state through that protocol); empty skips it.
BENCH_BASELINE ?= aee5bda

.PHONY: bench
bench: ## Replay the workloads through the router per strategy, through 1-3 router replicas and through the Endpoint Picker Protocol, then the flow-control set (about 72 min on 2 cores, 17 of them flow control), beside the router of BENCH_BASELINE; rewrite docs/benchmarks.md and docs/img/bench-*.png.
	go run ./test/bench/cmd/bench -out docs -trace "$(BENCH_TRACE)" -baseline "$(BENCH_BASELINE)" -flow also -command "make bench"

.PHONY: bench-flow
bench-flow: ## Run only the flow-control set of make bench (noisy neighbour, priority, rate limits; about 17 min) and rewrite only its section of docs/benchmarks.md.
	go run ./test/bench/cmd/bench -out docs -flow only -command "make bench-flow"

##@ Deployment

.PHONY: install
install: manifests kustomize ## Install the CRD into the cluster of the current kubeconfig.
	$(KUSTOMIZE) build config/crd | kubectl apply --server-side -f -

.PHONY: uninstall
uninstall: manifests kustomize ## Remove the CRD from the cluster.
	$(KUSTOMIZE) build config/crd | kubectl delete --ignore-not-found -f -

.PHONY: deploy
deploy: manifests kustomize ## Deploy the operator to the cluster of the current kubeconfig.
	cd config/manager && $(KUSTOMIZE) edit set image controller=$(IMG)
	$(KUSTOMIZE) build config/default | kubectl apply --server-side -f -
	$(KUSTOMIZE) build config/admission | kubectl apply --server-side -f -

.PHONY: undeploy
undeploy: kustomize ## Remove the operator from the cluster.
	$(KUSTOMIZE) build config/admission | kubectl delete --ignore-not-found -f -
	$(KUSTOMIZE) build config/default | kubectl delete --ignore-not-found -f -

##@ Images and the OLM bundle

# `make images` needs Go only (hack/images: static binaries on a minimal
# base, no container engine, no registry). The docker-* and bundle-*
# targets are for machines with docker or podman.
CONTAINER_TOOL ?= docker
PLATFORMS ?= linux/amd64,linux/arm64
IMAGES_DIR ?= $(LOCALBIN)/images

.PHONY: images
images: ## Build the operator (IMG), router (ROUTER_IMG), LoRA agent (LORA_AGENT_IMG) and vLLM simulator (SIM_IMG) images without Docker: IMAGES_DIR/images.tar (this machine's arch) and IMAGES_DIR/oci/<name> (PLATFORMS).
	go run ./hack/images/cmd/images -out $(IMAGES_DIR) -version $(VERSION) -platforms $(PLATFORMS) \
	  -operator $(IMG) -router $(ROUTER_IMG) -lora-agent $(LORA_AGENT_IMG) -simulator $(SIM_IMG)

.PHONY: images-push
images-push: crane ## Push the OCI layouts of `make images` (all PLATFORMS) to IMG, ROUTER_IMG, LORA_AGENT_IMG and SIM_IMG with crane.
	$(CRANE) push $(IMAGES_DIR)/oci/operator $(IMG)
	$(CRANE) push $(IMAGES_DIR)/oci/router $(ROUTER_IMG)
	$(CRANE) push $(IMAGES_DIR)/oci/lora-agent $(LORA_AGENT_IMG)
	$(CRANE) push $(IMAGES_DIR)/oci/vllmsim $(SIM_IMG)
BUNDLE_IMG ?= ghcr.io/warmroute/warmroute-operator-bundle:v$(VERSION)
# OLM update channels of the bundle; REPLACES names the CSV this version
# upgrades from (e.g. warmroute.v0.1.0), empty for the first release.
CHANNELS ?= stable
DEFAULT_CHANNEL ?= stable
REPLACES ?=

.PHONY: docker-build
docker-build: ## Build the operator (IMG) and router (ROUTER_IMG) images for this platform.
	$(CONTAINER_TOOL) build --build-arg VERSION=$(VERSION) -t $(IMG) -f Dockerfile .
	$(CONTAINER_TOOL) build --build-arg VERSION=$(VERSION) -t $(ROUTER_IMG) -f sidecar/Dockerfile.router .

.PHONY: docker-push
docker-push: ## Push the operator and router images.
	$(CONTAINER_TOOL) push $(IMG)
	$(CONTAINER_TOOL) push $(ROUTER_IMG)

.PHONY: docker-buildx
docker-buildx: ## Build and push the operator and router images for PLATFORMS (docker buildx).
	-$(CONTAINER_TOOL) buildx create --name warmroute-builder
	$(CONTAINER_TOOL) buildx build --builder warmroute-builder --push --platform=$(PLATFORMS) --build-arg VERSION=$(VERSION) -t $(IMG) -f Dockerfile .
	$(CONTAINER_TOOL) buildx build --builder warmroute-builder --push --platform=$(PLATFORMS) --build-arg VERSION=$(VERSION) -t $(ROUTER_IMG) -f sidecar/Dockerfile.router .
	-$(CONTAINER_TOOL) buildx rm warmroute-builder

.PHONY: bundle
bundle: manifests kustomize ## Regenerate the OLM bundle (bundle/, bundle.Dockerfile) from config/manifests for VERSION, IMG and ROUTER_IMG.
	$(KUSTOMIZE) build config/manifests | go run ./hack/bundlegen \
	  --version $(VERSION) --image $(IMG) --related-image router=$(ROUTER_IMG) \
	  --channels $(CHANNELS) --default-channel $(DEFAULT_CHANNEL) $(if $(REPLACES),--replaces $(REPLACES))

.PHONY: bundle-build
bundle-build: ## Build the bundle image (BUNDLE_IMG).
	$(CONTAINER_TOOL) build -f bundle.Dockerfile -t $(BUNDLE_IMG) .

.PHONY: bundle-push
bundle-push: ## Push the bundle image.
	$(CONTAINER_TOOL) push $(BUNDLE_IMG)

##@ Tools

$(LOCALBIN):
	mkdir -p $(LOCALBIN)

.PHONY: controller-gen
controller-gen: $(CONTROLLER_GEN) ## Install controller-gen into ./bin.
$(CONTROLLER_GEN): | $(LOCALBIN)
	$(call go-install-tool,$(CONTROLLER_GEN),sigs.k8s.io/controller-tools/cmd/controller-gen,$(CONTROLLER_TOOLS_VERSION))

.PHONY: kustomize
kustomize: $(KUSTOMIZE) ## Install kustomize into ./bin.
$(KUSTOMIZE): | $(LOCALBIN)
	$(call go-install-tool,$(KUSTOMIZE),sigs.k8s.io/kustomize/kustomize/v5,$(KUSTOMIZE_VERSION))

.PHONY: ginkgo
ginkgo: $(GINKGO) ## Install the ginkgo CLI into ./bin (same version as go.mod).
$(GINKGO): | $(LOCALBIN)
	$(call go-install-tool,$(GINKGO),github.com/onsi/ginkgo/v2/ginkgo,$(GINKGO_VERSION))

.PHONY: helm
helm: $(HELM) ## Install helm into ./bin (~2 min the first time on 2 cores).
$(HELM): | $(LOCALBIN)
	$(call go-install-tool,$(HELM),helm.sh/helm/v4/cmd/helm,$(HELM_VERSION))

.PHONY: crane
crane: $(CRANE) ## Install crane into ./bin (same go-containerregistry version as go.mod).
$(CRANE): | $(LOCALBIN)
	$(call go-install-tool,$(CRANE),github.com/google/go-containerregistry/cmd/crane,$(CRANE_VERSION))

.PHONY: golangci-lint
golangci-lint: $(GOLANGCI_LINT) ## Install golangci-lint into ./bin (~5 min the first time on 2 cores).
$(GOLANGCI_LINT): | $(LOCALBIN)
	$(call go-install-tool,$(GOLANGCI_LINT),github.com/golangci/golangci-lint/v2/cmd/golangci-lint,$(GOLANGCI_LINT_VERSION))

# go-install-tool installs package $2 at version $3 as $1 and keeps a versioned
# copy, so that a version bump in this file reinstalls it.
define go-install-tool
@[ -f "$(1)-$(3)" ] || { \
set -e; \
echo "installing $(2)@$(3)"; \
rm -f "$(1)"; \
GOBIN="$(LOCALBIN)" go install "$(2)@$(3)"; \
mv "$(1)" "$(1)-$(3)"; \
}; \
ln -sf "$$(basename "$(1)-$(3)")" "$(1)"
endef
