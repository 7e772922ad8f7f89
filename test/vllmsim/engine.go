package vllmsim

import (
	"errors"
	"slices"
	"sync"
	"time"
)

// The engine is a step-by-step model of vLLM V1's scheduler, run in
// simulated time:
//
//   - At most MaxRunning sequences run; the rest wait, first come first
//     served. A waiting sequence is admitted when a slot and enough KV
//     blocks are free; its prefix-cache lookup happens then, as in vLLM.
//   - Each step has a budget of MaxBatchedTokens. Running sequences are
//     served in admission order: a decoding sequence takes one token, a
//     prefilling one takes the next chunk of its uncached prompt (chunked
//     prefill). Newly admitted sequences get what is left.
//   - A step lasts prefill tokens ÷ PrefillTokensPerSec, plus DecodeStep if
//     it decodes anything, else plus StepOverhead. So prefill is one shared
//     resource: under load a request waits behind everyone else's uncached
//     tokens, and a long prefill stretches every running request's
//     inter-token time, which is how prefix hits and overload show up in
//     time to first token on a real engine.
//   - Full blocks of computed tokens, generated ones included, are hashed
//     into the prefix cache as soon as they are computed.
//
// Time in the model is simulated seconds since the engine started. The loop
// computes each step from the model alone and then sleeps until the wall
// clock catches up with the step's end (scaled by TimeScale), so reported
// times are exact whatever the scheduling jitter of the host; when the host
// falls behind, steps run back to back until it has caught up.
type engine struct {
	cfg     Config
	tok     tokenizer
	metrics *metrics
	epoch   time.Time

	wake chan struct{}
	stop chan struct{}
	done chan struct{}

	mu       sync.Mutex
	pool     *blockPool
	waiting  []*seq
	running  []*seq
	clock    float64 // simulated end of the last step
	stopped  bool
	counters counters
	// maxInFlight is the most sequences ever running or waiting at once:
	// the high-water mark of num_requests_running + num_requests_waiting,
	// taken each time the gauges are set, so that a benchmark reads the
	// peak a scrape between two changes could miss.
	maxInFlight int
}

// counters mirror the metric counters for Stats.
type counters struct {
	requests, promptTokens, generationTokens, queries, hits int64
}

// seq is one prompt being served: a request, or one prompt of a batched
// completions request.
type seq struct {
	// Set before submission.
	adapter      string
	seed         uint64   // parent hash of the first block
	tokens       []uint64 // the prompt; the engine appends generated tokens
	prompt       int
	promptHashes []uint64 // hashes of the prompt's full blocks
	maxTokens    int
	outputSeed   uint64
	notify       chan struct{} // capacity 1; may be shared by a request's sequences
	everyToken   bool          // notify on each token, not only at the end

	// Guarded by engine.mu.
	state        seqState
	err          error
	held         []*block // the sequence's full blocks, in order
	reserved     int      // blocks reserved and not yet committed
	computed     int      // tokens whose KV is computed
	cachedTokens int
	generated    int
	arrival      float64
	admitted     float64
	firstToken   float64
	lastToken    float64
	finished     float64
}

type seqState int

const (
	seqWaiting seqState = iota
	seqRunning
	seqFinished
	seqAborted
)

var errEngineStopped = errors.New("engine stopped")

func newEngine(cfg Config, m *metrics) *engine {
	e := &engine{
		cfg:     cfg,
		tok:     tokenizer{charsPerToken: cfg.CharsPerToken},
		metrics: m,
		epoch:   time.Now(),
		wake:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
		pool:    newBlockPool(cfg.CacheTokens / cfg.BlockSize),
	}
	e.publishLocked()
	go e.run()
	return e
}

// newSeq prepares a sequence: the block hashing happens here, in the
// caller's goroutine, not under the engine lock.
func (e *engine) newSeq(adapter, salt string, prompt []uint64, maxTokens int, notify chan struct{}, everyToken bool) *seq {
	s := newSeq(e.cfg.BlockSize, adapter, salt, prompt, maxTokens)
	s.notify, s.everyToken = notify, everyToken
	return s
}

func newSeq(blockSize int, adapter, salt string, prompt []uint64, maxTokens int) *seq {
	s := &seq{
		adapter:   adapter,
		seed:      chainSeed(adapter, salt),
		tokens:    prompt,
		prompt:    len(prompt),
		maxTokens: maxTokens,
	}
	parent := s.seed
	for i := 0; (i+1)*blockSize <= len(prompt); i++ {
		parent = hashBlock(parent, prompt[i*blockSize:(i+1)*blockSize])
		s.promptHashes = append(s.promptHashes, parent)
	}
	s.outputSeed = hashUint64(parent, uint64(len(prompt)))
	return s
}

