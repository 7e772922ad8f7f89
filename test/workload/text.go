package workload

import (
	"math/rand/v2"
	"strings"
)

// vocabulary is the word list of generated text. Its content does not
// matter to routing or caching, only that different seeds give different
// text and the same seed the same text.
var vocabulary = strings.Fields(`
account action address agent answer api apply archive argument assistant balance batch
billing block branch budget buffer cache call capacity case change channel chart check
claim client cluster code column command comment config contract copy cost count credit
customer data date debug default delivery deploy design detail device disk document
domain draft driver email engine entry error event example export feature field file
filter flow format function gateway graph group guide handler header history host image
index input instance invoice issue item job key label latency layer limit line link list
load log manual map market memory message method metric model module monitor network
node note number object offer order output owner package page panel partner patch path
payment period plan policy pool port post price process product profile project prompt
protocol query queue quota range rate record region release report request resource
response result review role route rule schedule schema scope search section secret
server service session setting shipment signal size source space stage state status
step storage stream summary support system table target task team template tenant term
test thread ticket time token topic trace track traffic update upgrade usage user value
vendor version view volume warehouse window worker workflow zone`)

// text returns exactly chars bytes of word text from rng. It ends with a
// newline when long enough, so that consecutive pieces read as paragraphs.
func text(rng *rand.Rand, chars int) string {
	if chars <= 0 {
		return ""
	}
	var b strings.Builder
	b.Grow(chars + 16)
	sentence := 0
	for b.Len() < chars {
		w := vocabulary[rng.IntN(len(vocabulary))]
		if sentence == 0 {
			w = strings.ToUpper(w[:1]) + w[1:]
		}
		b.WriteString(w)
		sentence++
		if sentence > 6+rng.IntN(10) {
			b.WriteString(". ")
			sentence = 0
		} else {
			b.WriteByte(' ')
		}
	}
	s := b.String()[:chars]
	if chars > 1 {
		s = s[:chars-1] + "\n"
	}
	return s
}

// tokensText is text of about n tokens.
func tokensText(rng *rand.Rand, n int) string { return text(rng, n*CharsPerToken) }
