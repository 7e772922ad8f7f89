package workload

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"time"
)

// Workload names, as they appear in reports.
const (
	NameLongContext = "long-context"
	NameSupportBot  = "support-bot"
	NameRAG         = "rag"
	NameShareGPT    = "sharegpt"
	NameMooncake    = "mooncake"
)

// LongContextConfig is Amazon's long-context case: many users, each request
// one of a set of shared ~8,000-token contexts followed by a short question
// of its own. Zero fields take the defaults in brackets.
type LongContextConfig struct {
	Seed           uint64
	Requests       int     // [1500]
	Contexts       int     // distinct shared contexts, chosen uniformly [128]
	ContextTokens  int     // [8000]
	QuestionTokens int     // median question length [40]
	MaxTokens      int     // completion length [64]
	Rate           float64 // Poisson arrivals per simulated second [12]
}

// LongContext generates the long-context workload.
func LongContext(cfg LongContextConfig) Workload {
	cfg.Requests = cmp.Or(cfg.Requests, 1500)
	cfg.Contexts = cmp.Or(cfg.Contexts, 128)
	cfg.ContextTokens = cmp.Or(cfg.ContextTokens, 8000)
	cfg.QuestionTokens = cmp.Or(cfg.QuestionTokens, 40)
	cfg.MaxTokens = cmp.Or(cfg.MaxTokens, 64)
	cfg.Rate = cmp.Or(cfg.Rate, 12)

	contexts := make([]string, cfg.Contexts)
	for i := range contexts {
		contexts[i] = tokensText(newRand(cfg.Seed, fmt.Sprintf("context/%d", i)), cfg.ContextTokens)
	}
	rng := newRand(cfg.Seed, NameLongContext)
	arrivals := poisson{rng: newRand(cfg.Seed, NameLongContext+"/arrivals"), rate: cfg.Rate}
	reqs := make([]Request, cfg.Requests)
	for i := range reqs {
		q := lognormal(rng, float64(cfg.QuestionTokens), 0.5, 4, 16*cfg.QuestionTokens)
		reqs[i] = Request{
			Arrival: arrivals.next(),
			Messages: []Message{
				{Role: "system", Content: contexts[rng.IntN(len(contexts))]},
				{Role: "user", Content: tokensText(rng, q)},
			},
			MaxTokens: cfg.MaxTokens,
		}
	}
	return Workload{Name: NameLongContext, Requests: reqs}
}

// SupportBotConfig is a customer-support bot: one long system prompt shared
// by every request, then each user's conversation, which grows turn by
// turn (the whole history is resent with every turn).
type SupportBotConfig struct {
	Seed         uint64
	Users        int           // conversations [240]
	Turns        int           // turns per conversation [5]
	SystemTokens int           // the shared system prompt [3000]
	UserTokens   int           // median user message [50]
	ReplyTokens  int           // median assistant reply, also its max_tokens [120]
	Rate         float64       // conversations started per simulated second [2]
	ThinkTime    time.Duration // mean pause between a reply and the next turn [5s]
}

// SupportBot generates the support-bot workload.
func SupportBot(cfg SupportBotConfig) Workload {
	cfg.Users = cmp.Or(cfg.Users, 240)
	cfg.Turns = cmp.Or(cfg.Turns, 5)
	cfg.SystemTokens = cmp.Or(cfg.SystemTokens, 3000)
	cfg.UserTokens = cmp.Or(cfg.UserTokens, 50)
	cfg.ReplyTokens = cmp.Or(cfg.ReplyTokens, 120)
	cfg.Rate = cmp.Or(cfg.Rate, 2)
	cfg.ThinkTime = cmp.Or(cfg.ThinkTime, 5*time.Second)

	reqs := chatStream{
		name: NameSupportBot, system: NameSupportBot + "/system",
		conversations: cfg.Users, rate: cfg.Rate, turns: func(*rand.Rand) int { return cfg.Turns },
		systemTokens: cfg.SystemTokens, userTokens: cfg.UserTokens, userSigma: 0.6,
		replyTokens: cfg.ReplyTokens, replySigma: 0.5, thinkTime: cfg.ThinkTime,
	}.generate(cfg.Seed)
	return Workload{Name: NameSupportBot, Requests: reqs}
}

