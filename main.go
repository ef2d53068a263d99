// Command petstore serves a store's catalogue of animals over a JSON HTTP
// API, kept in one SQLite file, or in PostgreSQL for several replicas. See
// README.md for how to run it, and docs/ for the rest.
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
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	// Imported for its initialiser, which ignores SIGHUP before the
	// dependencies' initialisers run (main's first line comes after them).
	_ "petstore/internal/nohup"
)

func main() {
	// SIGHUP asks for a key reload, and its default action would end the
	// process, which systemd does not restart. It is ignored since the
	// initialiser of internal/nohup, well before this line, so that a reload
	// sent while the service starts never kills it; run takes it over before
	// it reads the keys.
	ctx, cancel := context.WithCancelCause(context.Background())
	stops := make(chan os.Signal, 1)
	signal.Notify(stops, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig := <-stops
		// From the first signal on, a second one takes its default action
		// and ends the process at once, without waiting for the drain. The
		// default comes back before the drain begins (before ctx ends), so
		// that a second signal sent once the drain is logged is never
		// caught and lost.
		signal.Reset(os.Interrupt, syscall.SIGTERM)
		cancel(fmt.Errorf("%v signal received", sig))
	}()
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
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

// run is the whole program: main only wires it to the process's signals,
// environment and standard streams, so that tests can run it in-process on
// 127.0.0.1:0. Serving returns when ctx is cancelled and the server has
// drained.
func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "backup":
			return runBackup(ctx, args[1:], getenv, stdout, stderr)
		case "copy":
			return runCopy(ctx, args[1:], stdout, stderr)
		case "restore":
			return runRestore(ctx, args[1:], getenv, stdout, stderr)
		case "hash-key":
			return hashKey(stdin, stdout)
		case "keys":
			return runKeys(args[1:], getenv, stdout, stderr)
		case "version":
			if len(args) > 1 {
				return &configError{"arguments", fmt.Sprintf("unexpected %q after version", args[1])}
			}
			return printVersion(stdout)
		}
	}
	// Registered before the keys are read: a SIGHUP sent once they are read
	// waits in hup for the serving loop, which reloads them.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	cfg, err := parseConfig(args, getenv, stderr)
	if err != nil {
		return err
	}
	if cfg.printVersion {
		return printVersion(stdout)
	}
	return serve(ctx, cfg, hup, stdout, stderr)
}

// serve runs the HTTP service until ctx is cancelled, reloading the keys on
// every signal from hup. It is its steps, in order, each named; what a step
// starts is stopped by serve's deferred calls, last first: the listeners
// close with the drain, the background work stops and is waited for, the
// store closes, and the database's lock (see lockDatabase) is released
// last.
func serve(ctx context.Context, cfg config, hup <-chan os.Signal, stdout, stderr io.Writer) error {
	// Deferred first, so run last: every line logged is out when serve
	// returns.
	stderr, flushLog, closeLog := bufferLines(stderr)
	defer closeLog()
	log := newLogger(cfg.logFormat, stderr)
	// Before the store opens: a second process must not migrate the file,
	// nor free the first one's webhook leases.
	lock, err := lockDatabase(cfg.dbPath)
	if err != nil {
		return &configError{settingName("db"), err.Error()}
	}
	defer lock.release()
	st, err := openStoreOf(ctx, &cfg, log)
	if err != nil {
		return err
	}
	defer st.Close()
	keys, err := keysOf(cfg, log, stderr)
	if err != nil {
		return err
	}
	if err := seedStore(ctx, cfg, log, st); err != nil {
		return err
	}
	lns, err := listen(cfg)
	if err != nil {
		return err
	}
	defer lns.close()
	m := newMetrics(st)
	failures := newConnFailures(log, m)
	certs := certificatesOf(cfg.tls, log, failures, st, lns.api.Addr(), lns.plainAddr())
	certs.loadStored(ctx)
	r := &running{cfg: cfg, log: log, st: st, keys: keys, m: m, failures: failures, lns: lns, certs: certs}
	stopWork := r.startBackground(ctx)
	defer stopWork()
	srvs, serveErr := r.startServing()
	if err := r.announce(ctx, stdout); err != nil {
		return err
	}
	reloads := reloadOnSignal(log, keys, certs, flushLog)
	defer close(reloads)
	if err := waitForStop(ctx, hup, serveErr, reloads); err != nil {
		return err
	}
	return shutdown(ctx, cfg, log, srvs)
}

