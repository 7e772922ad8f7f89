package vllmsim

import "container/list"

// blockPool is the KV cache as vLLM's block manager sees it: a fixed number
// of blocks, each either held by running requests (refs > 0) or free. A free
// block keeps its contents and its hash until it is evicted, so a later
// request with the same prefix hits it; eviction takes the least recently
// freed block first.
//
// Requests reserve blocks for their whole length when they are admitted
// (vLLM allocates step by step and preempts when it runs out; reserving up
// front gives the same occupancy without modelling preemption). A
// reservation becomes a hashed block when a full block of the request's
// tokens is computed; if that hash is already cached, the request shares the
// existing block and its reservation is returned.
type blockPool struct {
	capacity int
	blocks   map[uint64]*block
	free     list.List // of *block with refs == 0; front is evicted first
	reserved int
}

type block struct {
	hash uint64
	refs int
	elem *list.Element // in free while refs == 0
}

func newBlockPool(capacity int) *blockPool {
	return &blockPool{capacity: capacity, blocks: make(map[uint64]*block)}
}

// inUse is the number of blocks held or reserved by running requests.
func (p *blockPool) inUse() int { return len(p.blocks) - p.free.Len() + p.reserved }

// cachedPrefix returns the cached blocks at the start of hashes, in order.
func (p *blockPool) cachedPrefix(hashes []uint64) []*block {
	var chain []*block
	for _, h := range hashes {
		b, ok := p.blocks[h]
		if !ok {
			break
		}
		chain = append(chain, b)
	}
	return chain
}

// admit takes a reference on hits and reserves need more blocks, evicting
// free blocks as necessary. It changes nothing and returns false when the
// blocks held by running requests leave too little room.
func (p *blockPool) admit(hits []*block, need int) bool {
	freeHits := 0
	for _, b := range hits {
		if b.refs == 0 {
			freeHits++
		}
	}
	if p.inUse()+freeHits+need > p.capacity {
		return false
	}
	for _, b := range hits {
		p.acquire(b)
	}
	for len(p.blocks)+p.reserved+need > p.capacity {
		victim := p.free.Remove(p.free.Front()).(*block)
		delete(p.blocks, victim.hash)
	}
	p.reserved += need
	return true
}

func (p *blockPool) acquire(b *block) {
	if b.refs == 0 {
		p.free.Remove(b.elem)
		b.elem = nil
	}
	b.refs++
}

// commit turns one reserved block into the block holding hash.
func (p *blockPool) commit(hash uint64) *block {
	p.reserved--
	if b, ok := p.blocks[hash]; ok {
		p.acquire(b)
		return b
	}
	b := &block{hash: hash, refs: 1}
	p.blocks[hash] = b
	return b
}

// release drops a finished request's references and its unused
// reservation. held is in chain order; like vLLM it is freed tail first, so
// a chain's last blocks are evicted before the prefix others share.
func (p *blockPool) release(held []*block, reserved int) {
	p.reserved -= reserved
	for i := len(held) - 1; i >= 0; i-- {
		b := held[i]
		b.refs--
		if b.refs == 0 {
			b.elem = p.free.PushBack(b)
		}
	}
}

// reset evicts every free block, as vLLM's /reset_prefix_cache does; blocks
// held by running requests stay. It returns how many blocks it evicted.
func (p *blockPool) reset() int {
	n := p.free.Len()
	for e := p.free.Front(); e != nil; e = e.Next() {
		delete(p.blocks, e.Value.(*block).hash)
	}
	p.free.Init()
	return n
}
