package policy

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/warmroute/warmroute/api/hrw"
)

// referenceRank is the ranking the policy used before rankTop: every
// member scored and insertion-sorted by descending score, ties by position.
// Slow (quadratic) and obviously right, it is what rankTop must equal.
func referenceRank(t *table, set []int, key uint64) []int {
	out := slices.Clone(set)
	scores := make([]float64, 0, len(set))
	for _, i := range out {
		scores = append(scores, hrw.Score(key, t.Members[i].IDHash, t.Members[i].Weight))
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && (scores[j] > scores[j-1] || scores[j] == scores[j-1] && out[j] < out[j-1]); j-- {
			scores[j], scores[j-1] = scores[j-1], scores[j]
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// referenceFallbackOrder is fallbackOrder before it ranked only the
// members outside the parent set.
func referenceFallbackOrder(t *table, allowed []int, w walk, chosen int) []int {
	order := []int{chosen}
	for _, m := range w.parent {
		if m != chosen {
			order = append(order, m)
		}
	}
	if len(w.parent) < len(allowed) {
		for _, m := range referenceRank(t, allowed, w.hashes[w.leaf]) {
			if !slices.Contains(w.parent, m) {
				order = append(order, m)
			}
		}
	}
	return order
}

// randomTable is a table of n members, half the time all of weight 1
// (ranked without the logarithm, see table.Uniform) and otherwise with
// random weights, where about one member in eight shares another's name
// hash and weight, so that scores tie exactly and the order falls back on
// position.
func randomTable(r *rand.Rand, n int) *table {
	t := &table{Uniform: r.IntN(2) == 0}
	for i := range n {
		m := member{IDHash: r.Uint64(), Weight: 1}
		if !t.Uniform {
			m.Weight = float64(1 + r.IntN(3))
		}
		if i > 0 && r.IntN(8) == 0 {
			m = t.Members[r.IntN(i)]
		}
		m.Stat = &counters{Token: uint32(i + 1)}
		t.Members = append(t.Members, m)
		t.All = append(t.All, i)
	}
	return t
}

// randomSet is a random subset of the table's members in random order.
func randomSet(r *rand.Rand, t *table) []int {
	set := slices.Clone(t.All)
	r.Shuffle(len(set), func(i, j int) { set[i], set[j] = set[j], set[i] })
	return set[:1+r.IntN(len(set))]
}

// TestRankTopIsTheReferenceOrder: for random tables (1 to 1,100 members,
// exact ties included), sets and depths, rankTop returns exactly the first
// k of the reference order, and rank all of it.
func TestRankTopIsTheReferenceOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(42, 1))
	sizes := []int{1, 2, 3, 5, 8, 16, 31, 32, 33, 64, 100, 256, 1100}
	for round := range 3000 {
		n := sizes[round%len(sizes)]
		if round%len(sizes) == len(sizes)-1 && round > 300 {
			n = 1 + r.IntN(40) // mostly small after a few large ones
		}
		tb := randomTable(r, n)
		set := randomSet(r, tb)
		key := r.Uint64()
		want := referenceRank(tb, set, key)
		k := r.IntN(len(set) + 2)
		if round%5 == 0 {
			k = 1 + r.IntN(min(len(set), 8)) // the replica-set walk's depths
		}
		got := rankTop(tb, set, key, k, nil)
		if wantK := want[:min(k, len(want))]; !slices.Equal(got, wantK) {
			t.Fatalf("round %d: %d members, set of %d, k=%d: rankTop %v, reference prefix %v", round, n, len(set), k, got, wantK)
		}
		if got := rank(tb, set, key, nil); !slices.Equal(got, want) {
			t.Fatalf("round %d: rank %v, reference %v", round, got, want)
		}
	}
}

// TestFallbackOrderIsTheReference: for random tables, allowed sets, parent
// sets (the walk's, in the anchor's order) and chosen members, fallbackOrder
// is the reference's order.
func TestFallbackOrderIsTheReference(t *testing.T) {
	r := rand.New(rand.NewPCG(42, 2))
	for round := range 2000 {
		n := []int{1, 2, 7, 8, 64, 65, 300, 1100}[round%8]
		tb := randomTable(r, n)
		allowed := randomSet(r, tb)
		slices.Sort(allowed) // as candidates gives them
		key := r.Uint64()
		parentSet := slices.Clone(allowed)
		r.Shuffle(len(parentSet), func(i, j int) { parentSet[i], parentSet[j] = parentSet[j], parentSet[i] })
		parentSet = parentSet[:1+r.IntN(len(parentSet))]
		w := walk{hashes: []uint64{r.Uint64(), key}, leaf: 1, parent: referenceRank(tb, parentSet, key)}
		chosen := w.parent[r.IntN(len(w.parent))]
		want := referenceFallbackOrder(tb, allowed, w, chosen)
		got, u := fallbackOrder(tb, allowed, w, chosen)
		if tail := len(got) - u.N; !slices.Equal(got[:tail], want[:tail]) {
			t.Fatalf("round %d: the ranked part %v, want %v", round, got[:tail], want[:tail])
		}
		if u.rank(tb, got); !slices.Equal(got, want) {
			t.Fatalf("round %d: %d members, %d allowed, parent %d: got %v, want %v", round, n, len(allowed), len(w.parent), got, want)
		}
	}
}

// referencePrefixAware is PREFIX_AWARE as it decided before rankTop: the
// same steps, with the replica-set walk and the fallback order ranking by
// referenceRank (every set sorted whole). Registered as a benchmark
// strategy of the tests only, so that a policy can run it through Pick.
const referenceStrategy Strategy = "TEST_PREFIX_AWARE_REFERENCE"

func init() { benchmarkStrategies[referenceStrategy] = referencePrefixAware }

func referencePrefixAware(p *Policy, v *view, key Key, allowed []int) decision {
	return p.decideWalk(v, key, allowed, referenceReplicaSets(p, v.table, key, allowed), func(t *table, allowed []int, w walk, chosen int) ([]int, unrankedTail) {
		return referenceFallbackOrder(t, allowed, w, chosen), unrankedTail{}
	})
}

// referenceReplicaSets is replicaSets ranking each level's whole set.
func referenceReplicaSets(p *Policy, t *table, key Key, allowed []int) walk {
	hashes := key.BlockHashes()
	if len(hashes) == 0 {
		hashes = []uint64{scopeSeed(t.Cfg.HashSeed, key.Model, "")}
	}
	window := min(max(key.WindowBlocks, 1), len(hashes))
	total := float64(p.pop.Total()) + popularityPrior
	n := float64(len(allowed))
	set := slices.Clone(allowed)
	w := walk{leaf: -1, choices: placementChoices, hashes: hashes[:window]}
	for i := 0; ; i++ {
		if i == len(w.hashes) {
			if len(w.hashes) == len(hashes) {
				break
			}
			w.hashes = hashes
		}
		h := w.hashes[i]
		est := p.pop.Estimate(h)
		if est >= 2 && w.shared == i {
			w.shared = i + 1
		}
		r := max(1, min(int(math.Ceil(float64(est)/total*n/p.tuning.ReplicaLoad)), len(set)))
		if r == len(set) {
			continue
		}
		ranked := referenceRank(t, set, h)
		if r == 1 {
			w.parent, w.leaf = ranked, i
			break
		}
		set = ranked[:r]
	}
	if w.leaf < 0 {
		w.leaf = len(w.hashes) - 1
		w.parent = referenceRank(t, set, w.hashes[w.leaf])
		w.choices = len(w.parent)
	}
	return w
}

// TestDecisionsAreTheReferences runs long random request sequences through
// PREFIX_AWARE and through referencePrefixAware, side by side on two
// policies over fleets of 8 to 600 instances, and requires every decision
// to be the same: the same order of instances, spill, anchor and move. The
// traffic mixes a few popular documents behind a shared system prompt
// (replica sets of several sizes), conversations that grow, and new
// prompts; requests stay in flight for a random while, some prefilled, so
// that instances reach the concurrency threshold and the token cap and
// requests spill; instances are ejected now and then.
func TestDecisionsAreTheReferences(t *testing.T) {
	for _, n := range []int{8, 64, 256, 600} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(n), 9))
			now := time.Unix(1e9, 0)
			tune := Tuning{BenchmarkStrategies: true, DecayEvery: 512, Now: func() time.Time { return now }}
			policies := [2]*Policy{New(tune), New(tune)}
			for i, s := range []Strategy{PrefixAware, referenceStrategy} {
				if err := policies[i].Update(Config{Strategy: s, Model: "m", HashSeed: 7, PrefixLength: 1024, ConcurrencyThreshold: 4, Instances: instancesOf(n)}); err != nil {
					t.Fatal(err)
				}
			}
			system := randomText(r, 700)
			docs := make([]string, 40)
			for i := range docs {
				docs[i] = randomText(r, 200+r.IntN(3000))
			}
			var convs []string
			type held struct{ c [2]*Choice }
			var inFlight []held
			spills, moves, cold := map[string]int{}, map[string]int{}, 0
			// Enough requests in flight that the threshold binds on hot
			// replica sets whatever the fleet's size.
			hold := max(3*min(n, 64), n/2)
			decisions := 3000
			if n > 256 {
				decisions = 1500
			}
			for i := range decisions {
				var text string
				switch k := r.IntN(10); {
				case k < 5:
					text = system + docs[int(float64(len(docs))*r.Float64()*r.Float64())] + randomText(r, 20)
				case k < 8 && len(convs) > 0:
					j := r.IntN(len(convs))
					convs[j] += randomText(r, 100+r.IntN(400))
					text = convs[j]
				default:
					text = randomText(r, 100+r.IntN(6000))
					convs = append(convs, text)
				}
				if r.IntN(50) == 0 {
					id, until := fmt.Sprintf("vllm-%d", r.IntN(n)), now.Add(time.Duration(1+r.IntN(200))*time.Millisecond)
					for _, p := range policies {
						p.Eject(id, until)
					}
				}
				now = now.Add(time.Millisecond)
				req := Request{Text: []byte(text), WindowBytes: min(len(text), 1024), PromptBytes: len(text) * (1 + r.IntN(20))}
				var h held
				for j, p := range policies {
					h.c[j] = pick(t, p, req)
				}
				got, want := h.c[0], h.c[1]
				gotD, wantD := got.Decision, want.Decision
				wantD.Strategy = gotD.Strategy
				if !slices.Equal(got.Order(0), want.Order(0)) || gotD != wantD || charged(got) != charged(want) {
					t.Fatalf("decision %d (%d instances): %v %+v, reference %v %+v", i, n, got.Order(0)[:min(4, len(got.Order(0)))], got.Decision, want.Order(0)[:min(4, len(want.Order(0)))], want.Decision)
				}
				spills[got.Spill]++
				moves[got.Moved]++
				if got.ColdPlaced {
					cold++
				}
				inFlight = append(inFlight, h)
				for len(inFlight) > 0 && (len(inFlight) > hold || r.IntN(3) == 0) {
					j := r.IntN(len(inFlight))
					retry, prefilled := r.IntN(20) == 0, r.IntN(2) == 0
					for _, c := range inFlight[j].c {
						if retry {
							c.Next()
						}
						if prefilled {
							c.Prefilled()
						}
						c.Done()
					}
					inFlight = slices.Delete(inFlight, j, j+1)
				}
			}
			t.Logf("%d instances: spills %v, moves %v, cold placements %d", n, spills, moves, cold)
			if spills[SpillConcurrency] == 0 || spills[SpillTokens] == 0 || spills[SpillUnhealthy] == 0 {
				t.Errorf("the sequence did not spill for every reason (%v): it does not test the guard", spills)
			}
		})
	}
}
