// Command bqserver-byzantine is a bq server that misbehaves on purpose: the
// honest protocol core of `bqserver run`, wrapped by the simulator's
// faulty-server behaviours (test/sim.Mask). It exists for the process-level
// tests (test/e2e) only and lives under test/ so that nothing of it is in the
// bqserver an operator runs.
//
//	bqserver-byzantine --dir DIR --id I --behaviours a+b
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/bq-lock/bq/certs"
	"github.com/bq-lock/bq/server"
	"github.com/bq-lock/bq/test/sim"
)

func main() { os.Exit(run()) }

func run() int {
	dir := flag.String("dir", "", "cluster directory made by 'bqserver init' (required)")
	id := flag.Int("id", -1, "this server's id (required)")
	behaviours := flag.String("behaviours", "", "faulty behaviours to run, joined with + (required): "+strings.Join(sim.ProcessBehaviors, ", "))
	flag.Parse()
	if *dir == "" || *id < 0 || *behaviours == "" || flag.NArg() > 0 {
		flag.Usage()
		return 2
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	names := strings.Split(*behaviours, "+")
	// The operator's settings, as bqserver run reads them (DIR/server.yaml
	// if it exists): its honest core keeps the same lease bounds as the
	// correct members' do.
	var settings *server.Settings
	if path := filepath.Join(*dir, server.SettingsFileName); fileExists(path) {
		var err error
		if settings, err = server.LoadSettings(path); err != nil {
			fmt.Fprintf(os.Stderr, "bqserver-byzantine: %v\n", err)
			return 2
		}
	}
	cfg := server.Config{Dir: *dir, ID: *id, Logger: logger, Settings: settings}
	cfg.NewCore = func(m *certs.ServerMaterial) (server.Core, error) {
		honest, err := server.NewProtocolCore(m, settings.ApplyCore)
		if err != nil {
			return nil, err
		}
		return sim.NewMask(honest, m.ID, m.Cluster.N, m.SigningKey, m.Cluster.Keyring(), 10*time.Second, uint64(time.Now().UnixNano()), names)
	}
	logger.Warn("TEST-ONLY Byzantine mode: this server misbehaves on purpose", "behaviours", *behaviours)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	srv, err := server.Start(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bqserver-byzantine: %v\n", err)
		return 1
	}
	<-ctx.Done()
	if err := srv.Close(); err != nil {
		return 1
	}
	return 0
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