// chatStream is a stream of multi-turn conversations that all open with
// one shared system prompt: the chat part of every chat workload.
type chatStream struct {
	name          string // seeds the conversations and names their sessions
	system        string // seeds the system prompt's text
	conversations int
	rate          float64 // conversations started per simulated second
	systemTokens  int
	// turns draws a conversation's length, the first draw from the
	// conversation's own generator.
	turns                   func(*rand.Rand) int
	userTokens, replyTokens int
	userSigma, replySigma   float64
	thinkTime               time.Duration
}

// generate returns the turns of the stream's conversations, which start as
// a Poisson process, ordered by arrival.
func (s chatStream) generate(seed uint64) []Request {
	system := []Message{{Role: "system", Content: tokensText(newRand(seed, s.system), s.systemTokens)}}
	starts := poisson{rng: newRand(seed, s.name+"/arrivals"), rate: s.rate}
	var reqs []Request
	for i := range s.conversations {
		rng := newRand(seed, fmt.Sprintf("%s/session/%d", s.name, i))
		turns := s.turns(rng)
		session := fmt.Sprintf("%s-%04d", s.name, i)
		reqs = append(reqs, s.conversation(rng, system, session, starts.next(), turns)...)
	}
	sortByArrival(reqs)
	return reqs
}

// conversation returns the turns of one conversation. Each turn carries the
// whole history; the assistant replies in the history are the generator's
// (as in a recorded chat replayed), and each turn asks for as many tokens
// as its recorded reply has.
func (s chatStream) conversation(rng *rand.Rand, system []Message, session string, start time.Duration, turns int) []Request {
	history := append([]Message(nil), system...)
	at := start
	out := make([]Request, 0, turns)
	for turn := range turns {
		user := lognormal(rng, float64(s.userTokens), s.userSigma, 2, 40*s.userTokens)
		reply := lognormal(rng, float64(s.replyTokens), s.replySigma, 4, 10*s.replyTokens)
		history = append(history, Message{Role: "user", Content: tokensText(rng, user)})
		out = append(out, Request{
			Session:   session,
			Turn:      turn,
			Arrival:   at,
			Messages:  append([]Message(nil), history...),
			MaxTokens: reply,
		})
		history = append(history, Message{Role: "assistant", Content: tokensText(rng, reply)})
		at += time.Duration(rng.ExpFloat64() * float64(s.thinkTime))
	}
	return out
}

// geometricTurns draws a conversation's length: geometric with the given
// mean, at least 1 and at most maxTurns.
func geometricTurns(rng *rand.Rand, mean float64, maxTurns int) int {
	turns := 1
	for turns < maxTurns && rng.Float64() > 1/mean {
		turns++
	}
	return turns
}

// documents generates n documents of log-normal length around tokens
// (between a quarter and maxFactor times it), each from its own generator
// so that one document does not depend on how many there are.
func documents(seed uint64, name string, n, tokens int, sigma float64, maxFactor int) []string {
	docs := make([]string, n)
	for i := range docs {
		rng := newRand(seed, fmt.Sprintf("%s/document/%d", name, i))
		length := lognormal(rng, float64(tokens), sigma, tokens/4, tokens*maxFactor)
		docs[i] = fmt.Sprintf("Document %d:\n", i) + tokensText(rng, length)
	}
	return docs
}

// RAGConfig is retrieval-augmented generation: one shared system prompt,
// then one of a few hundred documents whose popularity is Zipf-distributed,
// then a question.
type RAGConfig struct {
	Seed           uint64
	Requests       int     // [1500]
	Documents      int     // [300]
	DocTokens      int     // median document length [3000]
	SystemTokens   int     // [1200]
	QuestionTokens int     // median [40]
	ZipfS          float64 // popularity exponent: P(rank k) ∝ 1/k^s [1.0]
	MaxTokens      int     // [96]
	Rate           float64 // Poisson arrivals per simulated second [12]
}

