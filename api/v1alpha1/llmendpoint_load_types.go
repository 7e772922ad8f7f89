package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// LoadStatus is an endpoint's recent load, the figures the operator's
// custom metrics API serves to HorizontalPodAutoscalers, rounded for
// display. Decimals are strings: CRDs discourage floats.
type LoadStatus struct {
	// inFlightPerInstance is the requests in flight from all router
	// replicas, divided by the ready instances, e.g. "3.5".
	// +kubebuilder:validation:MaxLength=24
	// +kubebuilder:validation:Pattern=`^[0-9]+(\.[0-9]+)?$`
	// +optional
	InFlightPerInstance string `json:"inFlightPerInstance,omitempty"`

	// waitingPerInstance is the requests queued inside vLLM (waiting for a
	// batch slot), divided by the ready instances, e.g. "0.5".
	// +kubebuilder:validation:MaxLength=24
	// +kubebuilder:validation:Pattern=`^[0-9]+(\.[0-9]+)?$`
	// +optional
	WaitingPerInstance string `json:"waitingPerInstance,omitempty"`

	// prefixCacheHitPercent is the share of prompt tokens vLLM served from
	// its prefix cache over the last minute; absent while no prompt was
	// processed in it.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	PrefixCacheHitPercent *int32 `json:"prefixCacheHitPercent,omitempty"`

	// observedTime is when these figures were measured.
	// +optional
	ObservedTime *metav1.Time `json:"observedTime,omitempty"`
}
