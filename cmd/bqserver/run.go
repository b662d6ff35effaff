package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/bq-lock/bq/cmd/internal/cli"
	"github.com/bq-lock/bq/server"
)

// stopBudget is how long a stopping server may take before we give up waiting.
const stopBudget = 2 * time.Second

func runCmd(stderr io.Writer) *cobra.Command {
	var dir, metricsAddr, cpuprofile string
	var id int
	var logs cli.LogFlags
	cmd := &cobra.Command{
		Use:   "run --dir DIR --id I [--metrics ADDR]",
		Short: "Run one server of a cluster until SIGINT or SIGTERM",
		Long: `Run server I of the cluster in DIR (made by 'bqserver init'): it needs DIR/cluster.yaml and its
own DIR/server-I/ directory, where it keeps its data (a write-ahead log and bbolt). Logs go to
stderr. SIGINT or SIGTERM stop it within two seconds (exit 0).`,
		Example: `  bqserver run --dir /etc/bq --id 0 --metrics 127.0.0.1:9400`,
		Args:    cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" || !cmd.Flags().Changed("id") || id < 0 {
				return cli.Usagef("--dir and --id are required")
			}
			logger, err := logs.Logger(stderr)
			if err != nil {
				return err
			}
			if cpuprofile != "" {
				f, err := os.Create(cpuprofile)
				if err == nil {
					err = pprof.StartCPUProfile(f)
				}
				if err != nil {
					return &cli.Exit{Code: 1, Msg: fmt.Sprintf("--cpuprofile: %v", err)}
				}
				defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			srv, err := server.Start(server.Config{Dir: dir, ID: id, Logger: logger, MetricsAddr: metricsAddr})
			if err != nil {
				logger.Error("cannot start", "err", err)
				return &cli.Exit{Code: 1, Msg: err.Error()}
			}
			<-ctx.Done()
			logger.Info("stopping", "signal", context.Cause(ctx))
			return closeWithin(srv.Close, stopBudget, logger)
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "", "cluster directory made by 'bqserver init' (required)")
	f.IntVar(&id, "id", -1, "this server's id in DIR/cluster.yaml (required)")
	f.StringVar(&metricsAddr, "metrics", "", "serve Prometheus metrics on this TCP address (e.g. 127.0.0.1:9400), at /metrics")
	f.StringVar(&cpuprofile, "cpuprofile", "", "write a CPU profile of the whole run to this file (benchmarks)")
	_ = f.MarkHidden("cpuprofile")
	logs.Add(f, "info")
	return cmd
}

// closeWithin runs closeFn and returns nil if it finished in time without error.
func closeWithin(closeFn func() error, budget time.Duration, logger *slog.Logger) error {
	done := make(chan error, 1)
	go func() { done <- closeFn() }()
	select {
	case err := <-done:
		if err != nil {
			logger.Error("stopped with an error", "err", err)
			return &cli.Exit{Code: 1, Msg: fmt.Sprintf("stopped with an error: %v", err)}
		}
		return nil
	case <-time.After(budget):
		logger.Error("did not stop in time; exiting anyway", "budget", budget)
		return &cli.Exit{Code: 1, Msg: fmt.Sprintf("did not stop within %v", budget)}
	}
}
