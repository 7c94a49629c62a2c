package dedup

import (
	"strconv"
	"sync"
)

// A logical queue spread over shards (Spec.Shards) is that many asynq
// queues, each with its own Cluster hash tag {<queue>.<n>} and so its own
// slot: producers put a job in the shard its key hashes to, workers consume
// every shard. This file is the one place that maps a key to its shard.

// queueOf is the asynq queue of the job keyed k in the logical queue
// spread over shards queues: queue itself for one shard (the layout before
// sharding, unchanged), else queue + "." + n, where n is the 32-bit FNV-1a
// hash of k.String() modulo shards. The hash is part of the data layout:
// changing it would put pending keys of every sharded queue in the wrong
// shard, so it never changes (shard_test.go pins its values).
func queueOf(queue string, k Key, shards int) string {
	if shards <= 1 {
		return queue
	}
	return shardName(queue, int(fnv1a(k.Namespace, "/", k.ID)%uint32(shards)))
}

// shardsOf lists the asynq queues of queue spread over shards, in shard
// order: what a worker consumes.
func shardsOf(queue string, shards int) []string {
	if shards <= 1 {
		return []string{queue}
	}
	qs := make([]string, shards)
	for n := range qs {
		qs[n] = shardName(queue, n)
	}
	return qs
}

// shardName is shard n of queue. A queue name holds no '{' or '}', and
// neither does this, so every shard is its own hash tag. The shard keeps
// its name when the shard count grows: workers under a larger count still
// consume every old shard.
func shardName(queue string, n int) string { return queue + "." + strconv.Itoa(n) }

// fnv1a is the 32-bit FNV-1a hash of the concatenated parts, without
// building the string (it runs on every enqueue).
func fnv1a(parts ...string) uint32 {
	const offset, prime = 2166136261, 16777619
	h := uint32(offset)
	for _, p := range parts {
		for i := 0; i < len(p); i++ {
			h ^= uint32(p[i])
			h *= prime
		}
	}
	return h
}

// shardQueues is weights (asynq.Config.Queues) with every logical queue
// that c spreads over shards replaced by its shards, each with the logical
// queue's weight. Repeating the weight keeps the ratios between queues
// exact when every queue has the same shard count (ONCEQ_QUEUE_SHARDS); a
// queue with more shards than another gets proportionally more of the
// workers' attention. Names c does not shard stay as they are.
func shardQueues(weights map[string]int, c *Catalog) map[string]int {
	out := make(map[string]int, len(weights))
	for q, w := range weights {
		for _, s := range c.queues(q) {
			out[s] = w
		}
	}
	return out
}

// queues are the asynq queues of the logical queue q under c: its shards,
// or q itself when no kind of c shards it.
func (c *Catalog) queues(q string) []string {
	if c != nil {
		for _, k := range c.kinds {
			if k.Queue == q {
				return k.Queues
			}
		}
	}
	return []string{q}
}

// On Redis Cluster a Lua call may touch one slot only, and asynq's keys of
// a queue sit in the slot of the queue's name. So that the insert, the
// joined claim and completion and the fast recoverer each read a job's
// record in the step that moves its task, every key of a job (record,
// windows, mark, history, successor) sits in one of homes fixed slots,
// chosen from the key alone (homeOf: no catalog is needed to find a
// record), and on Cluster the job's task goes to an asynq queue whose name
// hashes to that same slot (homeQueue). The count and both hashes are part
// of the data layout and never change (shard_internal_test.go pins them).
const homes = 16

// homeOf is k's home: the 32-bit FNV-1a of k.String modulo homes.
func homeOf(k Key) int { return int(fnv1a(k.Namespace, "/", k.ID) % homes) }

// homeTags are the homes' hash tags: home h's is the first "<h>.<n>"
// (n = 0, 1, ...) whose slot lies in the h-th sixteenth of the 16384
// slots, so the homes spread evenly over any Cluster whose masters hold
// equal slot ranges (what redis-cli --cluster create makes).
var homeTags = func() (tags [homes]string) {
	for h := range tags {
		for n := 0; ; n++ {
			t := strconv.Itoa(h) + "." + strconv.Itoa(n)
			if int(slotOf(t))*homes/slots == h {
				tags[h] = t
				break
			}
		}
	}
	return tags
}()

// homeTag is the hash tag of k's keys (keys.go).
func homeTag(k Key) string { return homeTags[homeOf(k)] }

// homeQueues caches, per asynq queue name, its home queues.
var homeQueues sync.Map // string -> *[homes]string

// homeQueue is the asynq queue for the jobs of home h that would go to
// queue outside Cluster: the first "<queue>.h<h>-<n>" whose slot is home
// h's. The search takes some 16 thousand CRC16s per home, once per queue
// and process.
func homeQueue(queue string, h int) string {
	if qs, ok := homeQueues.Load(queue); ok {
		return qs.(*[homes]string)[h]
	}
	var qs [homes]string
	for h := range qs {
		want := slotOf(homeTags[h])
		prefix := queue + ".h" + strconv.Itoa(h) + "-"
		for n := 0; ; n++ {
			if q := prefix + strconv.Itoa(n); slotOf(q) == want {
				qs[h] = q
				break
			}
		}
	}
	actual, _ := homeQueues.LoadOrStore(queue, &qs)
	return actual.(*[homes]string)[h]
}

// ClusterQueues lists the asynq queues that hold queue's jobs on Redis
// Cluster: queue itself (for tasks plain asynq enqueues there) and its
// home queues, where the Producer puts each job in the slot of its key's
// records. An asynq server of your own on Cluster consumes them all, each
// at queue's weight; NewServer does so itself.
func ClusterQueues(queue string) []string { return append([]string{queue}, homeQueuesOf(queue)...) }

// ClusterQueue is the asynq queue where, on Redis Cluster, the Producer
// puts the task of the job keyed k that would go to queue elsewhere: the
// home queue in the slot of k's records. An asynq client of your own that
// enqueues tasks of onceq keys on Cluster puts them there, so the Producer
// sees them in its insert's step (an archived one makes the key's next
// job a new incarnation); a task put in queue itself is not seen.
func ClusterQueue(queue string, k Key) string { return homeQueue(queue, homeOf(k)) }

// homeQueuesOf lists queue's home queues, in home order.
func homeQueuesOf(queue string) []string {
	qs := make([]string, homes)
	for h := range qs {
		qs[h] = homeQueue(queue, h)
	}
	return qs
}

// withHomes is weights (asynq.Config.Queues) with every queue's home
// queues added at its weight, for a Server on Cluster: the queue itself
// stays, for tasks enqueued by plain asynq.
func withHomes(weights map[string]int) map[string]int {
	out := make(map[string]int, len(weights)*(homes+1))
	for q, w := range weights {
		for _, c := range ClusterQueues(q) {
			out[c] = w
		}
	}
	return out
}

// atHome reports whether a task of k in the asynq queue queue sits in the
// slot of k's keys. Outside Cluster every key shares the one node.
func atHome(cluster bool, queue string, k Key) bool {
	return !cluster || slotOf(queue) == slotOf(homeTag(k))
}

// slots is Redis Cluster's slot count.
const slots = 16384

// slotOf is the Cluster slot of a hash tag's content (or a key without
// one): CRC16-CCITT (XMODEM) modulo 16384, as Redis computes it.
func slotOf(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc = crc<<8 ^ crcTable[byte(crc>>8)^s[i]]
	}
	return crc % slots
}

var crcTable = func() (t [256]uint16) {
	for i := range t {
		crc := uint16(i) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[i] = crc
	}
	return t
}()