// simNow is the current simulated time.
func (e *engine) simNow() float64 {
	return time.Since(e.epoch).Seconds() / e.cfg.TimeScale
}

func (e *engine) wallClock(sim float64) time.Time {
	return e.epoch.Add(time.Duration(sim * e.cfg.TimeScale * float64(time.Second)))
}

func (e *engine) submit(seqs ...*seq) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped {
		return errEngineStopped
	}
	now := e.simNow()
	for _, s := range seqs {
		s.arrival = now
		e.waiting = append(e.waiting, s)
	}
	e.publishLocked()
	select {
	case e.wake <- struct{}{}:
	default:
	}
	return nil
}

// abort removes unfinished sequences, as vLLM does when a client goes away.
func (e *engine) abort(seqs ...*seq) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range seqs {
		switch s.state {
		case seqWaiting:
			e.waiting = slices.DeleteFunc(e.waiting, func(w *seq) bool { return w == s })
		case seqRunning:
			e.pool.release(s.held, s.reserved)
			s.held, s.reserved = nil, 0
			e.running = slices.DeleteFunc(e.running, func(r *seq) bool { return r == s })
		default:
			continue
		}
		s.state = seqAborted
	}
	e.publishLocked()
}

// shutdown stops the loop and fails every unfinished sequence.
func (e *engine) shutdown() {
	e.mu.Lock()
	if !e.stopped {
		e.stopped = true
		close(e.stop)
	}
	e.mu.Unlock()
	<-e.done
}

func (e *engine) run() {
	defer close(e.done)
	for {
		e.mu.Lock()
		st, ok := e.scheduleLocked()
		e.mu.Unlock()
		if !ok {
			select {
			case <-e.wake:
				continue
			case <-e.stop:
				e.failAll()
				return
			}
		}
		if !e.sleepUntil(st.end) {
			e.failAll()
			return
		}
		e.mu.Lock()
		e.completeLocked(st)
		e.mu.Unlock()
	}
}

func (e *engine) sleepUntil(sim float64) bool {
	d := time.Until(e.wallClock(sim))
	if d <= 0 {
		select {
		case <-e.stop:
			return false
		default:
			return true
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-e.stop:
		return false
	}
}

func (e *engine) failAll() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range slices.Concat(e.waiting, e.running) {
		e.pool.release(s.held, s.reserved)
		s.held, s.reserved = nil, 0
		s.state, s.err = seqAborted, errEngineStopped
		notify(s.notify)
	}
	e.waiting, e.running = nil, nil
	e.publishLocked()
}

// step is one engine iteration: the sequences that produce a token when it
// ends.
type step struct {
	start, end float64
	emit       []*seq
}

func (e *engine) scheduleLocked() (step, bool) {
	if len(e.running) == 0 {
		if len(e.waiting) == 0 {
			return step{}, false
		}
		e.clock = max(e.clock, e.waiting[0].arrival)
	}
	st := step{start: e.clock}
	budget := e.cfg.MaxBatchedTokens
	prefill, decodes := 0, 0
	advance := func(s *seq) {
		n := min(len(s.tokens)-s.computed, budget)
		if n == 0 {
			return
		}
		if s.generated > 0 {
			decodes++
		} else {
			prefill += n
		}
		budget -= n
		e.computeLocked(s, n)
		if s.computed == len(s.tokens) {
			st.emit = append(st.emit, s)
		}
	}
	for _, s := range e.running {
		advance(s)
	}
	for len(e.waiting) > 0 && len(e.running) < e.cfg.MaxRunning && budget > 0 {
		s := e.waiting[0]
		if s.arrival > st.start || !e.admitLocked(s, st.start) {
			break
		}
		e.waiting = e.waiting[1:]
		e.running = append(e.running, s)
		advance(s)
	}
	if prefill == 0 && decodes == 0 {
		return step{}, false
	}
	d := float64(prefill) / e.cfg.PrefillTokensPerSec
	if decodes > 0 {
		d += e.cfg.DecodeStep.Seconds()
	} else {
		d += e.cfg.StepOverhead.Seconds()
	}
	st.end = st.start + d
	e.clock = st.end
	e.publishLocked()
	return st, true
}

// admitLocked admits s if the KV cache has room and records its lookup.
func (e *engine) admitLocked(s *seq, now float64) bool {
	if !s.admit(e.pool, e.cfg.BlockSize) {
		return false
	}
	s.state = seqRunning
	s.admitted = now
	e.counters.queries += int64(s.prompt)
	e.counters.hits += int64(s.cachedTokens)
	e.metrics.queries.Add(float64(s.prompt))
	e.metrics.hits.Add(float64(s.cachedTokens))
	e.metrics.queueTime.Observe(now - s.arrival)
	return true
}

