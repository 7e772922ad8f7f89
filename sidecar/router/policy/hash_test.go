package policy

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// TestBlockChainIsXXHOfParentAndBlock holds blockChain and chainEnd to
// their definition, h[i] = xxh(h[i-1] ‖ block i), computed with the
// streaming digest, for texts and block sizes of every shape: hashes are
// sent between router replicas and must not change with how they are
// computed.
func TestBlockChainIsXXHOfParentAndBlock(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, bs := range []int{64, 128, 100, maxBlockSize, maxBlockSize + 1, 3 * maxBlockSize} {
		for _, n := range []int{0, 1, bs - 1, bs, bs + 1, 7*bs + 3} {
			text := make([]byte, n)
			for i := range text {
				text[i] = byte(rng.Uint32())
			}
			seed := rng.Uint64()
			var want []uint64
			h := seed
			for off := 0; off < n; off += bs {
				d := xxhash.New()
				var b [8]byte
				binary.LittleEndian.PutUint64(b[:], h)
				_, _ = d.Write(b[:])
				_, _ = d.Write(text[off:min(off+bs, n)])
				h = d.Sum64()
				want = append(want, h)
			}
			got := blockChain(nil, seed, text, bs)
			if len(got) != len(want) {
				t.Fatalf("block size %d, %d bytes: %d hashes, want %d", bs, n, len(got), len(want))
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("block size %d, %d bytes: hash %d is %x, want %x", bs, n, i, got[i], want[i])
				}
			}
			if end := chainEnd(seed, text, bs); end != h {
				t.Fatalf("block size %d, %d bytes: chainEnd %x, want %x", bs, n, end, h)
			}
		}
	}
}

func BenchmarkBlockChain(b *testing.B) {
	text := make([]byte, 4096+32768)
	for i := range text {
		text[i] = byte(i * 7)
	}
	dst := make([]uint64, 0, len(text)/128+1)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		dst = blockChain(dst[:0], 1, text, 128)
	}
}
