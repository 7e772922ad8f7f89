package policy

import (
	"testing"

	"github.com/warmroute/warmroute/sidecar/router/prefixindex"
)

// rulesPolicy is a PREFIX_AWARE policy of 4 instances whose shares (and
// joining marks) the rows set; a row's set is members 0..3 in that order,
// as a key's HRW order would give them.
func rulesPolicy(t *testing.T, shares [4]int64, joining int) (*Policy, *table, []int) {
	t.Helper()
	p := newPolicy(t, PrefixAware, 4, Tuning{})
	tb := p.table.Load()
	for i, m := range tb.Members {
		m.Stat.Share.Store(shares[i])
		m.Stat.Joined.Store(0)
		if i == joining {
			m.Stat.Joined.Store(p.shareEpoch.Load() + 1)
		}
	}
	return p, tb, []int{0, 1, 2, 3}
}

// TestNewKeyByShareRules pins byShare row by row: a new key goes to the
// first of its two HRW choices within ShareSlack × the set's average share
// (+1), else to the one of the two with the smaller share, never further.
func TestNewKeyByShareRules(t *testing.T) {
	for _, tc := range []struct {
		rule   string
		shares [4]int64
		want   int
	}{
		{"first choice within the share bound", [4]int64{100, 100, 100, 100}, 0},
		{"first choice over the bound: the second, within it", [4]int64{120, 100, 90, 90}, 1},
		{"both over the bound: the smaller share of the two", [4]int64{130, 120, 75, 75}, 1},
		{"both over the bound: never past the two choices", [4]int64{120, 130, 75, 75}, 0},
		{"the bound's +1: one decision over an empty set is not over it", [4]int64{1, 0, 0, 0}, 0},
		{"two decisions over an empty set are", [4]int64{2, 0, 0, 0}, 1},
	} {
		p, tb, set := rulesPolicy(t, tc.shares, -1)
		if got := p.look(tb).byShare(set, placementChoices); got != tc.want {
			t.Errorf("%s: shares %v placed on %d, want %d", tc.rule, tc.shares, got, tc.want)
		}
	}
}

// TestKnownKeyAffinityRules pins sticky row by row: where a key the index
// holds goes, and why that is a move.
func TestKnownKeyAffinityRules(t *testing.T) {
	const held = 1 // the index holds the key on member 1, the second choice
	for _, tc := range []struct {
		rule    string
		shares  [4]int64
		joining int  // member joining the fleet, -1: none
		gone    bool // the holder left the set; its former holder is member 2
		want    int
		moved   string
	}{
		{"stays on its holder", [4]int64{100, 100, 100, 100}, -1, false, held, MoveNone},
		{"stays on its holder under moveSlack × the average", [4]int64{95, 106, 100, 99}, -1, false, held, MoveNone},
		{"over moveSlack × the average: to its other choice within ShareSlack", [4]int64{90, 125, 95, 90}, -1, false, 0, MoveShare},
		{"over moveSlack, its other choice over ShareSlack too: stays", [4]int64{120, 125, 80, 75}, -1, false, held, MoveNone},
		{"over moveSlack but under the average + stickySlack: stays", [4]int64{3, 12, 3, 2}, -1, false, held, MoveNone},
		{"its first choice is joining the fleet: goes there", [4]int64{100, 100, 100, 100}, 0, false, 0, MoveJoining},
		{"its first choice is joining, warming on: stays to warm it", [4]int64{100, 100, 100, 100}, 0, false, held, moveWarm},
		{"its first choice is joining but over ShareSlack: stays", [4]int64{115, 100, 95, 90}, 0, false, held, MoveNone},
		{"its holder left the set: back to the former holder", [4]int64{100, 100, 100, 100}, -1, true, 2, MoveHolderLeft},
	} {
		p, tb, set := rulesPolicy(t, tc.shares, tc.joining)
		// Warming (warm.go) only in the row about it; the others pin the
		// rules without it.
		p.tuning.NoWarm = tc.moved != moveWarm
		e := prefixindex.Entry{Tok: [2]uint32{tb.Members[held].Stat.Token, tb.Members[2].Stat.Token}, Ver: 3}
		if tc.gone {
			set = []int{0, 2, 3}
		}
		got, moved := p.look(tb).sticky(set, e)
		if got != tc.want || moved != tc.moved {
			t.Errorf("%s: shares %v went to %d (%q), want %d (%q)", tc.rule, tc.shares, got, moved, tc.want, tc.moved)
		}
	}
}

// TestCostRules pins the cost model's comparisons row by row: when a cost
// is clearly more than another (clearlyMore), what leaving home charges
// for the cache left there (lost), and when an all-busy request stays
// home (staysHome).
func TestCostRules(t *testing.T) {
	for _, tc := range []struct {
		rule string
		got  bool
		want bool
	}{
		{"clearlyMore: twice and over tokenFloor", clearlyMore(20_000, 9_999), true},
		{"clearlyMore: not twice", clearlyMore(20_000, 10_000), false},
		{"clearlyMore: twice but under tokenFloor (a light fleet never spills)", clearlyMore(tokenFloor, 0), false},
		{"staysHome: within overflowStay, home not clearly more", staysHome(overflowStay, 12_000, 7_000), true},
		{"staysHome: within overflowStay, home clearly more (a long prefill ahead)", staysHome(0, 30_000, 7_000), false},
		{"staysHome: further above, leaving not clearly more", staysHome(overflowStay+1, 7_000, 12_000), false},
		{"staysHome: further above, leaving clearly more (cached at home)", staysHome(overflowStay+1, 7_000, 30_000), true},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %v, want %v", tc.rule, tc.got, tc.want)
		}
	}
	for _, tc := range []struct {
		rule            string
		own, home, want int64
	}{
		{"lost: warm at home, cold there: the whole difference", 10_000, 1_000, 9_000},
		{"lost: cold on both: nothing", 10_000, 10_000, 0},
		{"lost: warmer there than at home: nothing", 1_000, 10_000, 0},
	} {
		if got := lost(tc.own, tc.home); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.rule, got, tc.want)
		}
	}
}

// TestOverloadedRule pins the guard's overloaded rule (clearlyMore): a token load may spill, and takes
// no spill, only over tokenFloor and twice the candidates' average.
func TestOverloadedRule(t *testing.T) {
	for _, tc := range []struct {
		rule string
		load int64
		avg  float64
		want bool
	}{
		{"over twice the average and tokenFloor", 20_001, 10_000, true},
		{"twice the average is not over it", 20_000, 10_000, false},
		{"over twice the average but under tokenFloor", tokenFloor, 100, false},
	} {
		if got := clearlyMore(tc.load, tc.avg); got != tc.want {
			t.Errorf("%s: clearlyMore(%d, %v) = %v, want %v", tc.rule, tc.load, tc.avg, got, tc.want)
		}
	}
}
