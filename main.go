// Command petstore serves a store's catalogue of animals over a JSON HTTP
// API, kept in one SQLite file. See README.md for how to run it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
		// -h printed the usage; asking for help is not a failure.
	case errors.As(err, new(*configError)):
		fmt.Fprintf(os.Stderr, "petstore: %v\n", err)
		os.Exit(2)
	default:
		fmt.Fprintf(os.Stderr, "petstore: %v\n", err)
		os.Exit(1)
	}
}

// configError is a start-up setting that cannot work; main exits with code 2
// for it, before anything listens.
type configError struct {
	setting string // the flag, as the user would type it
	problem string
}

func (e *configError) Error() string { return e.setting + ": " + e.problem }

// config is everything the service reads at start-up.
type config struct {
	addr    string
	dbPath  string
	apiKeys string
}

// shutdownTimeout bounds how long in-flight requests may take to finish
// after SIGTERM before the service stops anyway.
const shutdownTimeout = 10 * time.Second

// parseConfig reads the flags, with defaults taken from the environment, so
// that a flag wins over its variable and the variable over the built-in
// default.
func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("petstore", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.addr, "addr", envOr(getenv, "PETSTORE_ADDR", ":8080"),
		"address to listen on, host:port; port 0 picks a free port (env PETSTORE_ADDR)")
	fs.StringVar(&cfg.dbPath, "db", envOr(getenv, "PETSTORE_DB", "petstore.db"),
		"path of the SQLite database file, created if missing (env PETSTORE_DB)")
	cfg.apiKeys = getenv("PETSTORE_API_KEYS")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: petstore [flags]\n\n"+
			"API keys come from PETSTORE_API_KEYS (comma-separated); without one, a key is generated and printed.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return cfg, err
		}
		return cfg, &configError{"flags", err.Error()}
	}
	if fs.NArg() > 0 {
		return cfg, &configError{"arguments", fmt.Sprintf("unexpected %q; all settings are flags", fs.Arg(0))}
	}
	if _, _, err := net.SplitHostPort(cfg.addr); err != nil {
		return cfg, &configError{"-addr", fmt.Sprintf("%q is not host:port: %v", cfg.addr, err)}
	}
	if cfg.dbPath == "" {
		return cfg, &configError{"-db", "the database path is empty"}
	}
	return cfg, nil
}

// envOr returns the environment variable name, or def when it is unset or empty.
func envOr(getenv func(string) string, name, def string) string {
	if v := getenv(name); v != "" {
		return v
	}
	return def
}

// run is the whole program: main only wires it to the process's signals,
// environment and standard streams, so that tests can run it in-process on
// 127.0.0.1:0. It returns when ctx is cancelled and the server has drained.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, err := parseConfig(args, getenv, stderr)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))

	keys := parseKeyList(cfg.apiKeys)
	if keys.len() == 0 {
		// Running open would be a trap: a service started "just to try"
		// ends up exposed. A generated key keeps local use zero-setup.
		key := generateKey()
		keys = parseKeyList(key)
		fmt.Fprintf(stderr, "WARNING: PETSTORE_API_KEYS is not set. This run accepts only this generated API key:\n\n    %s\n\n"+
			"Send it as 'Authorization: Bearer <key>'. Set PETSTORE_API_KEYS to choose your own keys.\n\n", key)
	}

	st, err := openStore(ctx, cfg.dbPath)
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	defer st.Close()

	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return &configError{"-addr", err.Error()}
	}
	srv := &http.Server{
		Handler:           newServer(log, keys, st, time.Now),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()

	url := listenURL(ln.Addr())
	log.Info("listening", "url", url, "db", cfg.dbPath, "keys", keys.len())
	// This line is the launch contract: tools that start the service wait
	// for it and read the URL from it.
	fmt.Fprintf(stdout, "petstore listening on %s\n", url)

	select {
	case err := <-serveErr:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down", "reason", context.Cause(ctx))
	shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

// listenURL is the URL a client on this machine can use to reach addr. An
// unspecified address (":8080", "0.0.0.0", "[::]") is reachable on loopback.
func listenURL(addr net.Addr) string {
	host, port := "127.0.0.1", "0"
	if tcp, ok := addr.(*net.TCPAddr); ok {
		port = fmt.Sprint(tcp.Port)
		if !tcp.IP.IsUnspecified() {
			host = tcp.IP.String()
		}
	}
	return "http://" + net.JoinHostPort(host, port)
}

// newServer builds the whole HTTP handler: the routes, then JSON answers for
// what the router itself refuses, then panic recovery around everything.
func newServer(log *slog.Logger, keys keySet, st *store, now func() time.Time) http.Handler {
	mux := http.NewServeMux()
	auth := func(h http.Handler) http.Handler { return requireKey(keys, log, h) }
	addRoutes(mux, log, auth, st, now)
	return recoverPanics(log, routeErrors(log, mux, auth))
}

// addRoutes lists every route of the service. The health checks and the API
// document are the only routes without auth: probes and generators carry no key.
func addRoutes(mux *http.ServeMux, log *slog.Logger, auth func(http.Handler) http.Handler, st *store, now func() time.Time) {
	mux.Handle("GET /healthz", handleHealthz())
	mux.Handle("GET /readyz", handleReadyz(log, st))
	mux.Handle("GET /v1/pets", auth(handleListPets(log, st)))
	mux.Handle("POST /v1/pets", auth(handleCreatePet(log, st)))
	mux.Handle("GET /v1/pets/{petId}", deprecated(auth(handleGetPet(log, st, now))))
	mux.Handle("GET /v1/store/orders", auth(handleListOrders(log)))
	mux.Handle("GET /v1/openapi.json", handleOpenAPIDocument(openapiDocument))
}
