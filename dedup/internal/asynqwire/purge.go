package asynqwire

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/encoding/protowire"
)

var purgeScript = redis.NewScript(source("purge.lua"))

// TaskPattern matches the hashes of queue's tasks (SCAN MATCH).
func TaskPattern(queue string) string { return queuePrefix(queue) + "t:*" }

// PurgeTasks deletes those of the task hashes keys (of queue, from
// TaskPattern) whose type is typ, in every state but active: a read of
// their messages, then one atomic script for the batch. It returns how
// many went and how many of the type were running (left to finish).
func PurgeTasks(ctx context.Context, rdb redis.UniversalClient, queue, typ string, keys []string) (deleted, active int, err error) {
	msgs := make([]*redis.StringCmd, len(keys))
	if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			msgs[i] = p.HGet(ctx, k, "msg")
		}
		return nil
	}); err != nil && err != redis.Nil {
		return 0, 0, err
	}
	p := queuePrefix(queue)
	batch := []string{p + "pending", p + "scheduled", p + "retry", p + "archived", p + "completed"}
	for i, k := range keys {
		if b, err := msgs[i].Bytes(); err == nil && msgType(b) == typ {
			batch = append(batch, k)
		}
	}
	if len(batch) == 5 {
		return 0, 0, nil
	}
	v, err := purgeScript.Run(ctx, rdb, batch).Int64Slice()
	if err != nil {
		return 0, 0, err
	}
	if len(v) != 2 {
		return 0, 0, fmt.Errorf("dedup: purge replied %v", v)
	}
	return int(v[0]), int(v[1]), nil
}

// msgType is the type of the task message msg ("" unreadable).
func msgType(msg []byte) string {
	typ := ""
	_ = msgFields(msg, func(num protowire.Number, t protowire.Type, _, value []byte) {
		if num == fieldType && t == protowire.BytesType && typ == "" {
			v, _ := protowire.ConsumeBytes(value)
			typ = string(v)
		}
	})
	return typ
}
