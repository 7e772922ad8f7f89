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

	// queued is the requests waiting in the routers' flow-control queues
	// now, over all tenants: they arrived while every instance that could
	// serve them was full. Absent while flow control is off
	// (spec.router.flowControl unset) or no router answered.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Queued *int32 `json:"queued,omitempty"`

	// shedPerMinute is the requests flow control refused from its queues
	// (429 tenant_queue_full; 503 not_queued, queue_full, queue_timeout)
	// per minute over the last 5 minutes, over all tenants, e.g. "12.4".
	// Rate-limited requests are not counted: they are the tenant's own
	// budget, not the fleet's. Absent while flow control is off or before
	// two scrapes of the routers.
	// +kubebuilder:validation:MaxLength=24
	// +kubebuilder:validation:Pattern=`^[0-9]+(\.[0-9]+)?$`
	// +optional
	ShedPerMinute string `json:"shedPerMinute,omitempty"`

	// shedTenants are the tenants shed over the same 5 minutes, most shed
	// first, at most 3; ".default" stands for every tenant without an
	// entry of its own.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=3
	// +optional
	ShedTenants []TenantShed `json:"shedTenants,omitempty"`

	// observedTime is when these figures were measured.
	// +optional
	ObservedTime *metav1.Time `json:"observedTime,omitempty"`
}

// TenantShed is one tenant's share of the requests shed.
type TenantShed struct {
	// name is the tenant (spec.router.flowControl.tenants[].name, or
	// ".default").
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +required
	Name string `json:"name"`

	// perMinute is the tenant's requests shed per minute over the last 5
	// minutes, e.g. "9.8".
	// +kubebuilder:validation:MaxLength=24
	// +kubebuilder:validation:Pattern=`^[0-9]+(\.[0-9]+)?$`
	// +required
	PerMinute string `json:"perMinute"`
}
