package dedup

import "strconv"

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
