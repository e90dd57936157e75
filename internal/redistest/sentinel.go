package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelMaster is the name the sentinel monitors the master under.
const SentinelMaster = "throttler-test"

// Sentinel is a master, one replica of it, and one redis-sentinel watching
// them (quorum 1, down after 1s), all processes the test controls.
type Sentinel struct {
	t       testing.TB
	Master  *Server
	Replica *Server
	addr    string
	proc    *process
}

// StartSentinel starts a master, a replica of it and a sentinel, and waits
// until the sentinel knows both. Without redis-sentinel on PATH it skips t
// (Sentinel is optional), and without redis-server it skips or fails as
// Start does.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	server, err := exec.LookPath("redis-server")
	if err != nil {
		unavailable(t, "redis-server not found on PATH", "install redis-server")
	}
	sentinelBin, err := exec.LookPath("redis-sentinel")
	if err != nil {
		t.Skip("redis-sentinel not found on PATH: skipping the Sentinel test (Debian: apt-get install redis-sentinel)")
	}
	s := &Sentinel{t: t}
	s.Master = startLocal(t, server, false)
	_, mport, _ := net.SplitHostPort(s.Master.Addr())
	s.Replica = startLocal(t, server, false, "--replicaof", "127.0.0.1", mport)

	port, err := freePort(false)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	s.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	body := fmt.Sprintf("port %d\nbind 127.0.0.1\nprotected-mode no\ndir %s\n"+
		"sentinel monitor %s 127.0.0.1 %s 1\n"+
		"sentinel down-after-milliseconds %s 1000\n"+
		"sentinel failover-timeout %s 5000\n"+
		"sentinel parallel-syncs %s 1\n",
		port, dir, SentinelMaster, mport, SentinelMaster, SentinelMaster, SentinelMaster)
	if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	logFile, err := os.Create(filepath.Join(dir, "sentinel.log"))
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	defer logFile.Close()
	cmd := exec.Command(sentinelBin, conf)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	configureCmd(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatalf("redistest: cannot start %s: %v", sentinelBin, err)
	}
	s.proc = &process{cmd: cmd, exited: make(chan struct{})}
	go func() {
		s.proc.err = cmd.Wait()
		close(s.proc.exited)
	}()
	t.Cleanup(func() {
		_ = s.proc.cmd.Process.Kill()
		<-s.proc.exited
	})

	// The sentinel must know the master and have discovered the replica,
	// and the replica must be in sync, before a failover can work.
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.addr})
	defer sc.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		replicas, err := sc.Replicas(ctx, SentinelMaster).Result()
		cancel()
		info, _ := command(s.Replica.Addr(), "INFO", "replication")
		if err == nil && len(replicas) > 0 && strings.Contains(info, "master_link_status:up") {
			return s
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(dir, "sentinel.log"))
			t.Fatalf("redistest: sentinel on %s not ready: %v\n%s", s.addr, err, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Addr returns the sentinel's address.
func (s *Sentinel) Addr() string { return s.addr }

// MasterAddr asks the sentinel which address the master is at now.
func (s *Sentinel) MasterAddr() (string, error) {
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.addr})
	defer sc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	hp, err := sc.GetMasterAddrByName(ctx, SentinelMaster).Result()
	if err != nil {
		return "", err
	}
	if len(hp) != 2 {
		return "", fmt.Errorf("unexpected answer %q", hp)
	}
	return net.JoinHostPort(hp[0], hp[1]), nil
}

// NewFailoverClient returns a go-redis failover client that finds the master
// through the sentinel; it is closed at the end of the test.
func (s *Sentinel) NewFailoverClient(configure ...func(*redis.FailoverOptions)) *redis.Client {
	opts := &redis.FailoverOptions{MasterName: SentinelMaster, SentinelAddrs: []string{s.addr}}
	for _, f := range configure {
		f(opts)
	}
	c := redis.NewFailoverClient(opts)
	s.t.Cleanup(func() { c.Close() })
	return c
}
