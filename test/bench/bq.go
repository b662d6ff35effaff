package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/bq-lock/bq"
	"github.com/bq-lock/bq/certs"
	"github.com/bq-lock/bq/crypto"
)

// bqCluster is n bqserver processes (4 unless --servers) on loopback, each with durable bbolt
// storage and a metrics endpoint.
type bqCluster struct {
	bin     string // bqserver
	dir     string
	cluster *certs.Cluster
	servers []*child
	metrics []string // metrics URLs
}

// bqServers is n by default (--servers), and always for --attack.
const bqServers = 4

// startBQ makes a fresh open cluster in work/bq and starts its servers.
// With profileDir, each server writes a CPU profile there when it stops.
func startBQ(bin, work, profileDir string) (*bqCluster, error) {
	return startCluster(bin, work, profileDir, clusterOptions{name: "bq"})
}

// clusterOptions say which cluster startCluster makes: its directory
// work/name (its servers log to work/name-server-<i>.log, or
// work/bqserver-<i>.log for "bq"), and whether it is closed (served keys
// only with an admission certificate, docs/protocol.md change 23).
type clusterOptions struct {
	name   string
	closed bool
	scheme string // signature scheme (bqserver init --scheme); "" is the default
	// servers is n (0: bqServers), with f = ⌊(n-1)/3⌋, the most n tolerate.
	servers int
}

func startCluster(bin, work, profileDir string, o clusterOptions) (*bqCluster, error) {
	file := strings.ReplaceAll(o.name, "/", "-") // "bq/ML-DSA-44" → bq-ML-DSA-44
	dir := filepath.Join(work, file)
	logPrefix := "bqserver"
	if o.name != "bq" {
		logPrefix = file + "-server"
	}
	n := o.servers
	if n == 0 {
		n = bqServers
	}
	f := (n - 1) / 3
	base, err := freeUDPBase(n)
	if err != nil {
		return nil, err
	}
	initArgs := []string{"init", "--dir", dir, "--servers", fmt.Sprint(n), "--f", fmt.Sprint(f), "--port-base", fmt.Sprint(base)}
	if !o.closed {
		initArgs = append(initArgs, "--open")
	}
	if o.scheme != "" {
		initArgs = append(initArgs, "--scheme", o.scheme)
	}
	out, err := exec.Command(bin, initArgs...).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("bqserver init: %v\n%s", err, out)
	}
	cl, err := certs.LoadCluster(filepath.Join(dir, "cluster.yaml"))
	if err != nil {
		return nil, err
	}
	if cl.N != n || cl.F != f || len(cl.Servers) != n {
		return nil, fmt.Errorf("bqserver init --servers %d --f %d made n=%d f=%d with %d servers", n, f, cl.N, cl.F, len(cl.Servers))
	}
	ports, err := freeTCPPorts(n)
	if err != nil {
		return nil, err
	}
	b := &bqCluster{bin: bin, dir: dir, cluster: cl}
	for i := range n {
		args := []string{bin, "run", "--dir", dir, "--id", fmt.Sprint(i), "--metrics", fmt.Sprintf("127.0.0.1:%d", ports[i])}
		if profileDir != "" {
			args = append(args, "--cpuprofile", filepath.Join(profileDir, fmt.Sprintf("bqserver-%d.pprof", i)))
		}
		c, err := startChild(fmt.Sprintf("%s-%d", logPrefix, i), filepath.Join(work, fmt.Sprintf("%s-%d.log", logPrefix, i)), args...)
		if err != nil {
			b.stop()
			return nil, err
		}
		b.servers = append(b.servers, c)
		b.metrics = append(b.metrics, fmt.Sprintf("http://127.0.0.1:%d/metrics", ports[i]))
	}
	for _, c := range b.servers {
		// Every server logs the n-1 peers it accepted, each with mutual TLS.
		if err := c.waitLog("accepted server connection", n-1, 30*time.Second); err != nil {
			b.stop()
			return nil, err
		}
	}
	return b, nil
}

func (b *bqCluster) pids() []int {
	var ps []int
	for _, c := range b.servers {
		ps = append(ps, c.pid())
	}
	return ps
}

// stop stops the servers with SIGTERM (so CPU profiles are written).
func (b *bqCluster) stop() {
	var wg sync.WaitGroup
	for _, c := range b.servers {
		wg.Go(func() { c.stop(5 * time.Second) })
	}
	wg.Wait()
}

// fence checks that fencing tokens grow from each holder to the next.
type fence struct {
	mu   sync.Mutex
	last bq.Token
	bad  int
}

func (f *fence) check(t bq.Token) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.last.Less(t) {
		f.bad++
	}
	f.last = t
}

// bqLocker is one SDK client (its own identity, connections and session)
// taking one lock.
type bqLocker struct {
	c     *bq.Client
	m     *bq.Mutex
	h     *bq.Holding
	fence *fence
	// acquire, if set, takes the lock in another mode than m's exclusive
	// (shared.go).
	acquire func(context.Context) (*bq.Holding, error)
}

func (l *bqLocker) Lock(ctx context.Context) error {
	lock := l.m.Lock
	if l.acquire != nil {
		lock = l.acquire
	}
	h, err := lock(ctx)
	if err != nil {
		return err
	}
	l.h = h
	if l.fence != nil {
		l.fence.check(h.Token())
	}
	return nil
}

func (l *bqLocker) Unlock(ctx context.Context) error {
	h := l.h
	l.h = nil
	if h == nil {
		return errors.New("unlock without a holding")
	}
	return h.Unlock(ctx)
}

func (l *bqLocker) Close() error { return l.c.Close() }

// dial opens k clients in parallel, each with a fresh in-memory identity,
// all on the lock called name.
func (b *bqCluster) dial(ctx context.Context, k int, name string, f *fence) ([]locker, error) {
	return b.dialEach(ctx, k, func(int) (string, *fence) { return name, f })
}

// dialParallel bounds the clients dialling at once (the handshakes of a few
// hundred would outlast the dial timeout on two cores).
const dialParallel = 64

// dialEach opens k clients like dial, client i on the lock lock(i) names,
// checking its tokens with the fence it returns (nil: none).
func (b *bqCluster) dialEach(ctx context.Context, k int, lock func(i int) (string, *fence)) ([]locker, error) {
	ls := make([]locker, k)
	errs := make([]error, k)
	sem := make(chan struct{}, dialParallel)
	var wg sync.WaitGroup
	for i := range k {
		name, f := lock(i)
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			key, err := crypto.GenerateKey(b.cluster.Scheme, rand.Reader)
			if err != nil {
				errs[i] = err
				return
			}
			dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			c, err := bq.Dial(dctx, bq.Config{Cluster: b.cluster, Identity: key})
			if err != nil {
				errs[i] = err
				return
			}
			ls[i] = &bqLocker{c: c, m: c.Mutex(name), fence: f}
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

// byClientID orders per-client counts (aligned with ls) by ClientID.
func byClientID(ls []locker, counts []int) []int {
	type pc struct {
		id string
		n  int
	}
	var ps []pc
	for i, l := range ls {
		if bl, ok := l.(*bqLocker); ok && i < len(counts) {
			ps = append(ps, pc{bl.c.ID().Hex(), counts[i]})
		}
	}
	slices.SortFunc(ps, func(a, b pc) int { return strings.Compare(a.id, b.id) })
	var out []int
	for _, p := range ps {
		out = append(out, p.n)
	}
	return out
}
