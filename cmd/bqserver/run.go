package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/bq-lock/bq/cmd/internal/cli"
	"github.com/bq-lock/bq/server"
	"github.com/bq-lock/bq/server/store"
)

// exitStoreFailed is run's exit code when the server's store failed for
// good, at start or while running (docs/protocol.md change 69): a service
// manager should not restart it (systemd: RestartPreventExitStatus=9).
const exitStoreFailed = 9

// stopBudget is how long a stopping server may take before we give up waiting.
const stopBudget = 2 * time.Second

func runCmd(stderr io.Writer) *cobra.Command {
	var dir, metricsAddr, cpuprofile, config string
	var id int
	var logs cli.LogFlags
	cmd := &cobra.Command{
		Use:   "run --dir DIR --id I [--config FILE] [--metrics ADDR]",
		Short: "Run one server of a cluster until SIGINT or SIGTERM",
		Long: `Run server I of the cluster in DIR (made by 'bqserver init'): it needs DIR/cluster.yaml and its
own DIR/server-I/ directory, where it keeps its data (a write-ahead log and bbolt). Logs go to
stderr. SIGINT or SIGTERM stop it within two seconds (exit 0).

A server whose store fails for good — its disk changed a stored byte (the scrub or a read found
it), an fdatasync failed, or an I/O error on its data files — stops voting, signing and answering
at once and exits 9. After damage it writes server-I/CORRUPT and refuses to start (exit 9) while
that file is there: replace it (the README's runbook: "a server's disk is corrupt").

Settings (lease bounds, the max-hold default, limits) come from --config FILE, or DIR/server.yaml
if it exists; every key is optional. 'bqserver settings' prints every key with its default and
what it does. A bad file stops the server with one line per problem.`,
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
			settings, err := loadSettings(dir, config, cmd.Flags().Changed("config"))
			if err != nil {
				return &cli.Exit{Code: 2, Msg: err.Error()}
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			srv, err := server.Start(server.Config{Dir: dir, ID: id, Logger: logger, MetricsAddr: metricsAddr, Settings: settings})
			if err != nil {
				logger.Error("cannot start", "err", err)
				if errors.Is(err, store.ErrFailed) {
					return &cli.Exit{Code: exitStoreFailed, Msg: err.Error()}
				}
				return &cli.Exit{Code: 1, Msg: err.Error()}
			}
			select {
			case <-ctx.Done():
				logger.Info("stopping", "signal", context.Cause(ctx))
				return closeWithin(srv.Close, stopBudget, logger)
			case <-srv.Failed():
				_ = closeWithin(srv.Close, stopBudget, logger)
				return &cli.Exit{Code: exitStoreFailed, Msg: "stopped: " + srv.Failure().Error()}
			}
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "", "cluster directory made by 'bqserver init' (required)")
	f.IntVar(&id, "id", -1, "this server's id in DIR/cluster.yaml (required)")
	f.StringVar(&config, "config", "", "server settings file (default: DIR/server.yaml if it exists)")
	f.StringVar(&metricsAddr, "metrics", "", "serve Prometheus metrics on this TCP address (e.g. 127.0.0.1:9400), at /metrics")
	f.StringVar(&cpuprofile, "cpuprofile", "", "write a CPU profile of the whole run to this file (benchmarks)")
	_ = f.MarkHidden("cpuprofile")
	logs.Add(f, "info")
	return cmd
}

// loadSettings reads the settings file: path if given, else DIR/server.yaml
// if it exists (none: every default).
func loadSettings(dir, path string, given bool) (*server.Settings, error) {
	if !given {
		path = filepath.Join(dir, server.SettingsFileName)
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
	}
	return server.LoadSettings(path)
}

// settingsCmd prints every settings key with its default and what it does.
func settingsCmd(stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "settings",
		Short: "Print every server setting with its default, as a settings file to start from",
		Long: `Print a server settings file with every key commented out at its default and what it does.
Save it as DIR/server.yaml (or pass it to 'bqserver run --config'), and uncomment what you change.`,
		Example: `  bqserver settings > /etc/bq/server.yaml`,
		Args:    cli.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := io.WriteString(stdout, server.SettingsDoc())
			return err
		},
	}
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
