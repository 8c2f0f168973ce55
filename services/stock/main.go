// Command stock runs one replica of the stock service. See docs/api.md for
// the API and --help for the settings.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/stocklock/stocklock/services/stock/server"
)

func main() {
	os.Exit(run())
}

func run() int {
	cfg, err := server.ParseConfig(os.Args[1:], os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Print(server.Usage())
		return 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "stock:", err)
		return 2
	}
	logger := server.NewLogger(os.Stderr, cfg)
	slog.SetDefault(logger)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	srv, err := server.New(ctx, cfg, logger)
	if err != nil {
		logger.Error("start-up failed", slog.Any("error", err))
		return 1
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		logger.Error("listen failed (check --addr / STOCK_ADDR)", slog.String("addr", cfg.Addr), slog.Any("error", err))
		_ = srv.Shutdown(context.Background())
		return 1
	}

	served := make(chan error, 2)
	go func() { served <- srv.Serve(ln) }()
	if cfg.InternalAddr != "" {
		iln, err := net.Listen("tcp", cfg.InternalAddr)
		if err != nil {
			logger.Error("listen failed (check --internal-addr / INTERNAL_ADDR)", slog.String("addr", cfg.InternalAddr), slog.Any("error", err))
			_ = srv.Shutdown(context.Background())
			return 1
		}
		go func() { served <- srv.ServeInternal(iln) }()
	}

	code := 0
	select {
	case <-ctx.Done():
		logger.Info("signal received; draining", slog.Duration("timeout", cfg.ShutdownTimeout))
	case err := <-served:
		logger.Error("server stopped", slog.Any("error", err))
		code = 1
	}
	stop() // a second signal now kills the process the default way

	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		logger.Error("unclean shutdown", slog.Any("error", err))
		code = 1
	}
	return code
}
