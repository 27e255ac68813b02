package wasm

import (
	"hash/maphash"
	"maps"
	"sync"
	"unsafe"
)

const memoShards = 16

// memo holds route-filter results by (module, topic, route version, client
// address, zone, labels). Each shard keeps two generations: lookups promote
// entries from the old one, and when the new one is full (in entries or in
// bytes: routes may be large, and clients choose their zones and labels)
// the old one is dropped — an approximate LRU at O(1) per operation that
// never holds more than twice its capacity.
type memo struct {
	seed          maphash.Seed
	perShard      int
	perShardBytes int
	shards        [memoShards]memoShard
}

type memoShard struct {
	mu        sync.Mutex
	cur, prev map[uint64]*memoEntry
	curBytes  int // what cur's entries hold (memoEntry.size)
}

type memoEntry struct {
	module  *Module
	topic   string
	version uint64
	addr    string
	zone    string
	labels  map[string]string

	body        []byte
	bodyVersion uint64
	expires     int64 // unix nanoseconds
}

// size is what an entry holds, roughly: its strings, labels and route.
func (e *memoEntry) size() int {
	n := 128 + len(e.topic) + len(e.addr) + len(e.zone) + len(e.body)
	for k, v := range e.labels {
		n += 32 + len(k) + len(v)
	}
	return n
}

func newMemo(capacity, bytes int) *memo {
	m := &memo{seed: maphash.MakeSeed(), perShard: max(capacity/(2*memoShards), 1),
		perShardBytes: max(bytes/(2*memoShards), 1)}
	for i := range m.shards {
		m.shards[i].cur = make(map[uint64]*memoEntry)
	}
	return m
}

// key hashes a lookup without allocating; labels are combined in an
// order-independent way so map iteration order does not matter.
func (m *memo) key(mod *Module, topic string, version uint64, addr, zone string, labels map[string]string) uint64 {
	var h maphash.Hash
	h.SetSeed(m.seed)
	var buf [16]byte
	putU64(buf[:8], uint64(uintptr(unsafe.Pointer(mod))))
	putU64(buf[8:], version)
	h.Write(buf[:])
	h.WriteString(topic)
	h.WriteByte(0)
	h.WriteString(addr)
	h.WriteByte(0)
	h.WriteString(zone)
	var ls uint64
	for k, v := range labels {
		a, b := maphash.String(m.seed, k), maphash.String(m.seed, v)
		ls += a*0x9e3779b97f4a7c15 ^ b
	}
	putU64(buf[:8], ls)
	h.Write(buf[:8])
	return h.Sum64()
}

func putU64(b []byte, v uint64) {
	for i := range 8 {
		b[i] = byte(v >> (8 * i))
	}
}

func (e *memoEntry) matches(mod *Module, topic string, version uint64, addr, zone string, labels map[string]string) bool {
	return e.module == mod && e.version == version && e.topic == topic &&
		e.addr == addr && e.zone == zone && maps.Equal(e.labels, labels)
}

func (m *memo) get(k uint64, now int64, mod *Module, topic string, version uint64, addr, zone string, labels map[string]string) *memoEntry {
	sh := &m.shards[k%memoShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.cur[k]
	if !ok {
		if e, ok = sh.prev[k]; ok {
			delete(sh.prev, k)
			sh.insert(k, e, m.perShard, m.perShardBytes)
		}
	}
	if !ok || now > e.expires || !e.matches(mod, topic, version, addr, zone, labels) {
		return nil
	}
	return e
}

func (m *memo) put(k uint64, e *memoEntry) {
	e.labels = maps.Clone(e.labels)
	sh := &m.shards[k%memoShards]
	sh.mu.Lock()
	sh.insert(k, e, m.perShard, m.perShardBytes)
	sh.mu.Unlock()
}

func (sh *memoShard) insert(k uint64, e *memoEntry, limit, limitBytes int) {
	size := e.size()
	if len(sh.cur) >= limit || len(sh.cur) > 0 && sh.curBytes+size > limitBytes {
		sh.prev, sh.cur = sh.cur, make(map[uint64]*memoEntry, min(limit, 1024))
		sh.curBytes = 0
	}
	sh.cur[k] = e
	sh.curBytes += size
}

// clear drops everything, after a policy change: the old results can no
// longer be asked for and should not hold memory.
func (m *memo) clear() {
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		sh.cur, sh.prev, sh.curBytes = make(map[uint64]*memoEntry), nil, 0
		sh.mu.Unlock()
	}
}