// RAG generates the RAG workload.
func RAG(cfg RAGConfig) Workload {
	cfg.Requests = cmp.Or(cfg.Requests, 1500)
	cfg.Documents = cmp.Or(cfg.Documents, 300)
	cfg.DocTokens = cmp.Or(cfg.DocTokens, 3000)
	cfg.SystemTokens = cmp.Or(cfg.SystemTokens, 1200)
	cfg.QuestionTokens = cmp.Or(cfg.QuestionTokens, 40)
	cfg.ZipfS = cmp.Or(cfg.ZipfS, 1.0)
	cfg.MaxTokens = cmp.Or(cfg.MaxTokens, 96)
	cfg.Rate = cmp.Or(cfg.Rate, 12)

	system := Message{Role: "system", Content: tokensText(newRand(cfg.Seed, NameRAG+"/system"), cfg.SystemTokens)}
	docs := documents(cfg.Seed, NameRAG, cfg.Documents, cfg.DocTokens, 0.4, 3)
	// Popularity ranks are a seeded permutation of the documents, so that
	// the popular ones are not simply the first few ids.
	rng := newRand(cfg.Seed, NameRAG)
	rank := rng.Perm(cfg.Documents)
	pop := newZipf(cfg.Documents, cfg.ZipfS)
	arrivals := poisson{rng: newRand(cfg.Seed, NameRAG+"/arrivals"), rate: cfg.Rate}
	reqs := make([]Request, cfg.Requests)
	for i := range reqs {
		doc := docs[rank[pop.sample(rng)]]
		q := lognormal(rng, float64(cfg.QuestionTokens), 0.5, 4, 16*cfg.QuestionTokens)
		reqs[i] = Request{
			Arrival: arrivals.next(),
			Messages: []Message{
				system,
				{Role: "user", Parts: []string{doc, "\nQuestion: " + tokensText(rng, q)}},
			},
			MaxTokens: cfg.MaxTokens,
		}
	}
	return Workload{Name: NameRAG, Requests: reqs}
}

// ShareGPTConfig is ShareGPT-style multi-turn chat: a short generic system
// prompt, then conversations of variable length with long-tailed message
// and reply lengths.
type ShareGPTConfig struct {
	Seed         uint64
	Sessions     int           // [400]
	MeanTurns    float64       // geometric, at least 1 [4]
	MaxTurns     int           // [16]
	SystemTokens int           // the generic system prompt [60]
	UserTokens   int           // median user message [80]
	ReplyTokens  int           // median reply [220]
	Rate         float64       // sessions started per simulated second [3]
	ThinkTime    time.Duration // mean pause between turns [10s]
}

// ShareGPT generates the ShareGPT-style workload.
func ShareGPT(cfg ShareGPTConfig) Workload {
	cfg.Sessions = cmp.Or(cfg.Sessions, 400)
	cfg.MeanTurns = cmp.Or(cfg.MeanTurns, 4)
	cfg.MaxTurns = cmp.Or(cfg.MaxTurns, 16)
	cfg.SystemTokens = cmp.Or(cfg.SystemTokens, 60)
	cfg.UserTokens = cmp.Or(cfg.UserTokens, 80)
	cfg.ReplyTokens = cmp.Or(cfg.ReplyTokens, 220)
	cfg.Rate = cmp.Or(cfg.Rate, 3)
	cfg.ThinkTime = cmp.Or(cfg.ThinkTime, 10*time.Second)

	reqs := chatStream{
		name: NameShareGPT, system: NameShareGPT + "/system",
		conversations: cfg.Sessions, rate: cfg.Rate, turns: func(rng *rand.Rand) int { return geometricTurns(rng, cfg.MeanTurns, cfg.MaxTurns) },
		systemTokens: cfg.SystemTokens, userTokens: cfg.UserTokens, userSigma: 1.0,
		replyTokens: cfg.ReplyTokens, replySigma: 0.6, thinkTime: cfg.ThinkTime,
	}.generate(cfg.Seed)
	return Workload{Name: NameShareGPT, Requests: reqs}
}
