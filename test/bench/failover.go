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
	observerReady        = "bench: observing"
	observerSaw          = "bench: observed "
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

// observerMain is "bench observer": dial, observe the election, and print
// each leader's value with the instant it was seen. With --poll (bq only)
// it reads the leader that often instead: what Election.Observe did before
// it was pushed (docs/protocol.md change 32).
func observerMain(args []string) int {
	fs := flag.NewFlagSet("observer", flag.ContinueOnError)
	system := fs.String("system", "", "bq or etcd")
	cluster := fs.String("cluster", "", "bq: cluster file")
	endpoints := fs.String("endpoints", "", "etcd: client URLs, comma-separated")
	poll := fs.Duration("poll", 0, "bq: read the leader this often instead of observing (0: Observe)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	saw := func(value string) { fmt.Printf("%s%s at %d\n", observerSaw, value, time.Now().UnixNano()) }
	switch *system {
	case "bq":
		c, err := bq.Dial(ctx, bq.Config{ClusterFile: *cluster, Observe: true})
		if err != nil {
			fmt.Fprintln(os.Stderr, "observer:", err)
			return 1
		}
		defer c.Close()
		e := c.Election("bench")
		fmt.Println(observerReady)
		if *poll == 0 {
			for l := range e.Observe(ctx) {
				saw(l.Value)
			}
			return 0
		}
		last := ""
		for ctx.Err() == nil {
			if l, err := e.Leader(ctx); err == nil && l.Value != last {
				last = l.Value
				saw(l.Value)
			}
			select {
			case <-time.After(*poll):
			case <-ctx.Done():
			}
		}
	case "etcd":
		cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(*endpoints, ","), DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			fmt.Fprintln(os.Stderr, "observer:", err)
			return 1
		}
		defer cli.Close()
		s, err := concurrency.NewSession(cli)
		if err != nil {
			fmt.Fprintln(os.Stderr, "observer:", err)
			return 1
		}
		defer s.Close()
		fmt.Println(observerReady)
		for resp := range concurrency.NewElection(s, etcdElectionKey).Observe(ctx) {
			if len(resp.Kvs) > 0 {
				saw(string(resp.Kvs[0].Value))
			}
		}
	default:
		fmt.Fprintln(os.Stderr, "observer: --system bq or etcd")
		return 2
	}
	return 0
}

// failoverResult is what the failover workload measures.
type failoverResult struct {
	// failover: kill -9 of the leader to the next leader's Campaign returning.
	failover durations
	// observed: the next leader's Campaign returning to an observer
	// printing its value (negative when the observer saw it first).
	observed durations
}

// failoverRounds measures rounds failovers: candidates are started by
// start (a fresh one each time), the leader is killed with SIGKILL, and the
// time from the kill to the instant the next leader's Campaign returned is
// recorded; and the time from that instant to the one observer printing
// the new leader's value.
func failoverRounds(ctx context.Context, name string, rounds int, start func(i int) (*child, error), observer *child) (failoverResult, error) {
	logf("%s: failover, %d kill -9 of the leader (session TTL %v)", name, rounds, failoverTTL)
	var res failoverResult
	if err := observer.waitLog(observerReady, 1, 30*time.Second); err != nil {
		return res, err
	}
	next := 0
	values := make(map[*child]string)
	spawn := func() (*child, error) {
		c, err := start(next)
		values[c] = fmt.Sprint("c", next)
		next++
		if err != nil {
			return nil, err
		}
		return c, c.waitLog(candidateCampaigning, 1, 30*time.Second)
	}
	leader, err := spawn()
	if err != nil {
		return res, err
	}
	if err := leader.waitLog(candidateLeads, 1, 30*time.Second); err != nil {
		return res, err
	}
	var waiting []*child
	for range failoverWaiting {
		c, err := spawn()
		if err != nil {
			return res, err
		}
		waiting = append(waiting, c)
	}
	out := &res.failover
	for range rounds {
		// Let the waiting candidates queue (their Campaign is under way).
		if err := sleep(ctx, 500*time.Millisecond); err != nil {
			return res, err
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
				return res, fmt.Errorf("no candidate led within %v of the leader's kill -9", 10*failoverTTL)
			}
			if err := sleep(ctx, 2*time.Millisecond); err != nil {
				return res, err
			}
		}
		at, err := leadsAt(led.output())
		if err != nil {
			return res, err
		}
		*out = append(*out, time.Unix(0, at).Sub(killed))
		logf("%s: failover %d: %v, to %s", name, len(*out), time.Unix(0, at).Sub(killed).Round(time.Millisecond), values[led])
		seen := observerSaw + values[led] + " at "
		if err := observer.waitLog(seen, 1, 10*failoverTTL); err != nil {
			return res, err
		}
		log := observer.output()
		f := strings.Fields(log[strings.Index(log, seen)+len(seen):])
		if len(f) == 0 {
			return res, fmt.Errorf("bad observer log: %q", log)
		}
		obsAt, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return res, err
		}
		res.observed = append(res.observed, time.Duration(obsAt-at))
		rest := waiting[:0]
		for _, c := range waiting {
			if c != led {
				rest = append(rest, c)
			}
		}
		leader, waiting = led, rest
		c, err := spawn()
		if err != nil {
			return res, err
		}
		waiting = append(waiting, c)
	}
	return res, nil
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
func bqFailover(ctx context.Context, o *options, work, self, name string, b *bqCluster) (failoverResult, error) {
	obs, err := startChild(name+" observer", filepath.Join(work, strings.ReplaceAll(name, "/", "-")+"-observer.log"),
		self, "observer", "--system", "bq", "--cluster", filepath.Join(b.dir, "cluster.yaml"), "--poll", o.observePoll.String())
	if err != nil {
		return failoverResult{}, err
	}
	return failoverRounds(ctx, name, o.failoverRounds, func(i int) (*child, error) {
		return startChild(fmt.Sprintf("%s candidate %d", name, i), filepath.Join(work, fmt.Sprintf("%s-candidate-%d.log", strings.ReplaceAll(name, "/", "-"), i)),
			self, "candidate", "--system", "bq", "--cluster", filepath.Join(b.dir, "cluster.yaml"), "--name", fmt.Sprint("c", i), "--ttl", failoverTTL.String())
	}, obs)
}

// etcdFailover runs the failover workload on e.
func etcdFailover(ctx context.Context, o *options, work, self string, e *etcdCluster) (failoverResult, error) {
	obs, err := startChild("etcd observer", filepath.Join(work, "etcd-observer.log"),
		self, "observer", "--system", "etcd", "--endpoints", strings.Join(e.endpoints, ","))
	if err != nil {
		return failoverResult{}, err
	}
	return failoverRounds(ctx, "etcd", o.failoverRounds, func(i int) (*child, error) {
		return startChild(fmt.Sprintf("etcd candidate %d", i), filepath.Join(work, fmt.Sprintf("etcd-candidate-%d.log", i)),
			self, "candidate", "--system", "etcd", "--endpoints", strings.Join(e.endpoints, ","), "--name", fmt.Sprint("c", i), "--ttl", failoverTTL.String())
	}, obs)
}
