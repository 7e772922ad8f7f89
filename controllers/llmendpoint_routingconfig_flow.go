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

package controllers

import (
	"k8s.io/utils/ptr"

	routing "github.com/warmroute/warmroute/api/routing/v1alpha1"
	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

// buildFlowControl is spec.router.flowControl as the routers read it, with
// every default filled in: the CRD's schema defaults what it stores, but an
// object read before the schema had them (or built in a test) may lack
// them, and the routers never default. Nil when flow control is off.
func buildFlowControl(fc *v1alpha1.FlowControl) *routing.FlowControl {
	if fc == nil {
		return nil
	}
	out := &routing.FlowControl{
		Default:            tenantLimits(fc.Default),
		QueueTimeoutMillis: routing.DefaultQueueTimeoutMillis,
		MaxQueued:          int(ptr.Deref(fc.MaxQueued, routing.DefaultMaxQueued)),
	}
	if fc.QueueTimeout != nil {
		out.QueueTimeoutMillis = fc.QueueTimeout.Milliseconds()
	}
	if len(fc.Tenants) > 0 {
		out.Tenants = make(map[string]routing.TenantLimits, len(fc.Tenants))
		for _, t := range fc.Tenants {
			out.Tenants[t.Name] = tenantLimits(t.TenantFlow)
		}
	}
	return out
}

// tenantLimits fills one entry's unset fields with the field defaults
// (a listed tenant does not inherit from the default entry).
func tenantLimits(f v1alpha1.TenantFlow) routing.TenantLimits {
	return routing.TenantLimits{
		Weight:            int(ptr.Deref(f.Weight, routing.DefaultFlowWeight)),
		Priority:          int(ptr.Deref(f.Priority, routing.DefaultFlowPriority)),
		RequestsPerMinute: ptr.Deref(f.RequestsPerMinute, 0),
		TokensPerMinute:   ptr.Deref(f.TokensPerMinute, 0),
		MaxQueued:         int(ptr.Deref(f.MaxQueued, routing.DefaultTenantQueued)),
	}
}