// openStoreOf opens the database of cfg, warns when other users can read
// its file, and, on PostgreSQL without a secret file, reads the secret of
// key identities from it into cfg (and loads the keys under it again).
func openStoreOf(ctx context.Context, cfg *config, log *slog.Logger) (*store, error) {
	open := openStore
	if cfg.replica.on() {
		open = func(ctx context.Context, path string, _ int) (*store, error) { return openReplicatedSQLite(ctx, path) }
	}
	st, err := open(ctx, cfg.dbPath, cfg.dbMaxConns)
	if err != nil {
		return nil, &configError{settingName("db"), err.Error()}
	}
	if fi, err := os.Stat(cfg.dbPath); err == nil && fi.Mode().Perm()&0o077 != 0 {
		log.Warn("the database file can be read by other users than its owner; chmod 600 it (and its -wal and -shm files)",
			"db", cfg.dbPath, "mode", fmt.Sprintf("%04o", fi.Mode().Perm()))
	}
	if cfg.replica.on() {
		if err := st.replicate(ctx, log, cfg.dbPath, cfg.replica); err != nil {
			st.Close()
			return nil, &configError{settingName("replicate"), err.Error()}
		}
		mode := "async: the replica is about a second behind"
		if cfg.replica.sync {
			mode = "sync: a write is answered once its commit is in the replica"
		}
		log.Info("replicating the database", "to", cfg.replica.target.String(), "mode", mode)
	}
	if st.schemaFrom != st.schemaVersion {
		log.Info("database schema migrated", "db", redactDB(cfg.dbPath), "from", st.schemaFrom, "to", st.schemaVersion)
	}
	if cfg.secretInDB {
		// Every replica reads the one secret the database holds, so that
		// they all give a key the same identity.
		if cfg.secret, err = st.storedSecret(ctx); err != nil {
			st.Close()
			return nil, &configError{settingName("secret-file"), err.Error()}
		}
		if cfg.keys, err = loadKeyring(cfg.apiKeys, cfg.apiKeysFile, cfg.secret); err != nil {
			st.Close()
			return nil, err
		}
	}
	return st, nil
}

// keysOf returns the keys the service accepts: those configured, warned
// about (none in the file, short ones, expiring ones), or, when none is
// configured, the key generated on the first run and kept with the
// database, announced.
func keysOf(cfg config, log *slog.Logger, stderr io.Writer) (keyring, error) {
	keys := cfg.keys
	if !keys.configured() {
		// Running open would be a trap: a service started "just to try"
		// ends up exposed. A generated key, kept with the database, keeps
		// local use zero-setup. It is made only once the database opened,
		// so that no key file appears beside a file that is not one.
		gk, err := loadGeneratedKey(cfg.dbPath)
		if err != nil {
			return keyring{}, err
		}
		announceGeneratedKey(gk, cfg.logFormat, log, stderr)
		return fixedKeyring(cfg.secret, gk.key), nil
	}
	// Warned once the keys are under their secret: an unlabelled key is
	// named by its identity.
	if len(keys.keys().entries) == 0 {
		log.Warn("the API key file holds no key: every request will be refused until keys are added and SIGHUP sent", "file", cfg.apiKeysFile)
	}
	warnShortKeys(log, keys)
	warnExpiringKeys(log, keys, time.Now())
	return keys, nil
}

// seedStore stores the pets of -seed when the database holds none.
func seedStore(ctx context.Context, cfg config, log *slog.Logger, st *store) error {
	if len(cfg.seed) == 0 {
		return nil
	}
	n, err := st.seed(ctx, cfg.seed)
	if err != nil {
		return fmt.Errorf("seed from %s: %w", cfg.seedFile, err)
	}
	log.Info("seeded", "file", cfg.seedFile, "pets", n, "skipped", n == 0)
	return nil
}

