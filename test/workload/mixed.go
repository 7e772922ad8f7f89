package workload

import (
	"cmp"
	"math/rand/v2"
	"time"
)

// Names of the workloads in this file, as they appear in reports.
const (
	NameMixedLength = "mixed-length"
	NameHotPrefix   = "hot-prefix"
)

// MixedLengthConfig mixes short chats with long documents, so that prompt
// lengths differ by more than ten times: the case where counting requests
// is not counting load (one instance prefilling a 30k-token document is far
// busier than one decoding ten chats). Zero fields take the defaults in
// brackets.
type MixedLengthConfig struct {
	Seed uint64
	// Chats are short multi-turn conversations behind one small system
	// prompt.
	Chats        int           // conversations [600]
	ChatRate     float64       // conversations started per simulated second [5]
	MeanTurns    float64       // geometric, at least 1, at most 8 [3]
	SystemTokens int           // the chats' shared system prompt [200]
	UserTokens   int           // median user message [60]
	ReplyTokens  int           // median reply, also its max_tokens [150]
	ThinkTime    time.Duration // mean pause between turns [4s]
	// Documents are single requests: one of Documents long texts (Zipf
	// popularity) and a question about it.
	DocRequests    int     // [360]
	DocRate        float64 // Poisson arrivals per simulated second [3]
	Documents      int     // [150]
	DocTokens      int     // median document length; lengths span ¼× to 4× [12000]
	ZipfS          float64 // popularity exponent [0.9]
	QuestionTokens int     // median question [40]
	DocMaxTokens   int     // completion length of a document request [128]
}

// MixedLength generates the mixed-length workload: both streams over the
// same span, merged by arrival.
func MixedLength(cfg MixedLengthConfig) Workload {
	cfg.Chats = cmp.Or(cfg.Chats, 600)
	cfg.ChatRate = cmp.Or(cfg.ChatRate, 5)
	cfg.MeanTurns = cmp.Or(cfg.MeanTurns, 3)
	cfg.SystemTokens = cmp.Or(cfg.SystemTokens, 200)
	cfg.UserTokens = cmp.Or(cfg.UserTokens, 60)
	cfg.ReplyTokens = cmp.Or(cfg.ReplyTokens, 150)
	cfg.ThinkTime = cmp.Or(cfg.ThinkTime, 4*time.Second)
	cfg.DocRequests = cmp.Or(cfg.DocRequests, 360)
	cfg.DocRate = cmp.Or(cfg.DocRate, 3)
	cfg.Documents = cmp.Or(cfg.Documents, 150)
	cfg.DocTokens = cmp.Or(cfg.DocTokens, 12000)
	cfg.ZipfS = cmp.Or(cfg.ZipfS, 0.9)
	cfg.QuestionTokens = cmp.Or(cfg.QuestionTokens, 40)
	cfg.DocMaxTokens = cmp.Or(cfg.DocMaxTokens, 128)

	const maxTurns = 8
	reqs := chatStream{
		name: NameMixedLength + "/chat", system: NameMixedLength + "/system",
		conversations: cfg.Chats, rate: cfg.ChatRate, turns: func(rng *rand.Rand) int { return geometricTurns(rng, cfg.MeanTurns, maxTurns) },
		systemTokens: cfg.SystemTokens, userTokens: cfg.UserTokens, userSigma: 0.6,
		replyTokens: cfg.ReplyTokens, replySigma: 0.5, thinkTime: cfg.ThinkTime,
	}.generate(cfg.Seed)

	docs := documents(cfg.Seed, NameMixedLength, cfg.Documents, cfg.DocTokens, 0.5, 4)
	rng := newRand(cfg.Seed, NameMixedLength+"/documents")
	rank := rng.Perm(cfg.Documents)
	pop := newZipf(cfg.Documents, cfg.ZipfS)
	arrivals := poisson{rng: newRand(cfg.Seed, NameMixedLength+"/documents/arrivals"), rate: cfg.DocRate}
	for range cfg.DocRequests {
		q := lognormal(rng, float64(cfg.QuestionTokens), 0.5, 4, 16*cfg.QuestionTokens)
		reqs = append(reqs, Request{
			Arrival: arrivals.next(),
			Messages: []Message{
				{Role: "user", Parts: []string{docs[rank[pop.sample(rng)]], "\nQuestion: " + tokensText(rng, q)}},
			},
			MaxTokens: cfg.DocMaxTokens,
		})
	}
	sortByArrival(reqs)
	return Workload{Name: NameMixedLength, Requests: reqs}
}

// HotPrefixConfig is bursts of requests that all share one prefix, each
// burst arriving within Spread through every router replica at once: what
// tests that concurrencyThreshold holds per instance across replicas.
type HotPrefixConfig struct {
	Seed           uint64
	Bursts         int           // [12]
	BurstSize      int           // requests per burst [40]
	Interval       time.Duration // between the starts of bursts [5s]
	Spread         time.Duration // a burst's arrivals are uniform over this [100ms]
	PrefixTokens   int           // the shared prefix [2000]
	QuestionTokens int           // median question after it [30]
	MaxTokens      int           // completion length, which keeps requests in flight [100]
}

// HotPrefix generates the hot-prefix workload.
func HotPrefix(cfg HotPrefixConfig) Workload {
	cfg.Bursts = cmp.Or(cfg.Bursts, 12)
	cfg.BurstSize = cmp.Or(cfg.BurstSize, 40)
	cfg.Interval = cmp.Or(cfg.Interval, 5*time.Second)
	cfg.Spread = cmp.Or(cfg.Spread, 100*time.Millisecond)
	cfg.PrefixTokens = cmp.Or(cfg.PrefixTokens, 2000)
	cfg.QuestionTokens = cmp.Or(cfg.QuestionTokens, 30)
	cfg.MaxTokens = cmp.Or(cfg.MaxTokens, 100)

	prefix := Message{Role: "system", Content: tokensText(newRand(cfg.Seed, NameHotPrefix+"/prefix"), cfg.PrefixTokens)}
	rng := newRand(cfg.Seed, NameHotPrefix)
	var reqs []Request
	for b := range cfg.Bursts {
		start := time.Duration(b) * cfg.Interval
		for range cfg.BurstSize {
			q := lognormal(rng, float64(cfg.QuestionTokens), 0.5, 4, 16*cfg.QuestionTokens)
			reqs = append(reqs, Request{
				Arrival:   start + time.Duration(rng.Float64()*float64(cfg.Spread)),
				Messages:  []Message{prefix, {Role: "user", Content: tokensText(rng, q)}},
				MaxTokens: cfg.MaxTokens,
			})
		}
	}
	sortByArrival(reqs)
	return Workload{Name: NameHotPrefix, Requests: reqs}
}
