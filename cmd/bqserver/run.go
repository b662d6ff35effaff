package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/bq-lock/bq/server"
)

// stopBudget is how long a stopping server may take before we give up waiting.
const stopBudget = 2 * time.Second

func runServer(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bqserver run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "cluster directory made by 'bqserver init' (required)")
	id := fs.Int("id", -1, "this server's id in DIR/cluster.yaml (required)")
	metricsAddr := fs.String("metrics", "", "serve Prometheus metrics on this TCP address (e.g. 127.0.0.1:9400), at /metrics")
	logOpts := addLogFlags(fs)
	// Hidden (benchmarks, test/bench): profile the server's CPU until it stops.
	cpuprofile := fs.String("cpuprofile", "", "")
	fs.Usage = func() { usageExcept(fs, "cpuprofile") }
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *dir == "" || *id < 0 || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "bqserver run: --dir and --id are required, and nothing else")
		fs.Usage()
		return 2
	}
	logger, err := logOpts.logger(stderr)
	if err != nil {
		fmt.Fprintln(stderr, "bqserver run:", err)
		return 2
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(stderr, "bqserver run: --cpuprofile:", err)
			return 1
		}
		defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	cfg := newServerConfig(*dir, *id, logger)
	cfg.MetricsAddr = *metricsAddr
	srv, err := server.Start(cfg)
	if err != nil {
		logger.Error("cannot start", "err", err)
		fmt.Fprintf(stderr, "bqserver run: %v\n", err)
		return 1
	}
	<-ctx.Done()
	logger.Info("stopping", "signal", context.Cause(ctx))
	return closeWithin(srv.Close, stopBudget, logger)
}

// usageExcept prints fs's usage without the hidden flags.
func usageExcept(fs *flag.FlagSet, hidden ...string) {
	shown := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
	shown.SetOutput(fs.Output())
	fs.VisitAll(func(f *flag.Flag) {
		if !slices.Contains(hidden, f.Name) {
			shown.Var(f.Value, f.Name, f.Usage)
		}
	})
	fmt.Fprintf(fs.Output(), "Usage of %s:\n", fs.Name())
	shown.PrintDefaults()
}

// closeWithin runs closeFn and returns 0 if it finished in time without error.
func closeWithin(closeFn func() error, budget time.Duration, logger *slog.Logger) int {
	done := make(chan error, 1)
	go func() { done <- closeFn() }()
	select {
	case err := <-done:
		if err != nil {
			logger.Error("stopped with an error", "err", err)
			return 1
		}
		return 0
	case <-time.After(budget):
		logger.Error("did not stop in time; exiting anyway", "budget", budget)
		return 1
	}
}

func newServerConfig(dir string, id int, logger *slog.Logger) server.Config {
	return server.Config{Dir: dir, ID: id, Logger: logger}
}

type logFlags struct{ level, format *string }

func addLogFlags(fs *flag.FlagSet) logFlags {
	return logFlags{
		level:  fs.String("log-level", "info", "log level: debug, info, warn, error"),
		format: fs.String("log-format", "text", "log format: text or json"),
	}
}

func (l logFlags) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(*l.level)); err != nil {
		return nil, fmt.Errorf("bad --log-level %q: want debug, info, warn or error", *l.level)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(*l.format) {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("bad --log-format %q: want text or json", *l.format)
}