// listeners are the service's: the API's; with HTTPS and -http-addr, the
// plain one beside it; and, with -pprof-addr, the runtime profiles' (with
// its own server).
type listeners struct {
	api      net.Listener
	plain    net.Listener // nil unless HTTPS with -http-addr
	profiles net.Listener // nil without -pprof-addr
	closers  []io.Closer  // closed by close, last first
}

// plainAddr is the plain listener's address; nil without one.
func (l *listeners) plainAddr() net.Addr {
	if l.plain == nil {
		return nil
	}
	return l.plain.Addr()
}

// listen opens the listeners of cfg. A listener that cannot be opened is a
// setting that cannot work.
func listen(cfg config) (*listeners, error) {
	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return nil, &configError{settingName("addr"), err.Error()}
	}
	lns := &listeners{api: ln}
	if cfg.tls.httpAddr != "" {
		if lns.plain, err = net.Listen("tcp", cfg.tls.httpAddr); err != nil {
			ln.Close()
			return nil, &configError{settingName("http-addr"), err.Error()}
		}
	}
	if cfg.pprofAddr != "" {
		profiles, err := net.Listen("tcp", cfg.pprofAddr)
		if err == nil {
			if err = checkLoopbackListener(profiles); err != nil {
				profiles.Close()
			}
		}
		if err != nil {
			ln.Close()
			if lns.plain != nil {
				lns.plain.Close()
			}
			return nil, &configError{settingName("pprof-addr"), err.Error()}
		}
		lns.profiles = profiles
		lns.closers = append(lns.closers, profileServer(profiles))
	}
	return lns, nil
}

// own are the addresses of every listener of the service, which webhooks
// never reach (the profiles' too: it answers without a key).
func (l *listeners) own() []net.Addr {
	own := []net.Addr{l.api.Addr()}
	for _, ln := range []net.Listener{l.plain, l.profiles} {
		if ln != nil {
			own = append(own, ln.Addr())
		}
	}
	return own
}

// close closes what listen started besides the API's and the plain
// listeners, which the HTTP servers' drain closes.
func (l *listeners) close() {
	for _, c := range slices.Backward(l.closers) {
		c.Close()
	}
}

// startBackground starts the work that runs beside the requests: the
// pruning of idempotency keys and events, the webhook dispatcher, whose
// metrics go to m, and, with HTTPS, the certificates' upkeep (watching the
// shop's own files, or ordering and renewing). The function it returns
// stops them and waits for them, before the store closes.
func (r *running) startBackground(ctx context.Context) (stop func()) {
	cfg, log, st, m, certs := r.cfg, r.log, r.st, r.m, r.certs
	ctx, cancel := context.WithCancel(ctx)
	var work sync.WaitGroup
	work.Go(func() {
		interval := min(time.Hour, max(time.Second, cfg.limits.idempotencyTTL/2))
		pruneIdempotencyKeysEvery(ctx, log, st, cfg.limits.idempotencyTTL, interval, time.Now)
	})
	work.Go(func() {
		// An event is gone within its retention plus min(retention, 1
		// minute): a prune every half of that, however long it takes.
		pruneEventsEvery(ctx, log, st, cfg.events.retention, min(cfg.events.retention, time.Minute)/2, time.Now)
	})
	hooks := newDispatcher(log, st, cfg.webhooks, r.lns.own(), time.Now)
	m.registry.MustRegister(hooks.collectors()...)
	work.Go(func() { hooks.run(ctx) })
	if certs != nil {
		m.watchCertificates(certs.expiries)
		work.Go(func() { certs.run(ctx, log) })
	}
	return func() {
		cancel()
		work.Wait()
	}
}

// running is what serve has opened and made by the time it starts the
// service's work: its settings, its log, the store, the keys, the metrics,
// the counter of connection failures, the listeners and, with HTTPS, the
// certificates. Its methods are serve's last steps.
type running struct {
	cfg      config
	log      *slog.Logger
	st       *store
	keys     keyring
	m        *metrics
	failures *connFailures
	lns      *listeners
	certs    *certificates
}

// servers are the service's HTTP servers: the API's and, beside HTTPS,
// the plain listener's (nil without one).
type servers struct{ api, plain *http.Server }

