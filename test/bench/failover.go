package main

import (
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/bq-lock/bq"
	"github.com/bq-lock/bq/certs"
	"github.com/bq-lock/bq/crypto"
)

// The failover workload (docs/election.md): candidates, each a process of
// its own ("bench candidate ..."), campaign in one election; the leader is
// killed with SIGKILL and the time until another candidate's Campaign
// returns is one failover. bq's Election against etcd's
// concurrency.Election, both with the same session TTL.

const (
	// failoverTTL is both systems' session TTL (etcd's lease TTL is whole
	// seconds; its server grants at least about 1.5 s with default timing).
	failoverTTL          = 2 * time.Second
	failoverWaiting      = 2 // candidates queued behind the leader in each round
	candidateCampaigning = "bench: campaigning"
	candidateLeads       = "bench: leading at "
	etcdElectionKey      = "/election/bench"
)

// candidateMain is "bench candidate": dial, campaign with --name as value,
// print the instant Campaign returned, then lead until killed (or resign on
// SIGTERM).
func candidateMain(args []string) int {
	fs := flag.NewFlagSet("candidate", flag.ContinueOnError)
	system := fs.String("system", "", "bq or etcd")
	cluster := fs.String("cluster", "", "bq: cluster file")
	endpoints := fs.String("endpoints", "", "etcd: client URLs, comma-separated")
	name := fs.String("name", "", "the candidate's value")
	ttl := fs.Duration("ttl", failoverTTL, "session TTL")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var resign func()
	switch *system {
	case "bq":
		cl, err := certs.LoadCluster(*cluster)
		if err != nil {
			fmt.Fprintln(os.Stderr, "candidate:", err)
			return 1
		}
		key, err := crypto.GenerateKey(cl.Scheme, rand.Reader)
		if err != nil {
			fmt.Fprintln(os.Stderr, "candidate:", err)
			return 1
		}
		c, err := bq.Dial(ctx, bq.Config{Cluster: cl, Identity: key, TTL: *ttl})
		if err != nil {
			fmt.Fprintln(os.Stderr, "candidate:", err)
			return 1
		}
		defer c.Close()
		fmt.Println(candidateCampaigning)
		l, err := c.Election("bench").Campaign(ctx, *name)
		if err != nil {
			fmt.Fprintln(os.Stderr, "candidate:", err)
			return 1
		}
		fmt.Printf("%s%d term=%s\n", candidateLeads, time.Now().UnixNano(), l.Term())
		resign = func() { _ = l.Resign(context.Background()) }
	case "etcd":
		cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(*endpoints, ","), DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			fmt.Fprintln(os.Stderr, "candidate:", err)
			return 1
		}
		defer cli.Close()
		s, err := concurrency.NewSession(cli, concurrency.WithTTL(int(ttl.Seconds())))
		if err != nil {
			fmt.Fprintln(os.Stderr, "candidate:", err)
			return 1
		}
		e := concurrency.NewElection(s, etcdElectionKey)
		fmt.Println(candidateCampaigning)
		if err := e.Campaign(ctx, *name); err != nil {
			fmt.Fprintln(os.Stderr, "candidate:", err)
			return 1
		}
		fmt.Printf("%s%d rev=%d\n", candidateLeads, time.Now().UnixNano(), e.Rev())
		resign = func() { _ = e.Resign(context.Background()); _ = s.Close() }
	default:
		fmt.Fprintln(os.Stderr, "candidate: --system bq or etcd")
		return 2
	}
	<-ctx.Done()
	resign()
	return 0
}

// failoverRounds measures rounds failovers: candidates are started by
// start (a fresh one each time), the leader is killed with SIGKILL, and the
// time from the kill to the instant the next leader's Campaign returned is
// recorded.
func failoverRounds(ctx context.Context, name string, rounds int, start func(i int) (*child, error)) (durations, error) {
	logf("%s: failover, %d kill -9 of the leader (session TTL %v)", name, rounds, failoverTTL)
	next := 0
	spawn := func() (*child, error) {
		c, err := start(next)
		next++
		if err != nil {
			return nil, err
		}
		return c, c.waitLog(candidateCampaigning, 1, 30*time.Second)
	}
	leader, err := spawn()
	if err != nil {
		return nil, err
	}
	if err := leader.waitLog(candidateLeads, 1, 30*time.Second); err != nil {
		return nil, err
	}
	var waiting []*child
	for range failoverWaiting {
		c, err := spawn()
		if err != nil {
			return nil, err
		}
		waiting = append(waiting, c)
	}
	var out durations
	for range rounds {
		// Let the waiting candidates queue (their Campaign is under way).
		if err := sleep(ctx, 500*time.Millisecond); err != nil {
			return out, err
		}
		killed := time.Now()
		_ = leader.cmd.Process.Kill()
		var led *child
		deadline := time.Now().Add(10 * failoverTTL)
		for led == nil {
			for _, c := range waiting {
				if strings.Contains(c.output(), candidateLeads) {
					led = c
				}
			}
			if led != nil {
				break
			}
			if time.Now().After(deadline) {
				return out, fmt.Errorf("no candidate led within %v of the leader's kill -9", 10*failoverTTL)
			}
			if err := sleep(ctx, 2*time.Millisecond); err != nil {
				return out, err
			}
		}
		at, err := leadsAt(led.output())
		if err != nil {
			return out, err
		}
		out = append(out, time.Unix(0, at).Sub(killed))
		rest := waiting[:0]
		for _, c := range waiting {
			if c != led {
				rest = append(rest, c)
			}
		}
		leader, waiting = led, rest
		c, err := spawn()
		if err != nil {
			return out, err
		}
		waiting = append(waiting, c)
	}
	return out, nil
}

// leadsAt is the instant (Unix ns) a candidate's log says it began to lead.
func leadsAt(log string) (int64, error) {
	i := strings.Index(log, candidateLeads)
	f := strings.Fields(log[i+len(candidateLeads):])
	if len(f) == 0 {
		return 0, fmt.Errorf("bad candidate log: %q", log)
	}
	return strconv.ParseInt(f[0], 10, 64)
}

// bqFailover runs the failover workload on b.
func bqFailover(ctx context.Context, o *options, work, self, name string, b *bqCluster) (durations, error) {
	return failoverRounds(ctx, name, o.failoverRounds, func(i int) (*child, error) {
		return startChild(fmt.Sprintf("%s candidate %d", name, i), filepath.Join(work, fmt.Sprintf("%s-candidate-%d.log", strings.ReplaceAll(name, "/", "-"), i)),
			self, "candidate", "--system", "bq", "--cluster", filepath.Join(b.dir, "cluster.yaml"), "--name", fmt.Sprint("c", i), "--ttl", failoverTTL.String())
	})
}

// etcdFailover runs the failover workload on e.
func etcdFailover(ctx context.Context, o *options, work, self string, e *etcdCluster) (durations, error) {
	return failoverRounds(ctx, "etcd", o.failoverRounds, func(i int) (*child, error) {
		return startChild(fmt.Sprintf("etcd candidate %d", i), filepath.Join(work, fmt.Sprintf("etcd-candidate-%d.log", i)),
			self, "candidate", "--system", "etcd", "--endpoints", strings.Join(e.endpoints, ","), "--name", fmt.Sprint("c", i), "--ttl", failoverTTL.String())
	})
}
