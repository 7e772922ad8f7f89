package workload

import (
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
	setDefault(&cfg.Requests, 1500)
	setDefault(&cfg.Contexts, 128)
	setDefault(&cfg.ContextTokens, 8000)
	setDefault(&cfg.QuestionTokens, 40)
	setDefault(&cfg.MaxTokens, 64)
	setDefault(&cfg.Rate, 12)

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
	setDefault(&cfg.Users, 240)
	setDefault(&cfg.Turns, 5)
	setDefault(&cfg.SystemTokens, 3000)
	setDefault(&cfg.UserTokens, 50)
	setDefault(&cfg.ReplyTokens, 120)
	setDefault(&cfg.Rate, 2)
	setDefault(&cfg.ThinkTime, 5*time.Second)

	system := Message{Role: "system", Content: tokensText(newRand(cfg.Seed, NameSupportBot+"/system"), cfg.SystemTokens)}
	reqs := chats(cfg.Seed, NameSupportBot, cfg.Users, cfg.Rate, func(_ *rand.Rand) conversationSpec {
		return conversationSpec{
			turns: cfg.Turns, system: []Message{system},
			userTokens: cfg.UserTokens, userSigma: 0.6,
			replyTokens: cfg.ReplyTokens, replySigma: 0.5, thinkTime: cfg.ThinkTime,
		}
	})
	return Workload{Name: NameSupportBot, Requests: reqs}
}

// conversationSpec describes one multi-turn conversation.
type conversationSpec struct {
	session                 string
	start                   time.Duration
	turns                   int
	system                  []Message
	userTokens, replyTokens int
	userSigma, replySigma   float64
	thinkTime               time.Duration
}

// chats generates n conversations starting as a Poisson process at rate
// per second, each shaped by spec (given the conversation's own generator),
// and returns their turns ordered by arrival.
func chats(seed uint64, name string, n int, rate float64, spec func(*rand.Rand) conversationSpec) []Request {
	starts := poisson{rng: newRand(seed, name+"/arrivals"), rate: rate}
	var reqs []Request
	for i := range n {
		rng := newRand(seed, fmt.Sprintf("%s/session/%d", name, i))
		c := spec(rng)
		c.session, c.start = fmt.Sprintf("%s-%04d", name, i), starts.next()
		reqs = append(reqs, conversation(rng, c)...)
	}
	sortByArrival(reqs)
	return reqs
}

// conversation returns the turns of one conversation. Each turn carries the
// whole history; the assistant replies in the history are the generator's
// (as in a recorded chat replayed), and each turn asks for as many tokens
// as its recorded reply has.
func conversation(rng *rand.Rand, c conversationSpec) []Request {
	history := append([]Message(nil), c.system...)
	at := c.start
	out := make([]Request, 0, c.turns)
	for turn := range c.turns {
		user := lognormal(rng, float64(c.userTokens), c.userSigma, 2, 40*c.userTokens)
		reply := lognormal(rng, float64(c.replyTokens), c.replySigma, 4, 10*c.replyTokens)
		history = append(history, Message{Role: "user", Content: tokensText(rng, user)})
		out = append(out, Request{
			Session:   c.session,
			Turn:      turn,
			Arrival:   at,
			Messages:  append([]Message(nil), history...),
			MaxTokens: reply,
		})
		history = append(history, Message{Role: "assistant", Content: tokensText(rng, reply)})
		at += time.Duration(rng.ExpFloat64() * float64(c.thinkTime))
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
	setDefault(&cfg.Requests, 1500)
	setDefault(&cfg.Documents, 300)
	setDefault(&cfg.DocTokens, 3000)
	setDefault(&cfg.SystemTokens, 1200)
	setDefault(&cfg.QuestionTokens, 40)
	setDefault(&cfg.ZipfS, 1.0)
	setDefault(&cfg.MaxTokens, 96)
	setDefault(&cfg.Rate, 12)

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
	setDefault(&cfg.Sessions, 400)
	setDefault(&cfg.MeanTurns, 4)
	setDefault(&cfg.MaxTurns, 16)
	setDefault(&cfg.SystemTokens, 60)
	setDefault(&cfg.UserTokens, 80)
	setDefault(&cfg.ReplyTokens, 220)
	setDefault(&cfg.Rate, 3)
	setDefault(&cfg.ThinkTime, 10*time.Second)

	system := Message{Role: "system", Content: tokensText(newRand(cfg.Seed, NameShareGPT+"/system"), cfg.SystemTokens)}
	reqs := chats(cfg.Seed, NameShareGPT, cfg.Sessions, cfg.Rate, func(rng *rand.Rand) conversationSpec {
		return conversationSpec{
			turns: geometricTurns(rng, cfg.MeanTurns, cfg.MaxTurns), system: []Message{system},
			userTokens: cfg.UserTokens, userSigma: 1.0,
			replyTokens: cfg.ReplyTokens, replySigma: 0.6, thinkTime: cfg.ThinkTime,
		}
	})
	return Workload{Name: NameShareGPT, Requests: reqs}
}

func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}