// startServing starts the HTTP server of the API on its listener, over TLS
// with certs, and the plain listener's beside it, both within the
// connection cap, their own errors (a failed handshake) going to failures.
// The channel it returns tells why serving stopped, if it stops before the
// drain.
func (r *running) startServing() (servers, <-chan error) {
	cfg, log, st, keys, m, failures, lns, certs := r.cfg, r.log, r.st, r.keys, r.m, r.failures, r.lns, r.certs
	conns := newConnLimiter(cfg.maxConns)
	m.watchConns(conns)
	events := newFeed(log, st, keys, cfg.events, time.Now)
	newHTTPServer := func(h http.Handler, maxHeaderBytes int) *http.Server {
		return &http.Server{
			Handler:           h,
			ReadHeaderTimeout: cfg.readHeaderTimeout,
			ReadTimeout:       cfg.readTimeout,
			WriteTimeout:      cfg.writeTimeout,
			IdleTimeout:       cfg.idleTimeout,
			MaxHeaderBytes:    maxHeaderBytes,
			ErrorLog:          failures.errorLog(),
			ConnState:         conns.connState,
			HTTP2:             http2Bounds(cfg),
			// OPTIONS * reaches the handlers, which answer it with the
			// Error body, as every other request (net/http answers it 200
			// by itself otherwise).
			DisableGeneralOptionsHandler: true,
		}
	}
	// The API's server reads header blocks past -max-header-bytes, up to
	// readHeaderLimit, so that the service, not net/http, answers one that
	// is too large, with the Error body, over HTTP/2 as over HTTP/1.1 (see
	// limitHeaderBlock). The plain listener answers nothing but 403 and
	// redirects: net/http's bound is enough there.
	srvs := servers{api: newHTTPServer(newServer(log, keys, st, m, events, time.Now, cfg.limits), readHeaderLimit(cfg.limits.maxHeaderBytes))}
	// Streams never end by themselves: they end when the drain begins.
	srvs.api.RegisterOnShutdown(events.stop)
	serveErr := make(chan error, 2)
	if certs == nil {
		go func() { serveErr <- srvs.api.Serve(conns.listener(lns.api)) }()
		return srvs, serveErr
	}
	srvs.api.TLSConfig = certs.tls
	go func() { serveErr <- srvs.api.ServeTLS(conns.listener(lns.api), "", "") }()
	if lns.plain != nil {
		_, httpsPort := hostPort(lns.api.Addr())
		srvs.plain = newHTTPServer(observe(log, m, plainHandler(log, keys, m.plainRefused, httpsPort, certs.redirectNames, certs.challenges())), cfg.limits.maxHeaderBytes)
		go func() { serveErr <- srvs.plain.Serve(conns.listener(lns.plain)) }()
	}
	return srvs, serveErr
}

// http2Bounds holds HTTP/2 connections to the bounds HTTP/1.1 ones have,
// and keeps no HPACK table of the answers' header fields (noHeaderTable).
// Go's HTTP/2 server clears the connection's write deadline and applies
// -write-timeout to each stream alone, by a reset queued behind the write
// in progress: a client that stops reading held its connection, busy and
// so never shed under the connection cap, with every stream's goroutine,
// for ever. WriteByteTimeout closes a connection on which no byte could be
// written for -write-timeout, as HTTP/1.1's deadline does. And where
// HTTP/1.1 drops a request whose headers take longer than
// -read-header-timeout, HTTP/2 has no such bound before a stream opens: a
// connection from which no whole frame has come for that long is pinged,
// and closed when the ping gets no answer within as long again. A client
// that trickles a HEADERS frame a byte at a time, and a peer that vanished
// without a word (a VM gone, a cable cut) while its event stream was open,
// are let go of within twice the header timeout; a live client answers
// the ping without knowing.
func http2Bounds(cfg config) *http.HTTP2Config {
	headerTimeout := cfg.readHeaderTimeout
	if headerTimeout == 0 {
		headerTimeout = cfg.readTimeout // as net/http does for HTTP/1.1
	}
	return &http.HTTP2Config{
		WriteByteTimeout: cfg.writeTimeout,
		SendPingTimeout:  headerTimeout,
		PingTimeout:      headerTimeout,

		MaxEncoderHeaderTableSize: noHeaderTable,
	}
}

