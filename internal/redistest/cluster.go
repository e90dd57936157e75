package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	clusterCreateTimeout = 60 * time.Second // redis-cli --cluster create, all told
	clusterReadyTimeout  = 30 * time.Second // until every node says cluster_state:ok
)

// Cluster is a Redis Cluster of masters without replicas, each a
// redis-server process the test controls, on loopback.
type Cluster struct {
	t     testing.TB
	nodes []*Server
}

// StartCluster starts a Redis Cluster of n masters (n >= 3, as redis-cli
// requires) for the test t, joins them with redis-cli --cluster create, and
// waits until every node reports cluster_state:ok. The nodes are killed when
// the test ends. Without redis-server and redis-cli on PATH it skips t, or
// fails it when THROTTLER_REQUIRE_REDIS=1; REDIS_URL does not apply here.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	if n < 3 {
		t.Fatalf("redistest: StartCluster(%d): redis-cli --cluster create needs at least 3 masters", n)
	}
	server, errServer := exec.LookPath("redis-server")
	cli, errCLI := exec.LookPath("redis-cli")
	if errServer != nil || errCLI != nil {
		unavailable(t, "redis-server or redis-cli not found on PATH (a Redis Cluster needs both; REDIS_URL is not used)", "install redis-server and redis-tools")
	}

	c := &Cluster{t: t}
	for range n {
		c.nodes = append(c.nodes, startLocal(t, server, true))
	}

	ctx, cancel := context.WithTimeout(context.Background(), clusterCreateTimeout)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redistest: redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}

	if err := c.waitReady(); err != nil {
		t.Fatalf("redistest: cluster %v not ready: %v\nredis-cli output:\n%s", c.Addrs(), err, out)
	}
	return c
}

// waitReady waits until every node reports cluster_state:ok and knows all
// the others.
func (c *Cluster) waitReady() error {
	deadline := time.Now().Add(clusterReadyTimeout)
	for _, node := range c.nodes {
		for {
			err := c.nodeReady(node.Addr())
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s: %v", node.Addr(), err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

// nodeReady checks one node's CLUSTER INFO.
func (c *Cluster) nodeReady(addr string) error {
	info, err := command(addr, "CLUSTER", "INFO")
	if err != nil {
		return err
	}
	if state := infoField(info, "cluster_state"); state != "ok" {
		return fmt.Errorf("cluster_state:%s", state)
	}
	if known, want := infoField(info, "cluster_known_nodes"), strconv.Itoa(len(c.nodes)); known != want {
		return fmt.Errorf("cluster_known_nodes:%s, want %s", known, want)
	}
	return nil
}

// Addrs returns the nodes' addresses, "127.0.0.1:PORT" each.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, node := range c.nodes {
		addrs[i] = node.Addr()
	}
	return addrs
}

// Nodes returns the cluster's servers, for Pause, Kill, Restart and the like
// on one node.
func (c *Cluster) Nodes() []*Server { return append([]*Server(nil), c.nodes...) }

// NewClusterClient returns a go-redis cluster client seeded with every node,
// closed when the test that started the cluster ends. Optional configure
// functions may adjust the options first.
func (c *Cluster) NewClusterClient(configure ...func(*redis.ClusterOptions)) *redis.ClusterClient {
	opts := &redis.ClusterOptions{Addrs: c.Addrs()}
	for _, f := range configure {
		f(opts)
	}
	cc := redis.NewClusterClient(opts)
	c.t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// Key returns a key name unique to the test t and this call, like Key.
func (c *Cluster) Key(t testing.TB, name string) string { return Key(t, name) }
