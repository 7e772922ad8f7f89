// Package custommetrics serves the Kubernetes custom metrics API
// (custom.metrics.k8s.io) for LLMEndpoint objects from inside the operator,
// so that an autoscaling/v2 HorizontalPodAutoscaler with a `type: Object`
// metric can scale an endpoint with no metrics stack installed.
//
// The read path is cheap by construction: a background Scraper reads every
// endpoint's router and vLLM pods' Prometheus /metrics on a fixed interval
// and keeps the latest figures in memory; the API server (Provider) and the
// status publisher (StatusPublisher) only read that memory. Nothing is
// written to the API server per scrape and nothing is done per request the
// routers serve.
package custommetrics
