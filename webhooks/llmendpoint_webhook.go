/*
Copyright 2026 The warmroute Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

// Package webhooks holds the admission webhooks of the warmroute API: what
// the CRD's schema and CEL rules cannot say, or say badly — defaults that
// depend on other fields, warnings, checks that need to look other objects
// up, and rules about how an object may change.
package webhooks

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	servingv1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

// The webhook paths are the ones controller-runtime's builder derives from
// the group, version and kind; the markers must repeat them literally.
//
// +kubebuilder:webhook:path=/mutate-serving-warmroute-dev-v1alpha1-llmendpoint,mutating=true,failurePolicy=fail,sideEffects=None,groups=serving.warmroute.dev,resources=llmendpoints,verbs=create;update,versions=v1alpha1,name=mllmendpoint-v1alpha1.serving.warmroute.dev,admissionReviewVersions=v1,timeoutSeconds=10
// +kubebuilder:webhook:path=/validate-serving-warmroute-dev-v1alpha1-llmendpoint,mutating=false,failurePolicy=fail,sideEffects=None,groups=serving.warmroute.dev,resources=llmendpoints,verbs=create;update,versions=v1alpha1,name=vllmendpoint-v1alpha1.serving.warmroute.dev,admissionReviewVersions=v1,timeoutSeconds=10

// The validator looks up the PersistentVolumeClaims an endpoint refers to.
// It does not look up spec.model.hfTokenSecretRef: RBAC cannot grant
// "does it exist" on Secrets without granting their contents, and a warning
// is not worth the operator reading every Secret in the cluster. A missing
// Secret shows in the endpoint's Available condition instead, from the
// pods the kubelet cannot start.
//
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get

var (
	_ admission.Defaulter[*servingv1alpha1.LLMEndpoint] = &LLMEndpointDefaulter{}
	_ admission.Validator[*servingv1alpha1.LLMEndpoint] = &LLMEndpointValidator{}
)

// SetupLLMEndpointWebhookWithManager registers the LLMEndpoint defaulting and
// validating webhooks with the manager's webhook server. The validator reads
// through the manager's API reader, not its cache, so that admission starts
// no informer on PersistentVolumeClaims.
// watchNamespaces are the operator's (empty: every namespace).
func SetupLLMEndpointWebhookWithManager(mgr ctrl.Manager, watchNamespaces []string) error {
	err := ctrl.NewWebhookManagedBy(mgr, &servingv1alpha1.LLMEndpoint{}).
		WithDefaulter(&LLMEndpointDefaulter{}).
		WithValidator(&LLMEndpointValidator{Reader: mgr.GetAPIReader(), WatchNamespaces: watchNamespaces}).
		Complete()
	if err != nil {
		return fmt.Errorf("register LLMEndpoint webhooks: %w", err)
	}
	return nil
}

// charsPerToken approximates how many characters of text one token stands
// for, to compare prefixLength (characters) with maxModelLen (tokens).
const charsPerToken = 4

// LLMEndpointDefaulter fills in the fields whose defaults depend on other
// fields; the CRD's schema defaults the rest. A derived default keeps
// following the field it comes from: when an update leaves a defaulted
// field untouched and it still holds the value derived from the old object,
// it is derived again from the new one, so that, say, lowering
// spec.model.gpus also lowers a tensorParallelSize nobody chose.
type LLMEndpointDefaulter struct{}

// Default implements admission.Defaulter.
func (d *LLMEndpointDefaulter) Default(ctx context.Context, e *servingv1alpha1.LLMEndpoint) error {
	var old *servingv1alpha1.LLMEndpoint
	if req, err := admission.RequestFromContext(ctx); err == nil && len(req.OldObject.Raw) > 0 {
		// The new object was decoded from this request already; the old
		// one decodes the same way or the request would not have reached
		// us. A failure leaves old nil: defaults are then derived as on
		// create, which only fills unset fields.
		o := &servingv1alpha1.LLMEndpoint{}
		if err := json.Unmarshal(req.OldObject.Raw, o); err == nil {
			old = o
		}
	}
	applyDerivedDefaults(old, e)
	return nil
}

// applyDerivedDefaults sets the derived defaults of e; old is the object
// before an update, nil on create.
func applyDerivedDefaults(old, e *servingv1alpha1.LLMEndpoint) {
	for _, f := range derivedFields {
		cur := f.get(e)
		want := f.derive(e)
		switch {
		case cur == nil:
			f.set(e, want)
		case old != nil && equalPtr(cur, f.get(old)) && equalPtr(cur, f.derive(old)):
			f.set(e, want)
		}
	}
}

// derivedField is one field with a default computed from other fields.
type derivedField struct {
	get    func(*servingv1alpha1.LLMEndpoint) *int32
	set    func(*servingv1alpha1.LLMEndpoint, *int32)
	derive func(*servingv1alpha1.LLMEndpoint) *int32
}

// The derivations are api/v1alpha1's, which the controller also falls back
// to when a field is unset (the webhook off), so both agree.
var derivedFields = []derivedField{
	{ // spec.model.tensorParallelSize: one rank per GPU; unset on CPU, where CEL refuses any.
		get:    func(e *servingv1alpha1.LLMEndpoint) *int32 { return e.Spec.Model.TensorParallelSize },
		set:    func(e *servingv1alpha1.LLMEndpoint, v *int32) { e.Spec.Model.TensorParallelSize = v },
		derive: servingv1alpha1.DefaultTensorParallelSize,
	},
	{ // spec.routing.prefixAware.concurrencyThreshold: from the GPUs per instance.
		get:    func(e *servingv1alpha1.LLMEndpoint) *int32 { return e.Spec.Routing.PrefixAware.ConcurrencyThreshold },
		set:    func(e *servingv1alpha1.LLMEndpoint, v *int32) { e.Spec.Routing.PrefixAware.ConcurrencyThreshold = v },
		derive: pointer(servingv1alpha1.DefaultConcurrencyThreshold),
	},
	{ // spec.router.replicas: from the number of instances.
		get:    func(e *servingv1alpha1.LLMEndpoint) *int32 { return e.Spec.Router.Replicas },
		set:    func(e *servingv1alpha1.LLMEndpoint, v *int32) { e.Spec.Router.Replicas = v },
		derive: pointer(servingv1alpha1.DefaultRouterReplicas),
	},
}

func pointer(f func(*servingv1alpha1.LLMEndpoint) int32) func(*servingv1alpha1.LLMEndpoint) *int32 {
	return func(e *servingv1alpha1.LLMEndpoint) *int32 {
		v := f(e)
		return &v
	}
}

// LLMEndpointValidator refuses LLMEndpoints the CRD's schema lets through
// but the operator cannot serve, and warns about ones that will not work as
// their author expects.
type LLMEndpointValidator struct {
	// Reader looks up the PersistentVolumeClaims an endpoint refers to.
	// Nil skips those checks.
	Reader client.Reader
	// WatchNamespaces are the namespaces the operator reconciles, empty for
	// all: an endpoint elsewhere gets a warning that nothing will serve it.
	WatchNamespaces []string
}

// systemNamespaces hold the cluster's own workloads and their Leases
// (kube-system's controller-manager and scheduler elections, kube-node-lease's
// node heartbeats). An endpoint there would have the operator create
// Roles, bindings and pods beside them and bind the routers' ClusterRole,
// update on Leases, in that namespace: refused.
var systemNamespaces = []string{"kube-system", "kube-public", "kube-node-lease"}

// ValidateCreate implements admission.Validator.
func (v *LLMEndpointValidator) ValidateCreate(ctx context.Context, e *servingv1alpha1.LLMEndpoint) (admission.Warnings, error) {
	return v.validate(ctx, nil, e)
}

// ValidateUpdate implements admission.Validator.
func (v *LLMEndpointValidator) ValidateUpdate(ctx context.Context, oldObj, newObj *servingv1alpha1.LLMEndpoint) (admission.Warnings, error) {
	return v.validate(ctx, oldObj, newObj)
}

// ValidateDelete implements admission.Validator. Any LLMEndpoint may be
// deleted; the webhook is not registered for deletes.
func (v *LLMEndpointValidator) ValidateDelete(context.Context, *servingv1alpha1.LLMEndpoint) (admission.Warnings, error) {
	return nil, nil
}

func (v *LLMEndpointValidator) validate(ctx context.Context, old, e *servingv1alpha1.LLMEndpoint) (admission.Warnings, error) {
	var errs field.ErrorList
	if slices.Contains(systemNamespaces, e.Namespace) {
		errs = append(errs, field.Forbidden(field.NewPath("metadata", "namespace"),
			fmt.Sprintf("LLMEndpoints may not live in %s: it holds the cluster's own workloads and Leases, which the routers' RBAC (update on Leases in their namespace) would reach; use a namespace of your own", e.Namespace)))
	}
	if old != nil {
		errs = append(errs, validateUpdate(old, e)...)
	}
	errs = append(errs, validateSpec(e)...)
	if len(errs) > 0 {
		return nil, apierrors.NewInvalid(servingv1alpha1.GroupVersion.WithKind("LLMEndpoint").GroupKind(), e.Name, errs)
	}
	// An object on its way out only sheds finalizers; warning about it
	// would be noise.
	if e.DeletionTimestamp != nil {
		return nil, nil
	}
	warnings := specWarnings(e)
	if len(v.WatchNamespaces) > 0 && !slices.Contains(v.WatchNamespaces, e.Namespace) {
		return append(warnings, fmt.Sprintf("the warmroute operator watches only the namespaces %v: nothing will reconcile this LLMEndpoint in %s", v.WatchNamespaces, e.Namespace)), nil
	}
	warnings = append(warnings, v.referenceWarnings(ctx, e)...)
	warnings = append(warnings, v.cacheWarnings(ctx, e)...)
	return warnings, nil
}

// validateUpdate holds the rules about how an LLMEndpoint may change.
func validateUpdate(old, e *servingv1alpha1.LLMEndpoint) field.ErrorList {
	var errs field.ErrorList
	if e.Spec.Model.Name != old.Spec.Model.Name {
		errs = append(errs, field.Invalid(field.NewPath("spec", "model", "name"), e.Spec.Model.Name,
			fmt.Sprintf("the served model name cannot change in place (it was %q): clients send it as \"model\", so renaming it would break every client at once; create a new LLMEndpoint with the new name and move clients to it", old.Spec.Model.Name)))
	}
	return errs
}

// validateSpec checks what the CRD's schema and CEL rules do not: label
// syntax, resource quantities, weights URIs that stay inside their claim,
// a trusted tenant header only the gateway can reach, and what the vLLM
// command line would refuse or weaken (validateVLLM). The schema refuses
// the rest before the webhook is called (owned
// vLLM flags in spec.model.args, the minimum grace period, the shape of
// every URI), so none of it is repeated here.
func validateSpec(e *servingv1alpha1.LLMEndpoint) field.ErrorList {
	spec := field.NewPath("spec")
	var errs field.ErrorList
	errs = append(errs, metav1validation.ValidateLabels(e.Spec.Model.NodeSelector, spec.Child("model", "nodeSelector"))...)
	// The CRD's URI rule checks the shape (pvc://, hf://, absolute path)
	// but lets through a claim path with ".." (which would leave the
	// mounted claim) and a claim name longer than a PersistentVolumeClaim's
	// 253 characters; ParseWeightsURI refuses both. Of its refusals only
	// those reach it here: the API server refuses a wrong shape first.
	errs = append(errs, validateWeightsURI(e.Spec.Model.URI, spec.Child("model", "uri"))...)
	for i, a := range e.Spec.LoRAAdapters {
		errs = append(errs, validateWeightsURI(a.URI, spec.Child("loraAdapters").Index(i).Child("uri"))...)
	}
	errs = append(errs, validateVLLM(e.Spec.Model, spec.Child("model"))...)
	errs = append(errs, validateRecordedImage(e.Annotations[servingv1alpha1.AnnotationVLLMImage])...)
	errs = append(errs, validateResources(e.Spec.Model.Resources, spec.Child("model", "resources"))...)
	errs = append(errs, validateResources(e.Spec.Router.Resources, spec.Child("router", "resources"))...)
	errs = append(errs, validateTrustedHeader(e)...)
	errs = append(errs, validateInferencePoolAuth(e)...)
	return errs
}

func validateWeightsURI(uri string, p *field.Path) field.ErrorList {
	if _, err := servingv1alpha1.ParseWeightsURI(uri); err != nil {
		return field.ErrorList{field.Invalid(p, uri, err.Error())}
	}
	return nil
}

// validateResources refuses requests above their limits, which the
// Deployment would otherwise accept and every pod of it fail on.
func validateResources(r *corev1.ResourceRequirements, p *field.Path) field.ErrorList {
	if r == nil {
		return nil
	}
	var errs field.ErrorList
	for _, name := range sortedResourceNames(r.Requests) {
		req := r.Requests[name]
		if req.Sign() < 0 {
			errs = append(errs, field.Invalid(p.Child("requests").Key(string(name)), req.String(), "must not be negative"))
		}
		if lim, ok := r.Limits[name]; ok && req.Cmp(lim) > 0 {
			errs = append(errs, field.Invalid(p.Child("requests").Key(string(name)), req.String(),
				fmt.Sprintf("must not exceed the limit %s", lim.String())))
		}
	}
	for _, name := range sortedResourceNames(r.Limits) {
		if lim := r.Limits[name]; lim.Sign() < 0 {
			errs = append(errs, field.Invalid(p.Child("limits").Key(string(name)), lim.String(), "must not be negative"))
		}
	}
	return errs
}

func sortedResourceNames(l corev1.ResourceList) []corev1.ResourceName {
	names := make([]corev1.ResourceName, 0, len(l))
	for n := range l {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// equalPtr reports whether a and b are both nil or point to equal values.
func equalPtr(a, b *int32) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// gpuResource is the extended resource the operator sets from spec.model.gpus.
const gpuResource corev1.ResourceName = "nvidia.com/gpu"

// specWarnings are the spec's legal but doubtful choices.
func specWarnings(e *servingv1alpha1.LLMEndpoint) admission.Warnings {
	var w admission.Warnings
	instances := servingv1alpha1.Replicas(e)
	prefixAware := e.Spec.Routing.Strategy == servingv1alpha1.RoutingStrategyPrefixAware || e.Spec.Routing.Strategy == ""
	if prefixAware && instances == 1 {
		w = append(w, "spec.replicas: 1 instance with strategy PREFIX_AWARE: prefix-aware routing needs at least 2 instances to matter, and the endpoint reports Degraded (SingleInstance) until it has them")
	}
	if pl, mml := e.Spec.Routing.PrefixAware.PrefixLength, e.Spec.Model.MaxModelLen; prefixAware && pl != nil && mml != nil {
		if ctxChars := int64(*mml) * charsPerToken; int64(*pl) > ctxChars {
			w = append(w, fmt.Sprintf("spec.routing.prefixAware.prefixLength: %d characters is longer than the model's whole context (maxModelLen %d tokens, about %d characters): every prompt becomes its own routing key, so prompts that share a beginning no longer meet on one instance; use a prefixLength below %d",
				*pl, *mml, ctxChars, ctxChars))
		}
	}
	if r := e.Spec.Model.Resources; r != nil {
		_, inReq := r.Requests[gpuResource]
		_, inLim := r.Limits[gpuResource]
		if inReq || inLim {
			w = append(w, fmt.Sprintf("spec.model.resources: %s is ignored: the operator sets it from spec.model.gpus (%d)", gpuResource, servingv1alpha1.GPUs(e)))
		}
	}
	for i, a := range e.Spec.LoRAAdapters {
		if a.Replicas != nil && *a.Replicas > instances && instances > 0 {
			w = append(w, fmt.Sprintf("spec.loraAdapters[%d].replicas: %d is more than the %d instances; the adapter %q is placed on all of them", i, *a.Replicas, instances, a.Name))
		}
	}
	w = append(w, trustedHeaderWarnings(e)...)
	w = append(w, inferencePoolWarnings(e)...)
	w = append(w, flowControlWarnings(e)...)
	return append(w, exposureWarnings(e)...)
}

// referenceWarnings warns about the PersistentVolumeClaims the endpoint
// refers to but that do not exist (yet). They are warnings, not
// errors, because creating the endpoint before them is legitimate (as
// `kubectl apply -f dir/` does in any order); its pods wait until they
// appear.
func (v *LLMEndpointValidator) referenceWarnings(ctx context.Context, e *servingv1alpha1.LLMEndpoint) admission.Warnings {
	if v.Reader == nil {
		return nil
	}
	var w admission.Warnings
	claims := map[string]string{} // claim → the first field naming it
	var order []string
	add := func(uri, path string) {
		if src, err := servingv1alpha1.ParseWeightsURI(uri); err == nil && src.OnClaim() {
			if _, seen := claims[src.Claim]; !seen {
				claims[src.Claim] = path
				order = append(order, src.Claim)
			}
		}
	}
	add(e.Spec.Model.URI, "spec.model.uri")
	for i, a := range e.Spec.LoRAAdapters {
		add(a.URI, fmt.Sprintf("spec.loraAdapters[%d].uri", i))
	}
	for _, c := range order {
		w = append(w, v.lookup(ctx, e.Namespace, c, &corev1.PersistentVolumeClaim{}, claims[c], "PersistentVolumeClaim",
			"pods that mount it stay Pending until it exists")...)
	}
	return w
}

// lookup gets one referenced object and returns a warning when it is
// missing or cannot be checked.
func (v *LLMEndpointValidator) lookup(ctx context.Context, ns, name string, obj client.Object, path, kind, consequence string) admission.Warnings {
	err := v.Reader.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, obj)
	switch {
	case err == nil:
		return nil
	case apierrors.IsNotFound(err):
		return admission.Warnings{fmt.Sprintf("%s: %s %s/%s does not exist; %s", path, kind, ns, name, consequence)}
	default:
		return admission.Warnings{fmt.Sprintf("%s: could not check that %s %s/%s exists: %v", path, kind, ns, name, err)}
	}
}
