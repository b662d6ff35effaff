package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/bq-lock/bq"
	"github.com/bq-lock/bq/certs"
	"github.com/bq-lock/bq/crypto"
	"github.com/bq-lock/bq/server"
)

func runDev(args []string, stdout, stderr io.Writer) int {
	fset := flag.NewFlagSet("bqserver dev", flag.ContinueOnError)
	fset.SetOutput(stderr)
	dir := fset.String("dir", "", "cluster directory (made if it has no cluster.yaml; default: a new temporary directory)")
	servers := fset.Int("servers", 4, "number of servers when making a new cluster")
	portBase := fset.Int("port-base", 7400, "first UDP port when making a new cluster")
	logOpts := addLogFlags(fset)
	if err := fset.Parse(args); err != nil {
		return 2
	}
	if fset.NArg() > 0 {
		fmt.Fprintf(stderr, "bqserver dev: unexpected argument %q\n", fset.Arg(0))
		return 2
	}
	logger, err := logOpts.logger(stderr)
	if err != nil {
		fmt.Fprintln(stderr, "bqserver dev:", err)
		return 2
	}
	if *dir == "" {
		tmp, err := os.MkdirTemp("", "bq-dev-")
		if err != nil {
			fmt.Fprintln(stderr, "bqserver dev:", err)
			return 1
		}
		*dir = tmp
	}
	clusterFile := filepath.Join(*dir, "cluster.yaml")
	if _, err := os.Stat(clusterFile); errors.Is(err, fs.ErrNotExist) {
		c, err := certs.Init(certs.InitOptions{Dir: *dir, Servers: *servers, F: -1, Host: "127.0.0.1", PortBase: *portBase}, time.Now(), rand.Reader)
		if err != nil {
			fmt.Fprintln(stderr, "bqserver dev:", err)
			return 1
		}
		fmt.Fprintf(stdout, "made a %d-server cluster (f=%d, quorum %d) in %s\n", c.N, c.F, c.Quorum, *dir)
	}
	cluster, err := certs.LoadCluster(clusterFile)
	if err != nil {
		fmt.Fprintln(stderr, "bqserver dev:", err)
		return 1
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var running []*server.Server
	closeAll := func() error {
		var errs []error
		for _, s := range running {
			errs = append(errs, s.Close())
		}
		return errors.Join(errs...)
	}
	for i := range cluster.N {
		s, err := server.Start(newServerConfig(*dir, i, logger))
		if err != nil {
			fmt.Fprintf(stderr, "bqserver dev: starting server %d: %v\n", i, err)
			_ = closeAll()
			return 1
		}
		running = append(running, s)
	}
	fmt.Fprintf(stdout, "bq dev cluster: %d servers on 127.0.0.1, tolerates %d faulty, quorum %d\n", cluster.N, cluster.F, cluster.Quorum)
	for _, s := range running {
		fmt.Fprintf(stdout, "  %s  %s\n", s.ID(), s.Addr())
	}
	fmt.Fprintf(stdout, "cluster file: %s\n", clusterFile)
	if err := selfCheck(ctx, cluster, stdout); err != nil {
		fmt.Fprintf(stderr, "bqserver dev: self-check failed: %v\n", err)
		_ = closeAll()
		return 1
	}
	fmt.Fprintf(stdout, `
try it (from the repository root):
  export BQ_CLUSTER=%s
  go run ./cmd/bqclient lock demo -- sh -c 'echo "holding $BQ_LOCK_NAME with token $BQ_LOCK_TOKEN"'
  go run ./cmd/bqclient lock demo          # holds until Ctrl-C; run status in another shell:
  go run ./cmd/bqclient status demo
to run the same servers as separate processes instead: bqserver run --dir %s --id 0   (and 1..%d)
press Ctrl-C (or send SIGTERM) to stop
`, clusterFile, *dir, cluster.N-1)
	<-ctx.Done()
	logger.Info("stopping dev cluster")
	return closeWithin(closeAll, stopBudget, logger)
}

// selfCheck takes and releases one lock through the SDK, as a user would.
func selfCheck(ctx context.Context, cluster *certs.Cluster, stdout io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	key, err := crypto.GenerateKey(cluster.Scheme, rand.Reader)
	if err != nil {
		return err
	}
	start := time.Now()
	c, err := bq.Dial(ctx, bq.Config{Cluster: cluster, Identity: key})
	if err != nil {
		return err
	}
	defer c.Close()
	h, err := c.Mutex("bq-dev-self-check").Lock(ctx)
	if err != nil {
		return err
	}
	took := time.Since(start)
	if err := h.Unlock(ctx); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "self-check: took lock %q (token %s) and released it, %v after connecting\n",
		"bq-dev-self-check", h.Token(), took.Round(time.Millisecond))
	return nil
}