// noHeaderTable is the size of the HPACK table in which net/http's HTTP/2
// server keeps the header fields it sent on a connection, to send them again
// as an index of a byte or two: one byte, which no field fits (0 would be
// net/http's default of 4 KiB). Every answer carries an X-Request-Id of its
// own, and a pet its own successor-version Link; the encoder added each to
// the table, some 200 bytes an answer, which pushed the fields that every
// answer shares out of the client's 4 KiB table before they were sent again,
// and kept the table's maps churning at the server: 6 % of the CPU of a get
// over HTTP/2 (docs/performance-round-three.md, item 8). Without a table a
// field is sent by its name's index in HPACK's static table, or literally,
// as nginx sends its own: 255 bytes of header fields a get against 125.
const noHeaderTable = 1

// announce logs the start and prints the launch contract: the first line
// of standard output names the URL the service answers on, https:// with
// TLS. Listening in clear on an address other than loopback is warned
// about: every key would cross the network readable.
func (r *running) announce(ctx context.Context, stdout io.Writer) error {
	cfg, log, st, keys, lns, certs := r.cfg, r.log, r.st, r.keys, r.lns, r.certs
	journal, err := st.journalMode(ctx) // "" on PostgreSQL
	if err != nil {
		return err
	}
	url := listenURL(lns.api.Addr())
	if certs != nil {
		url = "https://" + strings.TrimPrefix(url, "http://")
		if len(certs.names) > 0 {
			_, port := hostPort(lns.api.Addr())
			url = "https://" + net.JoinHostPort(certs.names[0], strconv.Itoa(port))
		}
	}
	log.Info("petstore started", "version", version(), "url", url, "backend", st.dialect.name, "db", redactDB(cfg.dbPath),
		"journal_mode", journal, "schema", st.schemaVersion, "keys", len(keys.keys().entries), "max_conns", cfg.maxConns)
	if certs == nil && !isLoopback(lns.api.Addr()) {
		log.Warn("serving the API in clear (plain HTTP) on an address other than loopback: every API key and answer crosses the network readable and changeable; serve HTTPS with -domain NAME (certificates by themselves) or -tls-cert and -tls-key, or put TLS at a proxy in front and listen on 127.0.0.1 (docs/https.md)",
			"addr", lns.api.Addr().String())
	}
	// This line is the launch contract: tools that start the service wait
	// for it and read the URL from it.
	fmt.Fprintf(stdout, "petstore listening on %s\n", url)
	// Where a person can read and try the API, on a line of its own so that
	// the line above stays exactly as tools parse it.
	fmt.Fprintf(stdout, "petstore API reference on %s/docs\n", url)
	if lns.plain != nil {
		fmt.Fprintf(stdout, "petstore plain HTTP on %s, for ACME challenges and redirects to https only\n", listenURL(lns.plain.Addr()))
	}
	if lns.profiles != nil {
		profilesURL := listenURL(lns.profiles.Addr()) + "/debug/pprof/"
		log.Warn("serving runtime profiles, without a key, on a loopback address (-pprof-addr)", "url", profilesURL)
		fmt.Fprintf(stdout, "petstore profiles on %s\n", profilesURL)
	}
	return nil
}

// isLoopback reports whether addr is a loopback address (an unspecified
// one, every interface, is not).
func isLoopback(addr net.Addr) bool {
	tcp, ok := addr.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}

// reloadOnSignal reloads keys, and the shop's own certificate, in a
// goroutine of its own, at each value sent on the channel it returns, until
// the channel is closed. Reloads run apart from the loop that waits for
// signals: a key file on a hung network file system must not keep it from
// draining on SIGTERM. The certificate is only asked for (its files are
// read in a goroutine of their own), so that nothing in them can delay the
// keys', which may revoke a key.
func reloadOnSignal(log *slog.Logger, keys keyring, certs *certificates, flushLog func()) chan<- struct{} {
	reloads := make(chan struct{}, 1)
	go func() {
		for range reloads {
			certs.reload()
			reloadKeys(log, keys)
			// The lines of the reload, and the requests' before them, are
			// out by the time an operator looks (see bufferLines).
			flushLog()
		}
	}()
	return reloads
}

