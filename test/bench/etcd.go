package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

const (
	etcdReady   = "bench: etcd member ready"
	etcdLockKey = "/lock/bench"
)

// etcdMember runs one etcd member (embed, default durability: fsync on every
// raft append) until SIGINT or SIGTERM. The bench re-executes itself with
// "etcd-member" to get one process per member.
func etcdMember(args []string) int {
	fs := flag.NewFlagSet("etcd-member", flag.ContinueOnError)
	name := fs.String("name", "", "member name")
	dir := fs.String("dir", "", "data directory")
	peer := fs.String("peer", "", "peer URL")
	clientURL := fs.String("client", "", "client URL")
	cluster := fs.String("cluster", "", "initial cluster: name=peerURL,...")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	pu, err1 := url.Parse(*peer)
	cu, err2 := url.Parse(*clientURL)
	if err := errors.Join(err1, err2); err != nil || *name == "" || *dir == "" || *cluster == "" {
		fmt.Fprintln(os.Stderr, "etcd-member: --name, --dir, --peer, --client and --cluster are required", err)
		return 2
	}
	cfg := embed.NewConfig()
	cfg.Name = *name
	cfg.Dir = *dir
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.InitialCluster = *cluster
	cfg.InitialClusterToken = "bq-bench"
	cfg.ClusterState = embed.ClusterStateFlagNew
	cfg.LogLevel = "warn"
	cfg.LogOutputs = []string{"stderr"}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcd-member:", err)
		return 1
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
		fmt.Println(etcdReady)
	case <-time.After(60 * time.Second):
		fmt.Fprintln(os.Stderr, "etcd-member: not ready within 60s")
		return 1
	case <-ctx.Done():
		return 0
	}
	select {
	case err := <-e.Err():
		fmt.Fprintln(os.Stderr, "etcd-member:", err)
		return 1
	case <-ctx.Done():
		return 0
	}
}

// etcdCluster is etcd's members (--servers or --etcd-members), each its own process.
type etcdCluster struct {
	members   []*child
	endpoints []string
}

func startEtcd(self, work string, members int) (*etcdCluster, error) {
	ports, err := freeTCPPorts(2 * members)
	if err != nil {
		return nil, err
	}
	var initial []string
	for i := range members {
		initial = append(initial, fmt.Sprintf("e%d=http://127.0.0.1:%d", i, ports[2*i]))
	}
	e := &etcdCluster{}
	for i := range members {
		client := fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1])
		c, err := startChild(fmt.Sprintf("etcd-%d", i), filepath.Join(work, fmt.Sprintf("etcd-%d.log", i)),
			self, "etcd-member", "--name", fmt.Sprintf("e%d", i), "--dir", filepath.Join(work, fmt.Sprintf("etcd-%d", i)),
			"--peer", fmt.Sprintf("http://127.0.0.1:%d", ports[2*i]), "--client", client, "--cluster", strings.Join(initial, ","))
		if err != nil {
			e.stop()
			return nil, err
		}
		e.members = append(e.members, c)
		e.endpoints = append(e.endpoints, client)
	}
	for _, c := range e.members {
		if err := c.waitLog(etcdReady, 1, 60*time.Second); err != nil {
			e.stop()
			return nil, err
		}
	}
	return e, nil
}

func (e *etcdCluster) pids() []int {
	var ps []int
	for _, c := range e.members {
		ps = append(ps, c.pid())
	}
	return ps
}

// metrics are the members' Prometheus endpoints (served on the client URLs).
func (e *etcdCluster) metrics() []string {
	var us []string
	for _, ep := range e.endpoints {
		us = append(us, ep+"/metrics")
	}
	return us
}

func (e *etcdCluster) stop() {
	var wg sync.WaitGroup
	for _, c := range e.members {
		wg.Go(func() { c.stop(5 * time.Second) })
	}
	wg.Wait()
}

// etcdLocker is one etcd client with its own connection and session.
type etcdLocker struct {
	cli *clientv3.Client
	s   *concurrency.Session
	m   *concurrency.Mutex
}

func (l *etcdLocker) Lock(ctx context.Context) error   { return l.m.Lock(ctx) }
func (l *etcdLocker) Unlock(ctx context.Context) error { return l.m.Unlock(ctx) }
func (l *etcdLocker) Close() error {
	return errors.Join(l.s.Close(), l.cli.Close())
}

// dial opens k clients, each with its own connection (to all members, as
// clientv3 balances) and its own session (lease TTL 10 s, like bq's default).
func (e *etcdCluster) dial(ctx context.Context, k int, key string) ([]locker, error) {
	return e.dialEach(ctx, k, func(int) string { return key })
}

// dialEach opens k clients like dial, client i on the lock key(i) names.
func (e *etcdCluster) dialEach(ctx context.Context, k int, key func(i int) string) ([]locker, error) {
	ls := make([]locker, k)
	errs := make([]error, k)
	sem := make(chan struct{}, dialParallel)
	var wg sync.WaitGroup
	for i := range k {
		key := key(i)
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			cli, err := clientv3.New(clientv3.Config{Endpoints: e.endpoints, DialTimeout: 10 * time.Second, Logger: zap.NewNop(), Context: ctx})
			if err != nil {
				errs[i] = err
				return
			}
			s, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
			if err != nil {
				_ = cli.Close()
				errs[i] = err
				return
			}
			ls[i] = &etcdLocker{cli: cli, s: s, m: concurrency.NewMutex(s, key)}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		var ok []locker
		for _, l := range ls {
			if l != nil {
				ok = append(ok, l)
			}
		}
		closeAll(ok)
		return nil, err
	}
	return ls, nil
}
