package policy

// A request's prompt prefix is named by a chain of block hashes: what the
// policy matches, remembers and sends to the elected picker instead of
// the text.

import (
	"encoding/binary"

	"github.com/cespare/xxhash/v2"
)

// hashString hashes s under seed, so that all replicas with the same
// hash seed agree and different endpoints do not.
func hashString(seed uint64, s string) uint64 {
	var d xxhash.Digest
	var b [8]byte
	d.ResetWithSeed(seed)
	binary.LittleEndian.PutUint64(b[:], seed)
	_, _ = d.Write(b[:])
	_, _ = d.WriteString(s)
	return d.Sum64()
}

// scopeSeed is the first link of a request's block chain. Model (or
// adapter) and tenant are part of it, so identical text from different
// tenants or adapters never shares a chain, exactly as vLLM keeps their KV
// blocks apart (LoRA name and cache_salt are extra keys of its first block).
func scopeSeed(hashSeed uint64, model, tenant string) uint64 {
	return hashString(hashSeed, model+"\x00"+tenant)
}

// maxBlockSize is the largest block: prefixLength / 32 at the API's
// largest prefixLength (see newTable); a larger one is streamed.
const maxBlockSize = 65536 / 32

// blockChain appends to dst the chained hashes of text cut into blocks of
// blockSize bytes (the last one may be partial): h[i] = xxh(h[i-1] ‖ block i).
// Chaining makes a block's hash stand for the whole beginning up to it, so
// two requests share h[i] only if they share their first i+1 blocks.
//
// Each link is hashed in one call over parent and block laid side by side
// in buf: the streaming digest would buffer the 8-byte parent and copy the
// block behind it, and hashing is most of a decision's per-request cost at
// hundreds of instances.
func blockChain(dst []uint64, seed uint64, text []byte, blockSize int) []uint64 {
	var buf [8 + maxBlockSize]byte
	h := seed
	for off := 0; off < len(text); off += blockSize {
		block := text[off:min(off+blockSize, len(text))]
		binary.LittleEndian.PutUint64(buf[:8], h)
		if len(block) > maxBlockSize {
			d := xxhash.New()
			_, _ = d.Write(buf[:8])
			_, _ = d.Write(block)
			h = d.Sum64()
		} else {
			h = xxhash.Sum64(buf[:8+copy(buf[8:], block)])
		}
		dst = append(dst, h)
	}
	return dst
}

// chainEnd is the last hash of blockChain(nil, seed, text, blockSize), or
// seed when text is empty. A window is about 32 blocks (see newTable), so
// its chain fits the stack.
func chainEnd(seed uint64, text []byte, blockSize int) uint64 {
	var buf [64]uint64
	if hs := blockChain(buf[:0], seed, text, blockSize); len(hs) > 0 {
		return hs[len(hs)-1]
	}
	return seed
}