// reloadKeys reads the keys again and logs the outcome: an ERROR when they
// are refused, and the keys in force stay.
func reloadKeys(log *slog.Logger, keys keyring) {
	if err := keys.reload(); err != nil {
		log.Error("API keys not reloaded; the previous keys stay in force", "err", err)
		return
	}
	log.Info("API keys reloaded", "keys", len(keys.keys().entries))
	warnShortKeys(log, keys)
	warnExpiringKeys(log, keys, time.Now())
}

// waitForStop waits for ctx to end, asking for a reload at each signal
// from hup (signals that come while a reload runs make one more reload,
// which reads the file as it is by then). It returns the server's error if
// serving stops first.
func waitForStop(ctx context.Context, hup <-chan os.Signal, serveErr <-chan error, reloads chan<- struct{}) error {
	for {
		select {
		case err := <-serveErr:
			return fmt.Errorf("serve: %w", err)
		case <-hup:
			select {
			case reloads <- struct{}{}:
			default: // a reload is pending already
			}
		case <-ctx.Done():
			return nil
		}
	}
}

// shutdown drains the servers: no new connection, every request and
// stream ended, within -shutdown-timeout, after which the rest are closed.
func shutdown(ctx context.Context, cfg config, log *slog.Logger, srvs servers) error {
	start := time.Now()
	log.Info("shutting down", "reason", context.Cause(ctx), "timeout", cfg.shutdownTimeout)
	drainCtx := context.Background()
	if cfg.shutdownTimeout > 0 {
		var cancel context.CancelFunc
		drainCtx, cancel = context.WithTimeout(drainCtx, cfg.shutdownTimeout)
		defer cancel()
	}
	all := []*http.Server{srvs.api}
	if srvs.plain != nil {
		all = append(all, srvs.plain)
	}
	var drained sync.WaitGroup
	var timedOut atomic.Bool
	for _, srv := range all {
		drained.Go(func() {
			if err := srv.Shutdown(drainCtx); err != nil {
				srv.Close()
				timedOut.Store(true)
			}
		})
	}
	drained.Wait()
	if timedOut.Load() {
		log.Warn("drain timed out; closing the remaining connections", "after", time.Since(start))
		return nil
	}
	log.Info("stopped", "drained_in", time.Since(start))
	return nil
}

// warnShortKeys logs a warning for each key short enough to be guessed (see
// minKeyLen), naming it by its label.
func warnShortKeys(log *slog.Logger, keys keyring) {
	for _, label := range keys.keys().shortKeys() {
		log.Warn(fmt.Sprintf("an API key is shorter than %d characters, short enough to guess: it is accepted, but replace it with a long random one (openssl rand -base64 32)", minKeyLen), "caller", label)
	}
}

// expiryWarning is how long before its expiry a key is warned about, at
// start-up and on each reload.
const expiryWarning = 7 * 24 * time.Hour

// warnExpiringKeys logs a warning for each key that expires within
// expiryWarning of now, or has expired, naming it by its label and id.
func warnExpiringKeys(log *slog.Logger, keys keyring, now time.Time) {
	for _, e := range keys.keys().entries {
		switch {
		case e.expires.IsZero() || e.expires.Sub(now) > expiryWarning:
		case e.expired(now):
			log.Warn("an API key has expired and is refused; remove its line from the key file", "caller", e.label, "id", e.shortID(), "expires", e.expires)
		default:
			log.Warn("an API key expires within 7 days; issue a new one (petstore keys new) and rotate its clients to it", "caller", e.label, "id", e.shortID(), "expires", e.expires)
		}
	}
}

// newLogger returns the service's logger in the chosen format.
func newLogger(format string, w io.Writer) *slog.Logger {
	if format == "json" {
		return slog.New(&logHandler{Handler: slog.NewJSONHandler(w, nil), w: w})
	}
	return slog.New(&logHandler{Handler: slog.NewTextHandler(w, nil), w: w, text: true})
}

