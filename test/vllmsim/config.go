package vllmsim

import (
	"cmp"
	"errors"
	"fmt"
	"time"
)

// Config describes one simulated vLLM instance. The zero value of every field
// means "use the default"; the defaults approximate Llama-3.1-70B-Instruct
// served by vLLM on 8×H100 (tensor parallel 8).
type Config struct {
	// Listen is the address Start binds, for example "127.1.0.5:8000".
	// Default "127.0.0.1:8000"; port 0 picks a free port.
	Listen string
	// Model is the served base model name (vLLM's --served-model-name).
	Model string
	// InstanceID is reported in the X-Vllmsim-Instance header of every
	// response. Default: the address the server listens on.
	InstanceID string

	// CacheTokens is the KV-cache capacity in tokens. Running requests pin
	// their blocks; the rest holds the prefix cache. Default 1,048,576
	// (about what 8×H100 leave for Llama-3.1-70B at 0.9 memory utilisation).
	CacheTokens int
	// BlockSize is the number of tokens per KV block (vLLM's --block-size).
	// Default 16.
	BlockSize int
	// MaxModelLen bounds prompt plus completion tokens. Default 131072,
	// capped at the cache's capacity.
	MaxModelLen int
	// CharsPerToken is how many bytes of text make one simulated token.
	// Default 4.
	CharsPerToken int

	// PrefillTokensPerSec is the engine's prefill throughput in simulated
	// time. Default 25,000.
	PrefillTokensPerSec float64
	// DecodeStep is the duration of an engine step that decodes at least one
	// request: the inter-token latency. Default 30ms.
	DecodeStep time.Duration
	// StepOverhead is the duration of a step that only prefills, on top of
	// the prefill work itself. Default 5ms.
	StepOverhead time.Duration
	// MaxRunning is the most requests in the running batch (vLLM's
	// --max-num-seqs); the rest wait in FIFO order. Default 64.
	MaxRunning int
	// MaxBatchedTokens is the token budget of one engine step (vLLM's
	// --max-num-batched-tokens): decodes take one each, prefill chunks
	// fill the rest. Default 8192.
	MaxBatchedTokens int
	// DefaultMaxTokens is the completion length when a request sets neither
	// max_tokens nor max_completion_tokens. Default 16.
	DefaultMaxTokens int

	// TimeScale multiplies every wall-clock wait: 0.01 runs 100× faster
	// than simulated time. Metrics and headers report simulated time.
	// Default 1.
	TimeScale float64

	// MaxLoRAs is the most adapters resident at once; loading one more fails
	// with 400. Zero means unlimited. Stricter than vLLM, whose CPU adapter
	// cache silently evicts, so that tests notice over-placement.
	MaxLoRAs int
	// LoRAModules are adapters loaded at start (vLLM's --lora-modules), name
	// to path.
	LoRAModules map[string]string
	// LoRAFail lists adapter names whose load fails, for tests.
	LoRAFail []string
	// LoRALoadDelay is how long a runtime adapter load takes, in simulated
	// time. Default 0.
	LoRALoadDelay time.Duration
	// LoRAPathExists says whether an adapter path exists where vLLM would
	// look: a load of one that does not fails with vLLM's 404 "No adapter
	// found". Default: an absolute path must be a directory on this host;
	// anything else is taken for a Hugging Face id, which the simulator
	// cannot check and accepts.
	LoRAPathExists func(path string) bool

	// ShutdownTimeout is vLLM's --shutdown-timeout (v0.18+), what Terminate
	// (SIGTERM) does: zero aborts every request in flight at once; a
	// positive value refuses new requests with 503 and waits up to this
	// long for the running ones. Wall-clock, not scaled by TimeScale: it
	// pairs with a pod's grace period, which passes in real time.
	ShutdownTimeout time.Duration

	// APIKey is vLLM's --api-key: when set, a request to a path under /v1
	// (OPTIONS aside) needs exactly "Authorization: Bearer <APIKey>" or
	// gets vLLM's 401; /health, /metrics, /invocations and the rest stay
	// open, as in vLLM.
	APIKey string
}

// Defaults for Config; see the field comments.
const (
	DefaultListen              = "127.0.0.1:8000"
	DefaultModel               = "meta-llama/Llama-3.1-70B-Instruct"
	DefaultCacheTokens         = 1 << 20
	DefaultBlockSize           = 16
	DefaultMaxModelLen         = 131072
	DefaultCharsPerToken       = 4
	DefaultPrefillTokensPerSec = 25000
	DefaultDecodeStep          = 30 * time.Millisecond
	DefaultStepOverhead        = 5 * time.Millisecond
	DefaultMaxRunning          = 64
	DefaultMaxBatchedTokens    = 8192
	DefaultMaxTokens           = 16
)

// withDefaults returns c with every zero field set to its default, or an
// error for values that cannot describe an engine.
func (c Config) withDefaults() (Config, error) {
	c.Listen = cmp.Or(c.Listen, DefaultListen)
	c.Model = cmp.Or(c.Model, DefaultModel)
	c.CacheTokens = cmp.Or(c.CacheTokens, DefaultCacheTokens)
	c.BlockSize = cmp.Or(c.BlockSize, DefaultBlockSize)
	c.MaxModelLen = cmp.Or(c.MaxModelLen, DefaultMaxModelLen)
	c.CharsPerToken = cmp.Or(c.CharsPerToken, DefaultCharsPerToken)
	c.PrefillTokensPerSec = cmp.Or(c.PrefillTokensPerSec, DefaultPrefillTokensPerSec)
	c.DecodeStep = cmp.Or(c.DecodeStep, DefaultDecodeStep)
	c.StepOverhead = cmp.Or(c.StepOverhead, DefaultStepOverhead)
	c.MaxRunning = cmp.Or(c.MaxRunning, DefaultMaxRunning)
	c.MaxBatchedTokens = cmp.Or(c.MaxBatchedTokens, DefaultMaxBatchedTokens)
	c.DefaultMaxTokens = cmp.Or(c.DefaultMaxTokens, DefaultMaxTokens)
	c.TimeScale = cmp.Or(c.TimeScale, 1)

	var errs []error
	for _, f := range []struct {
		name  string
		value float64
	}{
		{"cache tokens", float64(c.CacheTokens)}, {"block size", float64(c.BlockSize)},
		{"max model len", float64(c.MaxModelLen)}, {"chars per token", float64(c.CharsPerToken)},
		{"prefill tokens per second", c.PrefillTokensPerSec}, {"decode step", float64(c.DecodeStep)},
		{"step overhead", float64(c.StepOverhead)}, {"max running", float64(c.MaxRunning)},
		{"max batched tokens", float64(c.MaxBatchedTokens)}, {"default max tokens", float64(c.DefaultMaxTokens)},
		{"time scale", c.TimeScale},
	} {
		if f.value <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive", f.name))
		}
	}
	if c.MaxLoRAs < 0 || c.LoRALoadDelay < 0 || c.ShutdownTimeout < 0 {
		errs = append(errs, errors.New("max loras, lora load delay and shutdown timeout must not be negative"))
	}
	if c.CacheTokens < c.BlockSize {
		errs = append(errs, fmt.Errorf("cache tokens (%d) must hold at least one block of %d", c.CacheTokens, c.BlockSize))
	}
	// A sequence must fit in the cache's whole blocks, or it could never be
	// admitted.
	c.MaxModelLen = min(c.MaxModelLen, c.CacheTokens/c.BlockSize*c.BlockSize)
	return c, errors.Join(errs...)
}
