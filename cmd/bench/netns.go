package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/onceq/onceq/dedup/oncetest/redistest"
)

// startNetnsRedis runs the bench's redis-server one hop away (-netns): in
// a network namespace of its own, reached over a veth pair, with netem
// delaying every packet towards it where the kernel has netem. Loopback
// hides what a real network costs a protocol of many round trips; this
// shows it. It needs root (ip netns, ip link, tc). Everything it made is
// removed by the env's Close, and on any error before it returns.
func startNetnsRedis(ctx context.Context, delay time.Duration) (env *redisEnv, err error) {
	var id [3]byte
	rand.Read(id[:])
	tag := hex.EncodeToString(id[:])
	ns, hostIf, nsIf := "onceq-bench-"+tag, "obh"+tag, "obn"+tag // interface names: at most 15 bytes
	subnet := fmt.Sprintf("10.213.%d.", id[0])
	hostIP, redisIP := subnet+"1", subnet+"2"

	var redis *exec.Cmd
	var exited chan struct{}
	dir, made := "", 0 // made: how many setup steps succeeded; only what this run made is removed
	teardown := func() {
		if redis != nil {
			redis.Process.Kill()
			<-exited
		}
		// Deleting the namespace destroys its end of the pair, and so the
		// pair; the host end goes apart in case the move never happened.
		if made > 1 {
			exec.Command("ip", "link", "del", hostIf).Run()
		}
		if made > 0 {
			exec.Command("ip", "netns", "del", ns).Run()
		}
		if dir != "" {
			os.RemoveAll(dir)
		}
	}
	defer func() {
		if err != nil {
			teardown()
		}
	}()
	ip := func(args ...string) error {
		out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("-netns: ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	for _, args := range [][]string{
		{"netns", "add", ns},
		{"link", "add", hostIf, "type", "veth", "peer", "name", nsIf},
		{"link", "set", nsIf, "netns", ns},
		{"addr", "add", hostIP + "/30", "dev", hostIf},
		{"link", "set", hostIf, "up"},
		{"netns", "exec", ns, "ip", "addr", "add", redisIP + "/30", "dev", nsIf},
		{"netns", "exec", ns, "ip", "link", "set", nsIf, "up"},
		{"netns", "exec", ns, "ip", "link", "set", "lo", "up"},
	} {
		if err := ip(args...); err != nil {
			return nil, err
		}
		made++
	}
	network := fmt.Sprintf("redis-server in network namespace %s over veth %s (%s -> %s)", ns, hostIf, hostIP, redisIP)
	if delay > 0 {
		us := strconv.FormatInt(delay.Microseconds(), 10) + "us"
		out, err := exec.CommandContext(ctx, "tc", "qdisc", "add", "dev", hostIf, "root", "netem", "delay", us).CombinedOutput()
		if err != nil {
			network += fmt.Sprintf("; NO added delay: tc netem %s failed (%s): kernel or tc without netem", us, strings.Join(append(strings.Fields(string(out)), err.Error()), " "))
		} else {
			network += fmt.Sprintf("; netem delay %s on packets towards Redis (round trip +%s)", us, us)
		}
	}

	if dir, err = os.MkdirTemp("", "onceq-bench-netns-"); err != nil {
		return nil, err
	}
	port, err := redistest.FreePort() // the namespace's ports are all free; any will do
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort(redisIP, strconv.Itoa(port))
	redis = exec.Command("ip", "netns", "exec", ns, "redis-server", "--bind", redisIP, "--port", strconv.Itoa(port),
		"--save", "", "--appendonly", "no", "--dir", dir, "--maxmemory-policy", "noeviction",
		"--protected-mode", "no") // it refuses non-loopback clients otherwise; only this host reaches the namespace
	redis.SysProcAttr = dieWithParent() // ip netns exec execs redis-server: the signal reaches it
	logf, err := os.Create(filepath.Join(dir, "redis.log"))
	if err != nil {
		redis = nil
		return nil, err
	}
	redis.Stdout, redis.Stderr = logf, logf
	if err := redis.Start(); err != nil {
		logf.Close()
		redis = nil
		return nil, fmt.Errorf("-netns: start redis-server: %w", err)
	}
	exited = make(chan struct{})
	go func() { redis.Wait(); logf.Close(); close(exited) }()

	env = &redisEnv{Own: true, URL: "redis://" + addr + "/0", network: network, teardown: teardown}
	if err := env.connect(ctx); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
		return nil, errors.Join(err, fmt.Errorf("redis.log: %s", log))
	}
	return env, nil
}
