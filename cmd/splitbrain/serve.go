package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/splitbrain/splitbrain/harness"
	"github.com/splitbrain/splitbrain/report"
)

// serveOptions are the serve command's flags.
type serveOptions struct {
	results     string
	addr        string
	allowRemote bool
}

func newServeCmd(g *globalFlags) *cobra.Command {
	o := serveOptions{results: "results", addr: "127.0.0.1:8080"}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Browse the runs under a results directory: list, compare, reports (loopback only by default)",
		Example: "  splitbrain serve\n" +
			"  splitbrain serve --results /tmp/runs --addr 127.0.0.1:9000",
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return serve(ctx, o, log, cmd.OutOrStdout(), cmd.ErrOrStderr(), nil)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.results, "results", o.results, "results directory to serve (as written by run --results)")
	f.StringVar(&o.addr, "addr", o.addr, "address to listen on; loopback unless --allow-remote")
	f.BoolVar(&o.allowRemote, "allow-remote", false, "allow a non-loopback --addr: anyone who can reach it reads every run, without authentication")
	return cmd
}

// checkLoopback refuses an address that is not on the loopback interface,
// unless allowRemote. Host names other than localhost are refused: what
// they resolve to can change.
func checkLoopback(addr string, allowRemote bool) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return harness.BadInput("--addr %q: want host:port, e.g. 127.0.0.1:8080 (%v)", addr, err)
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return harness.BadInput("--addr %q: bad port: %v", addr, err)
	}
	if allowRemote || isLoopback(host) {
		return nil
	}
	return harness.BadInput("--addr %s is not a loopback address: the runs would be readable from the network without authentication "+
		"(use 127.0.0.1:PORT, or add --allow-remote to do it anyway)", addr)
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// serve serves the results directory until ctx is done, then shuts down
// gracefully. ready, if set, is called with the bound address once the
// server accepts connections.
func serve(ctx context.Context, o serveOptions, log *slog.Logger, stdout, stderr io.Writer, ready func(net.Addr)) error {
	if err := checkLoopback(o.addr, o.allowRemote); err != nil {
		return err
	}
	if st, err := os.Stat(o.results); err != nil || !st.IsDir() {
		return harness.BadInput("--results %s is not a directory (run splitbrain run --results %s first, or point at one)", o.results, o.results)
	}
	srv, err := report.NewServer(o.results, log)
	if err != nil {
		return harness.BadInput("--results %s: %v", o.results, err)
	}
	defer srv.Close()
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", o.addr)
	if err != nil {
		return harness.BadInput("listen on %s (is the port in use? choose another with --addr): %v", o.addr, err)
	}
	bound, _ := ln.Addr().(*net.TCPAddr)
	remote := bound == nil || !bound.IP.IsLoopback()
	if remote && !o.allowRemote {
		ln.Close()
		return harness.BadInput("--addr %s bound %s, which is not loopback (add --allow-remote to serve it anyway)", o.addr, ln.Addr())
	}
	if remote {
		msg := fmt.Sprintf("WARNING: serving %s on %s, reachable from the network, WITHOUT authentication: anyone who can connect reads every run", o.results, ln.Addr())
		fmt.Fprintln(stderr, msg)
		log.Warn(msg)
	}
	hs := &http.Server{
		Handler:           srv,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	runs, _ := srv.Runs()
	fmt.Fprintf(stdout, "serving %d runs under %s at http://%s/ (Ctrl-C to stop)\n", len(runs), o.results, ln.Addr())
	if ready != nil {
		ready(ln.Addr())
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err = hs.Shutdown(sctx)
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("shut down the server: %w", err)
	}
	log.Info("server stopped")
	return nil
}
