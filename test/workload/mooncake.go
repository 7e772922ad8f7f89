package workload

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"
)

// MooncakeConfig replays a Mooncake trace (FAST'25 release format: one JSON
// object per line with timestamp in milliseconds, input_length,
// output_length and hash_ids, each id a 512-token block).
type MooncakeConfig struct {
	// Path is the JSONL trace file.
	Path string
	// Seed seeds the text generated for each block id.
	Seed uint64
	// Requests keeps only the first requests of the trace; 0 keeps all.
	Requests int
	// BlockChars is the text length of one block id [2048: 512 tokens at
	// CharsPerToken].
	BlockChars int
	// MaxOutputTokens caps output_length; 0 keeps the trace's.
	MaxOutputTokens int
}

type mooncakeLine struct {
	Timestamp    float64  `json:"timestamp"`
	InputLength  int      `json:"input_length"`
	OutputLength int      `json:"output_length"`
	HashIDs      []uint64 `json:"hash_ids"`
}

// Mooncake reads a trace file into a workload.
func Mooncake(cfg MooncakeConfig) (Workload, error) {
	f, err := os.Open(cfg.Path)
	if err != nil {
		return Workload{}, fmt.Errorf("mooncake trace: %w", err)
	}
	defer func() { _ = f.Close() }()
	return ReadMooncake(f, cfg)
}

// ReadMooncake reads a trace from r (cfg.Path is ignored). Each block id
// becomes a deterministic block of text, the same for the same id wherever
// it appears, so requests sharing their first k ids share k blocks of text;
// a request's blocks are concatenated and trimmed to input_length tokens.
// Each request is one user message whose content parts are the blocks, so
// that a block's text is held once however many requests carry it.
func ReadMooncake(r io.Reader, cfg MooncakeConfig) (Workload, error) {
	cfg.BlockChars = cmp.Or(cfg.BlockChars, 512*CharsPerToken)
	blocks := make(map[uint64]string)
	block := func(id uint64) string {
		b, ok := blocks[id]
		if !ok {
			b = text(newRand(cfg.Seed, "mooncake/block/"+strconv.FormatUint(id, 10)), cfg.BlockChars)
			blocks[id] = b
		}
		return b
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	var reqs []Request
	for line := 1; sc.Scan(); line++ {
		if cfg.Requests > 0 && len(reqs) == cfg.Requests {
			break
		}
		if len(sc.Bytes()) == 0 {
			continue
		}
		var l mooncakeLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return Workload{}, fmt.Errorf("mooncake trace line %d: %w", line, err)
		}
		want := l.InputLength * CharsPerToken
		var parts []string
		for _, id := range l.HashIDs {
			if want <= 0 {
				break
			}
			b := block(id)
			if len(b) > want {
				b = b[:want]
			}
			parts = append(parts, b)
			want -= len(b)
		}
		if len(parts) == 0 {
			return Workload{}, fmt.Errorf("mooncake trace line %d: no input blocks", line)
		}
		out := max(l.OutputLength, 1)
		if cfg.MaxOutputTokens > 0 {
			out = min(out, cfg.MaxOutputTokens)
		}
		reqs = append(reqs, Request{
			Arrival:   time.Duration(l.Timestamp * float64(time.Millisecond)),
			Messages:  []Message{{Role: "user", Parts: parts}},
			MaxTokens: out,
		})
	}
	if err := sc.Err(); err != nil {
		return Workload{}, fmt.Errorf("mooncake trace: %w", err)
	}
	sortByArrival(reqs)
	return Workload{Name: NameMooncake, Requests: reqs}, nil
}
