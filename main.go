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
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
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
	addr              string
	dbPath            string
	apiKeys           string
	readHeaderTimeout time.Duration
	limits            limits
}

// limits are the policies newServer applies to requests.
type limits struct {
	idempotencyTTL time.Duration // how long an Idempotency-Key is remembered
	rateLimit      float64       // requests per second per API key; 0 means no limit
	rateBurst      int           // requests a key may send at once before the rate applies
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
	// The settings below are read as strings and parsed after the flags, so
	// that a bad value is the same configError whether it came from a flag
	// or from the environment.
	readHeaderTimeout := fs.String("read-header-timeout", envOr(getenv, "PETSTORE_READ_HEADER_TIMEOUT", "10s"),
		"how long a client may take to send the request headers, a Go duration (env PETSTORE_READ_HEADER_TIMEOUT)")
	idempotencyTTL := fs.String("idempotency-ttl", envOr(getenv, "PETSTORE_IDEMPOTENCY_TTL", defaultIdempotencyTTL.String()),
		"how long an Idempotency-Key and its answer are kept, a Go duration (env PETSTORE_IDEMPOTENCY_TTL)")
	rateLimit := fs.String("rate-limit", envOr(getenv, "PETSTORE_RATE_LIMIT", "0"),
		"requests per second allowed per API key; 0 turns the limit off (env PETSTORE_RATE_LIMIT)")
	rateBurst := fs.String("rate-burst", envOr(getenv, "PETSTORE_RATE_BURST", "0"),
		"requests a key may send at once before -rate-limit applies; 0 means the rate rounded up (env PETSTORE_RATE_BURST)")
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
	var err error
	if cfg.readHeaderTimeout, err = parsePositiveDuration("-read-header-timeout", *readHeaderTimeout); err != nil {
		return cfg, err
	}
	if cfg.limits.idempotencyTTL, err = parsePositiveDuration("-idempotency-ttl", *idempotencyTTL); err != nil {
		return cfg, err
	}
	if cfg.limits.rateLimit, cfg.limits.rateBurst, err = parseRateLimit(*rateLimit, *rateBurst); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// parsePositiveDuration reads a Go duration ("10s", "24h") that must be
// greater than zero.
func parsePositiveDuration(setting, v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, &configError{setting, fmt.Sprintf("%q is not a positive duration such as 10s or 24h", v)}
	}
	return d, nil
}

// parseRateLimit reads -rate-limit and -rate-burst. A burst without a rate
// is refused rather than ignored: the operator meant to limit something.
func parseRateLimit(limit, burst string) (float64, int, error) {
	r, err := strconv.ParseFloat(limit, 64)
	if err != nil || r < 0 || math.IsInf(r, 0) || math.IsNaN(r) {
		return 0, 0, &configError{"-rate-limit", fmt.Sprintf("%q is not a number of requests per second (0 or more, 0 turns the limit off)", limit)}
	}
	b, err := strconv.Atoi(burst)
	if err != nil || b < 0 {
		return 0, 0, &configError{"-rate-burst", fmt.Sprintf("%q is not a whole number of requests (0 or more)", burst)}
	}
	switch {
	case r == 0 && b > 0:
		return 0, 0, &configError{"-rate-burst", "has no effect without -rate-limit; set both, or neither"}
	case r > 0 && b == 0:
		// A burst below 1 would refuse every request; the rate rounded up
		// lets a client spend one second's worth at once.
		b = max(1, int(math.Ceil(min(r, math.MaxInt32))))
	}
	return r, b, nil
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

	// The pruning stops, and is waited for, before the deferred st.Close.
	pruneCtx, stopPruning := context.WithCancel(ctx)
	var pruning sync.WaitGroup
	defer pruning.Wait()
	defer stopPruning()
	pruning.Go(func() {
		interval := min(time.Hour, max(time.Second, cfg.limits.idempotencyTTL/2))
		pruneIdempotencyKeysEvery(pruneCtx, log, st, cfg.limits.idempotencyTTL, interval, time.Now)
	})

	srv := &http.Server{
		Handler:           newServer(log, keys, st, time.Now, cfg.limits),
		ReadHeaderTimeout: cfg.readHeaderTimeout,
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
func newServer(log *slog.Logger, keys keySet, st *store, now func() time.Time, lim limits) http.Handler {
	mux := http.NewServeMux()
	limiter := newRateLimiter(lim.rateLimit, lim.rateBurst, now)
	// The rate limit runs after the key check: it is per key, and a caller
	// without a valid key has no budget to spend.
	auth := func(h http.Handler) http.Handler { return requireKey(keys, log, limitRate(limiter, log, h)) }
	addRoutes(mux, log, auth, st, newIdempotency(st, lim.idempotencyTTL, now), now)
	return recoverPanics(log, routeErrors(log, mux, auth))
}

// addRoutes lists every route of the service. The health checks are the only
// routes without auth (and so without a rate limit): probes carry no key.
func addRoutes(mux *http.ServeMux, log *slog.Logger, auth func(http.Handler) http.Handler, st *store, idem *idempotency, now func() time.Time) {
	mux.Handle("GET /healthz", handleHealthz())
	mux.Handle("GET /readyz", handleReadyz(log, st))
	mux.Handle("GET /v1/pets", auth(handleListPets(log, st)))
	mux.Handle("POST /v1/pets", auth(handleCreatePet(log, idem)))
	mux.Handle("GET /v1/pets/{petId}", deprecated(auth(handleGetPet(log, st, now))))
	mux.Handle("GET /v1/store/orders", auth(handleListOrders(log)))
}
