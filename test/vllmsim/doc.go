// Package vllmsim is a vLLM-compatible simulator for tests and benchmarks
// on machines without GPUs. It serves vLLM's HTTP surface and behaves like
// vLLM where a router can tell the difference: which prompts hit the prefix
// cache, how queueing and prefill load show in time to first token, and
// which LoRA adapters are loaded.
//
// # Command line
//
// The simulator speaks the `vllm serve` command line of PinnedRelease, the
// operator's default vLLM: ServeCLI parses a container's arguments as that
// release's argparse parser would, from servecli/<release>.json (the vLLM
// source files and tag it was read from are recorded in it). The harness
// starts no simulator for a pod whose arguments the release refuses, and
// `vllmsim serve <vllm serve args>` exits 2 with argparse's message, as
// vLLM does.
//
// # HTTP surface
//
//   - POST /v1/chat/completions, POST /v1/completions: streaming (SSE,
//     "data: {...}" events then "data: [DONE]") and not; usage with
//     prompt_tokens_details.cached_tokens; max_tokens or
//     max_completion_tokens (default Config.DefaultMaxTokens), cache_salt,
//     stream_options.include_usage. Completions take a string, a list of
//     strings (one choice each) or token ids. Every request generates
//     exactly max_tokens tokens (finish_reason "length") of deterministic
//     text.
//   - POST /invocations: vLLM's SageMaker route; a body with "messages" is a
//     chat request, one with "prompt" a completions request.
//   - GET /v1/models: the base model and the loaded adapters.
//   - GET /health, GET|POST /ping: 200, or 503 after SetHealthy(false).
//   - GET /metrics: vLLM's metric names (the Metric* constants) in the
//     server's own registry, labelled model_name and engine.
//   - POST /v1/load_lora_adapter {"lora_name","lora_path"} and
//     POST /v1/unload_lora_adapter {"lora_name"}: vLLM's runtime LoRA API,
//     with its messages and codes (400 InvalidUserInput when already loaded
//     or fields are missing, 404 NotFoundError when unloading an unknown
//     adapter, 400 BadRequestError when a load fails).
//
// With Config.APIKey (--api-key, else VLLM_API_KEY) every path under /v1
// needs exactly "Authorization: Bearer <key>", else 401
// {"error":"Unauthorized"}, as vLLM's middleware answers; the other paths
// stay open.
//
// Errors use vLLM's body {"error": {"message", "type", "param", "code"}}; an
// unknown model is 404 NotFoundError. Every response carries
// X-Vllmsim-Instance; completions also carry X-Vllmsim-Prompt-Tokens,
// X-Vllmsim-Cached-Tokens and X-Vllmsim-Ttft-Seconds. A streaming response's
// headers are sent at once, before prefill, as vLLM sends them; its cached
// tokens and TTFT, unknown then, follow as HTTP trailers.
//
// # Shutdown
//
// Terminate is SIGTERM to vLLM 0.18 or later: without
// Config.ShutdownTimeout (--shutdown-timeout) every request in flight is
// aborted at once (a stream stops without [DONE]); with it, new requests
// get 503, /health answers 503, and running requests have that long to
// finish before the rest are aborted. A LoRA load whose path does not exist
// (Config.LoRAPathExists) fails with vLLM's 404 "No adapter found".
//
// # Tokens and the prefix cache
//
// Text becomes tokens CharsPerToken bytes at a time (a token's id is the
// hash of its bytes). Chat messages are rendered with a Llama-3-like
// template whose markers are single tokens, and the assistant header is
// appended as the generation prompt; generated text is made of whole-token
// words, so the next turn of a conversation re-tokenizes the previous
// answer into the very tokens that were generated.
//
// The KV cache is a pool of CacheTokens/BlockSize blocks. Full blocks are
// identified by a hash chained over their tokens; the first block's parent
// is derived from the adapter and cache_salt, so neither shares blocks
// with another. A request hits the longest chain of cached blocks starting
// at its first block, but never its last prompt token (vLLM recomputes it
// to get logits). Blocks of computed tokens, prompt and generated, are
// cached as soon as they are full. Running requests pin their blocks and
// reserve the rest of their length; the other blocks stay cached until
// evicted, least recently freed first and a chain's tail before its head.
// PrefixCache is the same cache without the engine, for offline oracles.
//
// # Timing
//
// See engine for the step model: at most MaxRunning requests run and the
// rest wait in order; each step has a MaxBatchedTokens budget in which
// running requests decode one token each and prefills take chunks in
// admission order; a step lasts prefill tokens ÷ PrefillTokensPerSec plus
// DecodeStep (or StepOverhead when nothing decodes). Time to first token
// is therefore queueing plus waiting for the prefill work ahead plus the
// request's own uncached tokens ÷ PrefillTokensPerSec plus a step's fixed
// cost. The defaults (25,000 prefill tokens/s, 30 ms per decode step, 64
// running, 8,192-token steps, 1,048,576 tokens of cache) are in the range of
// Llama-3.1-70B on 8×H100.
//
// TimeScale multiplies every wall-clock wait, so 0.01 runs a simulated
// second in 10 ms. The engine computes times in simulated seconds and then
// waits for the wall clock, so what it reports — the TTFT and latency
// histograms and the X-Vllmsim-Ttft-Seconds header — is in simulated
// seconds and the same at any scale, unaffected by the host's scheduling
// jitter. Arrival times alone come from the wall clock.
//
// # Running many instances
//
// Each Server owns its engine, adapters and registry, so tests start as
// many as they need in one process:
//
//	for i, addr := range []string{"127.1.0.5:8000", "127.1.0.6:8000"} {
//		s, err := vllmsim.Start(vllmsim.Config{Listen: addr, InstanceID: fmt.Sprint("pod-", i), TimeScale: 0.01})
//		...
//		defer s.Close() // or Shutdown(ctx) to let requests finish
//	}
//
// The vllmsim command (cmd/vllmsim) serves one instance with a flag per
// Config field.
package vllmsim
