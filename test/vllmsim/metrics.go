package vllmsim

import (
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric names as vLLM (V1 engine) exposes them on /metrics at
// PinnedRelease (vllm/v1/metrics/loggers.py). Counters carry the _total
// suffix that Python's prometheus_client adds on the wire, so a scrape of
// the simulator and of vLLM read the same. vllm:time_per_output_token_seconds
// is gone (deprecated in v0.11, removed by vLLM PR #32661 in 2026): its
// successor is vllm:inter_token_latency_seconds; vllm:gpu_cache_usage_perc
// and vllm:gpu_prefix_cache_* were removed for the names below (#29330).
const (
	MetricRequestsRunning    = "vllm:num_requests_running"
	MetricRequestsWaiting    = "vllm:num_requests_waiting"
	MetricKVCacheUsage       = "vllm:kv_cache_usage_perc"
	MetricPrefixCacheQueries = "vllm:prefix_cache_queries_total"
	MetricPrefixCacheHits    = "vllm:prefix_cache_hits_total"
	MetricPromptTokens       = "vllm:prompt_tokens_total"
	MetricGenerationTokens   = "vllm:generation_tokens_total"
	MetricRequestSuccess     = "vllm:request_success_total"
	MetricTimeToFirstToken   = "vllm:time_to_first_token_seconds"
	MetricInterTokenLatency  = "vllm:inter_token_latency_seconds"
	MetricE2ERequestLatency  = "vllm:e2e_request_latency_seconds"
	MetricRequestQueueTime   = "vllm:request_queue_time_seconds"
	MetricRequestPrefillTime = "vllm:request_prefill_time_seconds"
	MetricRequestDecodeTime  = "vllm:request_decode_time_seconds"
	MetricRequestPrompt      = "vllm:request_prompt_tokens"
	MetricRequestGeneration  = "vllm:request_generation_tokens"
	MetricLoRARequestsInfo   = "vllm:lora_requests_info"
	MetricCacheConfigInfo    = "vllm:cache_config_info"
)

// Bucket boundaries copied from vLLM so that histogram_quantile over the
// simulator and over vLLM is equally coarse.
var (
	ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
		0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	itlBuckets = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
		1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
	requestLatencyBuckets = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
		40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
)

// metrics are one server's vLLM metrics in its own registry, so that many
// simulators can share a process. Every series has vLLM's labels
// model_name (the base model, also for adapter requests) and engine="0".
type metrics struct {
	registry *prometheus.Registry

	running, waiting, kvUsage        prometheus.Gauge
	queries, hits                    prometheus.Counter
	promptTokens, generationTokens   prometheus.Counter
	successLength                    prometheus.Counter
	ttft, itl                        prometheus.Observer
	e2e, queueTime, prefill, decode  prometheus.Observer
	requestPrompt, requestGeneration prometheus.Observer
	loraInfo                         *prometheus.GaugeVec
	loraInfoKey                      string
	maxLoRAs                         string
}

func newMetrics(cfg Config) *metrics {
	reg := prometheus.NewRegistry()
	constLabels := prometheus.Labels{"model_name": cfg.Model, "engine": "0"}
	gauge := func(name, help string) prometheus.Gauge {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: constLabels})
		reg.MustRegister(g)
		return g
	}
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: constLabels})
		reg.MustRegister(c)
		return c
	}
	histogram := func(name, help string, buckets []float64) prometheus.Observer {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets, ConstLabels: constLabels})
		reg.MustRegister(h)
		return h
	}
	lenBuckets := build125Buckets(cfg.MaxModelLen)

	success := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricRequestSuccess, Help: "Count of successfully processed requests.", ConstLabels: constLabels,
	}, []string{"finished_reason"})
	reg.MustRegister(success)
	loraInfo := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: MetricLoRARequestsInfo, Help: "Running stats on lora requests.",
	}, []string{"max_lora", "waiting_lora_adapters", "running_lora_adapters"})
	reg.MustRegister(loraInfo)
	cacheInfo := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: MetricCacheConfigInfo, Help: "Information of the LLMEngine CacheConfig",
	}, []string{"engine", "block_size", "num_gpu_blocks", "enable_prefix_caching"})
	reg.MustRegister(cacheInfo)
	cacheInfo.WithLabelValues("0", strconv.Itoa(cfg.BlockSize), strconv.Itoa(cfg.CacheTokens/cfg.BlockSize), "True").Set(1)

	m := &metrics{
		registry:          reg,
		running:           gauge(MetricRequestsRunning, "Number of requests in model execution batches."),
		waiting:           gauge(MetricRequestsWaiting, "Number of requests waiting to be processed."),
		kvUsage:           gauge(MetricKVCacheUsage, "KV-cache usage. 1 means 100 percent usage."),
		queries:           counter(MetricPrefixCacheQueries, "Prefix cache queries, in terms of number of queried tokens."),
		hits:              counter(MetricPrefixCacheHits, "Prefix cache hits, in terms of number of cached tokens."),
		promptTokens:      counter(MetricPromptTokens, "Number of prefill tokens processed."),
		generationTokens:  counter(MetricGenerationTokens, "Number of generation tokens processed."),
		successLength:     success.WithLabelValues("length"),
		ttft:              histogram(MetricTimeToFirstToken, "Histogram of time to first token in seconds.", ttftBuckets),
		itl:               histogram(MetricInterTokenLatency, "Histogram of inter-token latency in seconds.", itlBuckets),
		e2e:               histogram(MetricE2ERequestLatency, "Histogram of e2e request latency in seconds.", requestLatencyBuckets),
		queueTime:         histogram(MetricRequestQueueTime, "Histogram of time spent in WAITING phase for request.", requestLatencyBuckets),
		prefill:           histogram(MetricRequestPrefillTime, "Histogram of time spent in PREFILL phase for request.", requestLatencyBuckets),
		decode:            histogram(MetricRequestDecodeTime, "Histogram of time spent in DECODE phase for request.", requestLatencyBuckets),
		requestPrompt:     histogram(MetricRequestPrompt, "Number of prefill tokens processed.", lenBuckets),
		requestGeneration: histogram(MetricRequestGeneration, "Number of generation tokens processed.", lenBuckets),
		loraInfo:          loraInfo,
		loraInfoKey:       "unset", // real keys contain a NUL, so the first update writes
		maxLoRAs:          strconv.Itoa(cfg.MaxLoRAs),
	}
	return m
}

// setLoRAInfo publishes which adapters have running and waiting requests,
// as one series whose value is the time of the last change, like vLLM's.
func (m *metrics) setLoRAInfo(running, waiting []string) {
	r, w := strings.Join(running, ","), strings.Join(waiting, ",")
	key := r + "\x00" + w
	if key == m.loraInfoKey {
		return
	}
	m.loraInfoKey = key
	m.loraInfo.Reset()
	m.loraInfo.WithLabelValues(m.maxLoRAs, w, r).SetToCurrentTime()
}

// build125Buckets is vLLM's build_1_2_5_buckets: 1, 2, 5, 10, 20, 50, …
// up to max.
func build125Buckets(max int) []float64 {
	var out []float64
	for scale := 1; ; scale *= 10 {
		for _, m := range []int{1, 2, 5} {
			if m*scale > max {
				return out
			}
			out = append(out, float64(m*scale))
		}
	}
}