// version names the build: the module version and, when the build recorded
// it, the VCS revision.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" {
			v += " " + s.Value
		}
	}
	return v
}

// printVersion is `petstore version` and `petstore -version`.
func printVersion(stdout io.Writer) error {
	bi, _ := debug.ReadBuildInfo()
	_, err := fmt.Fprintln(stdout, describeBuild(bi))
	return err
}

// describeBuild says which build bi is: the module version, the VCS
// revision with its commit time (and whether the tree had uncommitted
// changes), and the Go release. The go command records the revision only in
// `go build` from a git clone (see the build command of docs/operations.md); `go run`
// records none, and says "(devel)" for the version.
func describeBuild(bi *debug.BuildInfo) string {
	if bi == nil {
		return "petstore: the binary holds no build information"
	}
	vcs := map[string]string{}
	for _, s := range bi.Settings {
		vcs[s.Key] = s.Value
	}
	var b strings.Builder
	fmt.Fprintf(&b, "petstore %s", bi.Main.Version)
	if rev := vcs["vcs.revision"]; rev != "" {
		fmt.Fprintf(&b, ", revision %s", rev)
		if t := vcs["vcs.time"]; t != "" {
			fmt.Fprintf(&b, " (%s)", t)
		}
		if vcs["vcs.modified"] == "true" {
			b.WriteString(" with uncommitted changes")
		}
	} else {
		b.WriteString(", no VCS revision recorded (go run, or not built by the build command of docs/operations.md in a git clone)")
	}
	fmt.Fprintf(&b, ", %s", bi.GoVersion)
	return b.String()
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
// what the router itself refuses, panic recovery around that, the budget of
// request bodies held in memory, the bound of header blocks, and the request
// id, access log and metrics around everything.
func newServer(log *slog.Logger, keys keyring, st *store, m *metrics, events *feed, now func() time.Time, lim limits) http.Handler {
	mux := http.NewServeMux()
	limiter := newRateLimiter(lim.rateLimit, lim.rateBurst, now)
	// The rate limit runs after the key check: it is per key, and a caller
	// without a valid key has no budget to spend. Such callers are
	// throttled by their address instead (see authThrottle). The scope is
	// checked last, so that a key spends its budget on refused requests
	// too.
	guard := authGuard{proxies: lim.trustedProxies, throttle: newAuthThrottle(lim.authFailures, now), failures: m.authFailed, now: now}
	keyed := func(h http.Handler) http.Handler { return requireKey(keys, guard, log, h) }
	auth := func(h http.Handler) http.Handler { return keyed(limitRate(limiter, log, h)) }
	scoped := func(rt route) http.Handler {
		h := limitRate(limiter, log, requireScope(rt.scope, log, rt.handler))
		if rt.tickets {
			return requireKeyOrTicket(events, keys, guard, keyed, h)
		}
		return keyed(h)
	}
	m.watchKeys(keys)
	m.registry.MustRegister(events.collectors()...)
	addRoutes(mux, scoped, routes(log, st, m, events, newIdempotency(st, lim.idempotencyTTL, now), now))
	bodies := newBodyBudget(lim.maxBodyMemory)
	m.watchBodyBudget(bodies)
	return growHTTP2Stacks(hsts(observe(log, m, limitHeaderBlock(log, lim.maxHeaderBytes, budgetBodies(bodies, recoverPanics(log, routeErrors(log, mux, auth)))))))
}

// route is one row of the service's route table: the mux pattern, the
// operationId that the API document gives it ("" for a route outside the
// document), the scope a key needs for it (noKey when it needs none), the
// handler, what wraps it outside the key check, if anything, and whether a
// stream ticket opens it as a key does (for a browser's EventSource, which
// cannot send an Authorization header; see requireKeyOrTicket).
type route struct {
	pattern   string
	operation string
	scope     scope
	handler   http.Handler
	outer     func(http.Handler) http.Handler
	tickets   bool
}

// routes is the service's route table: who may do what, on one screen.
// Only the health checks, the API document and its reference page need no
// key (and so have no rate limit): probes, generators and a person's
// browser carry no key. Every create goes through idempotent, which gives
// it Idempotency-Key; the deprecated getPet announces its successor; the
// event feed also opens with a ticket.
// TestRoutesAreTheDocumentsSecurity holds the scopes equal to the document's.
func routes(log *slog.Logger, st *store, m *metrics, events *feed, idem *idempotency, now func() time.Time) []route {
	reference := newReferenceSite()
	deprecatedGetPet := func(h http.Handler) http.Handler { return deprecated(m, h) }
	return []route{
		{"GET /healthz", "getHealth", noKey, handleHealthz(), nil, false},
		{"GET /readyz", "getReadiness", noKey, handleReadyz(log, st, now), nil, false},
		{"GET /metrics", "getMetrics", scopeAll, m.handler(), nil, false},
		{"GET /v1/pets", "listPets", scopePetsRead, handleListPets(log, st), nil, false},
		{"POST /v1/pets", "createPet", scopePetsWrite, idempotent(log, idem, createPet()), nil, false},
		{"GET /v1/pets/{petId}", "getPet", scopePetsRead, handleGetPet(log, st, now), deprecatedGetPet, false},
		{"PATCH /v1/pets/{petId}", "updatePet", scopePetsWrite, handleUpdatePet(log, st), nil, false},
		{"DELETE /v1/pets/{petId}", "deletePet", scopePetsWrite, handleDeletePet(log, st), nil, false},
		{"GET /v1/store/orders", "listOrders", scopeOrdersRead, handleListOrders(log, st), nil, false},
		{"POST /v1/store/orders", "placeOrder", scopeOrdersWrite, idempotent(log, idem, placeOrder(now, m.orderPlaced)), nil, false},
		{"GET /v1/store/orders/{orderId}", "getOrder", scopeOrdersRead, handleGetOrder(log, st), nil, false},
		{"PATCH /v1/store/orders/{orderId}", "updateOrder", scopeOrdersWrite, handleUpdateOrder(log, st, now, m.orderChanged), nil, false},
		{"GET /v1/events", "listEvents", scopeEventsRead, events.handleListEvents(), nil, true},
		{"POST /v1/events/tickets", "createEventTicket", scopeEventsRead, events.handleCreateTicket(), nil, false},
		{"POST /v1/webhooks", "createWebhook", scopeWebhooksWrite, handleCreateWebhook(log, st, now), nil, false},
		{"GET /v1/webhooks", "listWebhooks", scopeWebhooksWrite, handleListWebhooks(log, st), nil, false},
		{"GET /v1/webhooks/{webhookId}", "getWebhook", scopeWebhooksWrite, handleGetWebhook(log, st), nil, false},
		{"PATCH /v1/webhooks/{webhookId}", "updateWebhook", scopeWebhooksWrite, handleUpdateWebhook(log, st), nil, false},
		{"DELETE /v1/webhooks/{webhookId}", "deleteWebhook", scopeWebhooksWrite, handleDeleteWebhook(log, st), nil, false},
		{"POST /v1/webhooks/{webhookId}/secret", "rotateWebhookSecret", scopeWebhooksWrite, handleRotateWebhookSecret(log, st, now), nil, false},
		{"GET /v1/webhooks/{webhookId}/deliveries", "listWebhookDeliveries", scopeWebhooksWrite, handleListWebhookDeliveries(log, st), nil, false},
		{"GET /v1/openapi.json", "getOpenAPIDocument", noKey, handleOpenAPIDocument(openapiDocument), nil, false},
		{"GET /docs", "", noKey, handleReferencePage(log, reference), nil, false},
		{"GET /docs/{version}/{file}", "", noKey, handleReferenceFile(log, reference), nil, false},
		{"GET /{$}", "", noKey, handleRoot(), nil, false},
	}
}

// addRoutes registers every route of the table, each behind the key check
// and its scope (scoped) unless it needs no key.
func addRoutes(mux *http.ServeMux, scoped func(route) http.Handler, table []route) {
	for _, rt := range table {
		h := rt.handler
		if rt.scope != noKey {
			h = scoped(rt)
		}
		if rt.outer != nil {
			h = rt.outer(h)
		}
		mux.Handle(rt.pattern, h)
	}
}