// admit looks the prompt up in the prefix cache and reserves blocks for the
// rest of the sequence. Like vLLM it never counts the whole prompt as a
// hit: the last prompt token is always computed, to produce logits.
func (s *seq) admit(p *blockPool, bs int) bool {
	maxHit := (s.prompt - 1) / bs
	hits := p.cachedPrefix(s.promptHashes[:maxHit])
	need := (s.prompt+s.maxTokens+bs-1)/bs - len(hits)
	if !p.admit(hits, need) {
		return false
	}
	s.held, s.reserved = hits, need
	s.computed = len(hits) * bs
	s.cachedTokens = s.computed
	return true
}

func (e *engine) computeLocked(s *seq, n int) { s.compute(e.pool, e.cfg.BlockSize, n) }

// compute marks n more tokens computed and caches every block they
// complete.
func (s *seq) compute(p *blockPool, bs, n int) {
	s.computed += n
	for len(s.held) < s.computed/bs {
		i := len(s.held)
		var h uint64
		if i < len(s.promptHashes) {
			h = s.promptHashes[i]
		} else {
			parent := s.seed
			if i > 0 {
				parent = s.held[i-1].hash
			}
			h = hashBlock(parent, s.tokens[i*bs:(i+1)*bs])
		}
		s.held = append(s.held, p.commit(h))
		s.reserved--
	}
}

func (e *engine) completeLocked(st step) {
	finished := false
	for _, s := range st.emit {
		if s.state != seqRunning {
			continue // aborted while the step ran
		}
		id, _ := e.tok.outputToken(s.outputSeed, s.generated)
		s.tokens = append(s.tokens, id)
		s.generated++
		if s.generated == 1 {
			s.firstToken = st.end
			e.metrics.ttft.Observe(st.end - s.arrival)
		} else {
			e.metrics.itl.Observe(st.end - s.lastToken)
		}
		s.lastToken = st.end
		if s.generated == s.maxTokens {
			e.finishLocked(s, st.end)
			finished = true
			continue
		}
		if s.everyToken {
			notify(s.notify)
		}
	}
	if finished {
		e.running = slices.DeleteFunc(e.running, func(s *seq) bool { return s.state != seqRunning })
	}
	e.publishLocked()
}

func (e *engine) finishLocked(s *seq, now float64) {
	e.pool.release(s.held, s.reserved)
	s.held, s.reserved = nil, 0
	s.state, s.finished = seqFinished, now
	m := e.metrics
	m.promptTokens.Add(float64(s.prompt))
	m.generationTokens.Add(float64(s.generated))
	m.successLength.Inc()
	m.e2e.Observe(now - s.arrival)
	m.prefill.Observe(s.firstToken - s.admitted)
	m.decode.Observe(now - s.firstToken)
	m.requestPrompt.Observe(float64(s.prompt))
	m.requestGeneration.Observe(float64(s.generated))
	e.counters.requests++
	e.counters.promptTokens += int64(s.prompt)
	e.counters.generationTokens += int64(s.generated)
	notify(s.notify)
}

// publishLocked sets the gauges from the scheduler's state.
func (e *engine) publishLocked() {
	e.maxInFlight = max(e.maxInFlight, len(e.running)+len(e.waiting))
	e.metrics.running.Set(float64(len(e.running)))
	e.metrics.waiting.Set(float64(len(e.waiting)))
	e.metrics.kvUsage.Set(float64(e.pool.inUse()) / float64(e.pool.capacity))
	e.metrics.setLoRAInfo(adapters(e.running), adapters(e.waiting))
}

// adapters lists the distinct adapters of seqs, sorted.
func adapters(seqs []*seq) []string {
	var out []string
	for _, s := range seqs {
		if s.adapter != "" {
			out = append(out, s.adapter)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// progress is what a handler needs to know about a sequence.
type progress struct {
	state        seqState
	err          error
	admitted     bool
	cachedTokens int
	generated    int
	arrival      float64
	firstToken   float64
	finished     float64
}

func (e *engine) progress(seqs []*seq) []progress {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]progress, len(seqs))
	for i, s := range seqs {
		out[i] = progress{
			state: s.state, err: s.err, admitted: s.state != seqWaiting,
			cachedTokens: s.cachedTokens, generated: s.generated,
			arrival: s.arrival, firstToken: s.firstToken, finished: s.finished,
		}
	}
	return out
}

func notify(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
