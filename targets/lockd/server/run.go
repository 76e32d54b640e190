package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// shutdownGrace bounds how long Run waits for in-flight requests.
const shutdownGrace = 5 * time.Second

// Run validates cfg, starts a lockd node (TCP Raft transport, bolt stores
// and snapshots under cfg.DataDir) and serves the HTTP API on cfg.HTTPAddr
// until ctx is cancelled; then it stops serving, shuts Raft down and closes
// the stores. It returns nil after a shutdown caused by ctx. A nil logger
// discards logs.
func Run(ctx context.Context, cfg Config, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := logger.With("node", cfg.ID)

	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen for http on %s: %w", cfg.HTTPAddr, err)
	}
	defer ln.Close()
	deps, err := openDeps(cfg, log)
	if err != nil {
		return err
	}
	n, err := newNode(cfg, log, deps)
	if err != nil {
		return err
	}

	// Handlers that wait (acquire with wait_ms) end when serving stops.
	base, stopBase := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBase()
	srv := &http.Server{
		Handler:           n.handler(),
		ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return base },
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	log.Info("lockd serving", "version", Version, "http", ln.Addr().String(), "http_advertise", cfg.httpAdvertise(),
		"raft", cfg.raftBind(), "data_dir", cfg.DataDir)

	var errs []error
	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case err := <-serveErr:
		errs = append(errs, fmt.Errorf("serve http: %w", err))
	}
	stopBase()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		errs = append(errs, fmt.Errorf("shut down http: %w", err))
	}
	if err := n.close(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("lockd %s: %w", cfg.ID, err)
	}
	log.Info("stopped")
	return nil
}
