package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
)

// config is everything the service reads at start-up.
type config struct {
	addr              string
	dbPath            string // a SQLite file, ":memory:", or a PostgreSQL URL
	dbMaxConns        int
	apiKeys           string // PETSTORE_API_KEYS only: a flag would show keys in ps
	apiKeysFile       string
	secretFile        string
	logFormat         string
	seedFile          string
	trustedProxies    string
	pprofAddr         string // "" when off
	readHeaderTimeout time.Duration
	readTimeout       time.Duration
	writeTimeout      time.Duration
	idleTimeout       time.Duration
	shutdownTimeout   time.Duration
	maxConns          int // open connections at once; 0 in the flag means the default for the file limit
	limits            limits
	events            feedConfig
	webhooks          webhookConfig
	tls               tlsSettings
	replicaURL        string // -replicate, as given
	replica           replicaSettings
	// awsCABundle says that AWS_CA_BUNDLE is set, which the replica's S3
	// client cannot take (see checkReplica).
	awsCABundle bool
	// given are the settings set by a flag or a variable, not defaulted:
	// -domain moves the defaults of -addr and -http-addr.
	given map[string]bool

	keys   keyring // loaded from apiKeys and apiKeysFile
	secret []byte  // loaded from secretFile, or the file next to the database; nil while secretInDB
	// secretInDB says that the secret is the one kept in the database
	// (PostgreSQL without -secret-file), read once the store is open.
	secretInDB bool
	seed       []newPet // parsed from seedFile

	printVersion bool // -version: print the version instead of serving
}

// limits are the policies newServer applies to requests.
type limits struct {
	idempotencyTTL time.Duration // how long an Idempotency-Key is remembered
	rateLimit      float64       // requests per second per API key; 0 means no limit
	rateBurst      int           // requests a key may send at once before the rate applies
	maxBodyMemory  int64         // bytes of request bodies held at once, over all requests; 0 means no bound
	authFailures   int           // failed authentications a minute per client address before 429; 0 means no throttle
	// maxHeaderBytes bounds a request's header block (see
	// headerBlockSize), whichever protocol it came by; 0 means net/http's
	// bound alone.
	maxHeaderBytes int
	trustedProxies trustedProxies
}

// defaultMaxHeaderBytes is -max-header-bytes' default: 64 KiB.
const defaultMaxHeaderBytes = 64 << 10

// Bounds of the body budget: the default, and the least that still lets a
// body of the largest size in (its buffer grows from 256 KiB to 1 MiB, both held for a moment).
const (
	defaultAuthFailures  = 50
	defaultMaxBodyMemory = 32 << 20
	minMaxBodyMemory     = 2 << 20
)

// The defaults of the event feed's settings.
const (
	defaultEventsRetention  = 720 * time.Hour
	defaultEventsHeartbeat  = 15 * time.Second
	defaultEventsMaxStreams = 100
)

// check refuses feed settings that cannot work.
func (c feedConfig) check() error {
	switch {
	case c.retention < time.Second:
		return &configError{settingName("events-retention"), fmt.Sprintf("%v is too short; keep events at least 1s (the default is 720h, 30 days)", c.retention)}
	case c.heartbeat < 100*time.Millisecond || c.heartbeat > time.Hour:
		return &configError{settingName("events-heartbeat"), fmt.Sprintf("%v is out of range; from 100ms to 1h (proxies close connections silent for a minute or more)", c.heartbeat)}
	case c.maxStreams < 1:
		return &configError{settingName("events-max-streams"), fmt.Sprintf("%d is not positive; a key needs at least one stream", c.maxStreams)}
	}
	return nil
}

// versionFlag is the one flag that is not a setting.
const versionFlag = "version"

// newFlagSet declares every setting. Defaults here are the built-in ones;
// parseConfig then applies variables to the flags not given.
func newFlagSet(cfg *config, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("petstore", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.addr, "addr", ":8080", "address to listen on, host:port; port 0 picks a free port")
	fs.StringVar(&cfg.dbPath, "db", "petstore.db", "SQLite database file, created if missing; :memory: for an ephemeral one; or a postgres:// URL")
	fs.IntVar(&cfg.dbMaxConns, "db-max-conns", defaultDBMaxConns, "PostgreSQL only: connections per replica, the writer's one included (at least 2)")
	fs.StringVar(&cfg.apiKeysFile, "api-keys-file", "", "file of API keys, one per line: KEY or sha256:HEX, then an optional label, then optional scopes=LIST and expires=DATE; reread on SIGHUP")
	fs.StringVar(&cfg.secretFile, "secret-file", "", "file of the secret that keys API key identities (shared by every process on one database); default: the database path + .secret, made on first start; on PostgreSQL, the secret kept in the database (see docs/keys.md)")
	fs.StringVar(&cfg.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&cfg.seedFile, "seed", "", "JSON array of NewPet loaded at start-up into an empty database")
	fs.DurationVar(&cfg.readHeaderTimeout, "read-header-timeout", 5*time.Second, "time allowed to read a request's headers")
	fs.DurationVar(&cfg.readTimeout, "read-timeout", 30*time.Second, "time allowed to read a whole request, body included")
	fs.DurationVar(&cfg.writeTimeout, "write-timeout", 30*time.Second, "time allowed from the end of the request headers to the end of the response")
	fs.DurationVar(&cfg.idleTimeout, "idle-timeout", 120*time.Second, "time a keep-alive connection may wait for its next request")
	fs.DurationVar(&cfg.shutdownTimeout, "shutdown-timeout", 10*time.Second, "time in-flight requests get to finish after SIGTERM")
	fs.IntVar(&cfg.limits.maxHeaderBytes, "max-header-bytes", defaultMaxHeaderBytes, "largest request header block accepted, in bytes")
	fs.IntVar(&cfg.maxConns, "max-conns", 0, fmt.Sprintf("most connections open at once; past it the longest idle one is closed for a new one; 0 means the open-file limit minus %d, at most %d", connReserve, defaultMaxConnsCeiling))
	fs.DurationVar(&cfg.limits.idempotencyTTL, "idempotency-ttl", defaultIdempotencyTTL, "how long an Idempotency-Key and its answer are kept")
	fs.Float64Var(&cfg.limits.rateLimit, "rate-limit", 0, "requests per second allowed per API key; 0 turns the limit off")
	fs.IntVar(&cfg.limits.rateBurst, "rate-burst", 0, "requests a key may send at once before -rate-limit applies; 0 means the rate rounded up")
	// -version is a command, not a setting: it has no variable and is not
	// in the table of settings.
	fs.BoolVar(&cfg.printVersion, versionFlag, false, "print the version and exit")
	fs.IntVar(&cfg.limits.authFailures, "auth-failure-limit", defaultAuthFailures, "requests without a valid API key allowed a minute per client address, in bursts of as many; past it, 429 with Retry-After; 0 turns the limit off")
	fs.StringVar(&cfg.trustedProxies, "trusted-proxies", "", "comma-separated addresses and CIDR blocks of the proxies whose X-Forwarded-For names the client address")
	fs.Int64Var(&cfg.limits.maxBodyMemory, "max-body-memory", defaultMaxBodyMemory, "bytes of request bodies held in memory at once, by all requests together; past it, 503 with Retry-After")
	fs.DurationVar(&cfg.events.retention, "events-retention", defaultEventsRetention, "how long events are kept in the change feed (GET /v1/events); a cursor older than that gets 410")
	fs.DurationVar(&cfg.events.heartbeat, "events-heartbeat", defaultEventsHeartbeat, "silence after which an event stream sends a keep-alive comment (or a bookmark)")
	fs.IntVar(&cfg.events.maxStreams, "events-max-streams", defaultEventsMaxStreams, "event streams one API key may hold open at once; past it, 429")
	fs.DurationVar(&cfg.webhooks.backoff, "webhook-backoff", defaultWebhookBackoff, "first delay before a failed webhook delivery is tried again; it doubles at each failure, at most 1h, with jitter")
	fs.DurationVar(&cfg.webhooks.giveUp, "webhook-give-up", defaultWebhookGiveUp, "how long after its first failure an event is retried before its subscription becomes failing")
	fs.DurationVar(&cfg.webhooks.timeout, "webhook-timeout", defaultWebhookTimeout, "time a webhook receiver has to answer a delivery; slower is a failure")
	fs.DurationVar(&cfg.webhooks.leaseTTL, "webhook-lease", defaultWebhookLease, "how long a replica holds a webhook subscription without renewing its lease; another replica takes over within this plus 1s of its death")
	fs.BoolVar(&cfg.webhooks.allowPrivate, "webhook-allow-private", false, "let webhooks reach loopback, private and link-local addresses and the machine's own (local development and tests only); never 0.0.0.0, :: nor the service's own listeners")
	fs.StringVar(&cfg.tls.domains, "domain", "", "comma-separated names to serve HTTPS for, with certificates obtained and renewed by themselves from an ACME CA (Let's Encrypt by default); -addr then defaults to :443 and -http-addr to :80")
	fs.StringVar(&cfg.tls.acmeCA, "acme-ca", letsEncryptCA, "the ACME directory URL of the CA -domain orders certificates from")
	fs.StringVar(&cfg.tls.acmeCARoot, "acme-ca-root", "", "PEM file of the roots to trust for the ACME CA's own HTTPS (a private CA such as step-ca); default: the system's")
	fs.StringVar(&cfg.tls.acmeEmail, "acme-email", "", "contact address of the ACME account, for the CA's notices; default: none")
	fs.StringVar(&cfg.tls.acmeProfile, "acme-profile", "", "the certificate profile to ask the ACME CA for (Let's Encrypt's: classic, tlsserver, shortlived); default: the CA's")
	fs.DurationVar(&cfg.tls.acmeRenewCheck, "acme-renew-check", defaultACMERenewCheck, "how often the certificates of -domain are looked at for renewal (they are renewed ahead of expiry, when the CA's renewal window or a third of their life remains)")
	fs.StringVar(&cfg.tls.certFile, "tls-cert", "", "PEM file of the HTTPS certificate (the full chain); with -tls-key; reread on SIGHUP and when it changes")
	fs.StringVar(&cfg.tls.keyFile, "tls-key", "", "PEM file of the private key of -tls-cert")
	fs.StringVar(&cfg.tls.httpAddr, "http-addr", "", "with HTTPS, a plain HTTP listener beside it, host:port: it answers ACME challenges, redirects pages to https and refuses /v1 (403); empty: none")
	fs.StringVar(&cfg.replicaURL, "replicate", "", "replicate the SQLite database as it commits to s3://BUCKET/PATH (?endpoint=, region=, force-path-style= for any S3-compatible store; credentials from the AWS environment) or file:///DIR; empty: off (docs/operations.md)")
	fs.BoolVar(&cfg.replica.sync, "replicate-sync", false, "with -replicate, answer a write only once its commit is in the replica (503 replica_unavailable past -replicate-timeout)")
	fs.DurationVar(&cfg.replica.timeout, "replicate-timeout", 10*time.Second, "with -replicate, how long an upload to the replica may take (and a write wait for it, with -replicate-sync)")
	fs.DurationVar(&cfg.replica.snapshotInterval, "replicate-snapshot-interval", 24*time.Hour, "with -replicate, how often a full snapshot of the database is written to the replica")
	fs.DurationVar(&cfg.replica.retention, "replicate-retention", 168*time.Hour, "with -replicate, how far back in time a restore can go; older snapshots and changes are removed from the replica")
	fs.StringVar(&cfg.pprofAddr, "pprof-addr", "", "serve Go's runtime profiles (net/http/pprof) on this loopback address, host:port, apart from the API and without a key; empty: off")
	fs.Usage = func() { usage(fs) }
	return fs
}

// usage prints every option with its variable and default.
func usage(fs *flag.FlagSet) {
	w := fs.Output()
	fmt.Fprint(w, "Usage:\n"+
		"  petstore [flags]                  serve the API\n"+
		"  petstore backup -db FILE OUT.db   copy a live SQLite database consistently to OUT.db\n"+
		"  petstore copy -from SRC -to DST   move pets, orders, events and the rest, ids kept, between\n"+
		"                                    databases (SQLite files or postgres:// URLs)\n"+
		"  petstore restore -from URL -db PATH [-at TIME]\n"+
		"                                    write to PATH the database as the replica (-replicate) held it\n"+
		"                                    at TIME (RFC 3339; default: its latest commit)\n"+
		"  petstore restore -from URL -list  show the first and last times a restore can reach, and the snapshots\n"+
		"  petstore hash-key                 read a key on stdin, print its sha256: line for a key file\n"+
		"  petstore keys new [-label L] [-scopes S] [-expires 90d|DATE] [-file F]\n"+
		"                                    issue a psk_ key: print it once, and its key-file line (or append it to F)\n"+
		"  petstore keys list -file F        show each key of a key file: label, id, scopes, expiry\n"+
		"  petstore version (or -version)    print the module version, VCS revision and Go release\n\n"+
		"Every flag can also be set by its variable; a flag wins over its variable.\n"+
		"API keys also come from PETSTORE_API_KEYS (comma-separated); with none at all, a key is generated, kept beside\n"+
		"the database file (a new one per run for :memory:) and printed at start (with -log-format json, only its file).\n"+
		"On PostgreSQL (-db postgres://...) keys must be configured: every replica must accept the same ones.\n"+
		"More, in the repository: every setting in docs/configuration.md, keys and the secret in docs/keys.md,\n"+
		"the change feed in docs/events.md, replicas on PostgreSQL in docs/scaling.md, production (systemd,\n"+
		"backups, metrics) in docs/operations.md.\n\n")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "flag\tvariable\tdefault\tmeaning")
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name == versionFlag {
			return
		}
		def := f.DefValue
		if def == "" {
			def = "(none)"
		}
		fmt.Fprintf(tw, "-%s\t%s\t%s\t%s\n", f.Name, envName(f.Name), def, f.Usage)
	})
	fmt.Fprintf(tw, "\t%s\t(none)\tcomma-separated API keys\n", envPrefix+"API_KEYS")
	tw.Flush()
}

// parseConfig reads the settings: a flag wins over its variable, and the
// variable over the built-in default. Every setting is checked here, so that
// a bad one stops start-up before anything listens, with a message naming it.
func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	var cfg config
	fs := newFlagSet(&cfg, stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return cfg, err
		}
		return cfg, &configError{"flags", err.Error()}
	}
	if fs.NArg() > 0 {
		return cfg, &configError{"arguments", fmt.Sprintf("unexpected %q; all settings are flags (see -h)", fs.Arg(0))}
	}
	if cfg.printVersion {
		return cfg, nil
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		v := getenv(envName(f.Name))
		if given[f.Name] || v == "" || envErr != nil || f.Name == versionFlag {
			return
		}
		if err := f.Value.Set(v); err != nil {
			envErr = &configError{envName(f.Name), fmt.Sprintf("invalid value %q: %v", v, err)}
		}
	})
	if envErr != nil {
		return cfg, envErr
	}
	fs.VisitAll(func(f *flag.Flag) {
		if getenv(envName(f.Name)) != "" {
			given[f.Name] = true
		}
	})
	cfg.given = given
	cfg.apiKeys = getenv(envPrefix + "API_KEYS")
	cfg.awsCABundle = getenv("AWS_CA_BUNDLE") != ""
	return cfg, cfg.check()
}

// check validates the settings and loads the files they name, in the
// order a person reads them in: where it listens, the database, the
// limits, the feed and the webhooks, the keys, the seed.
func (cfg *config) check() error {
	for _, step := range []func() error{cfg.checkListeners, cfg.checkDatabase, cfg.checkLimits, cfg.events.check, cfg.webhooks.check, cfg.checkKeys} {
		if err := step(); err != nil {
			return err
		}
	}
	if cfg.seedFile != "" {
		var err error
		if cfg.seed, err = readSeed(cfg.seedFile); err != nil {
			return &configError{settingName("seed"), err.Error()}
		}
	}
	return nil
}

// checkListeners checks HTTPS and the addresses the service listens on
// (-domain moves -addr's default to :443).
func (cfg *config) checkListeners() error {
	if err := cfg.tls.check(cfg.given); err != nil {
		return err
	}
	if cfg.tls.domains != "" && !cfg.given["addr"] {
		cfg.addr = ":443"
	}
	if err := checkAddr(cfg.addr); err != nil {
		return &configError{settingName("addr"), err.Error()}
	}
	if cfg.pprofAddr != "" {
		if err := checkPprofAddr(cfg.pprofAddr); err != nil {
			return &configError{settingName("pprof-addr"), err.Error()}
		}
	}
	return nil
}

// checkDatabase checks -db, its replication and its connections.
func (cfg *config) checkDatabase() error {
	if isPostgresURL(cfg.dbPath) {
		if _, err := pgx.ParseConfig(cfg.dbPath); err != nil {
			// pgx's message may quote the URL, password included.
			return &configError{settingName("db"), fmt.Sprintf("%s is not a PostgreSQL URL (postgres://user:password@host:port/database?sslmode=...)", redactDB(cfg.dbPath))}
		}
	} else if err := checkDBPath(cfg.dbPath); err != nil {
		return &configError{settingName("db"), err.Error()}
	}
	if err := cfg.checkReplica(); err != nil {
		return err
	}
	if cfg.dbMaxConns < 2 {
		return &configError{settingName("db-max-conns"), fmt.Sprintf("%d is too few: the writer takes one connection and reads need at least one more", cfg.dbMaxConns)}
	}
	if cfg.logFormat != "text" && cfg.logFormat != "json" {
		return &configError{settingName("log-format"), fmt.Sprintf("%q is not text or json", cfg.logFormat)}
	}
	return nil
}

// checkLimits checks the timeouts and the bounds of requests and
// connections.
func (cfg *config) checkLimits() error {
	if err := checkDurations(false, map[string]time.Duration{"read-header-timeout": cfg.readHeaderTimeout, "read-timeout": cfg.readTimeout,
		"write-timeout": cfg.writeTimeout, "idle-timeout": cfg.idleTimeout, "shutdown-timeout": cfg.shutdownTimeout}); err != nil {
		return err
	}
	if err := cfg.checkMaxConns(fileLimit()); err != nil {
		return err
	}
	if cfg.limits.maxHeaderBytes < 1024 {
		return &configError{settingName("max-header-bytes"), fmt.Sprintf("%d is too small; at least 1024 bytes", cfg.limits.maxHeaderBytes)}
	}
	if cfg.limits.maxBodyMemory < minMaxBodyMemory {
		return &configError{settingName("max-body-memory"), fmt.Sprintf("%d is too small; at least %d bytes (2 MiB), so that a body of 1 MiB fits", cfg.limits.maxBodyMemory, minMaxBodyMemory)}
	}
	if cfg.limits.authFailures < 0 {
		return &configError{settingName("auth-failure-limit"), fmt.Sprintf("%d is negative; 0 turns the limit off", cfg.limits.authFailures)}
	}
	proxies, err := parseTrustedProxies(cfg.trustedProxies)
	if err != nil {
		return &configError{settingName("trusted-proxies"), err.Error()}
	}
	cfg.limits.trustedProxies = proxies
	if cfg.limits.idempotencyTTL <= 0 {
		return &configError{settingName("idempotency-ttl"), fmt.Sprintf("%v is not positive; keys must be kept for some time, such as 24h", cfg.limits.idempotencyTTL)}
	}
	return cfg.limits.checkRate()
}

// checkKeys loads the secret of key identities and the keys under it.
func (cfg *config) checkKeys() error {
	var secret []byte
	if isPostgresURL(cfg.dbPath) && cfg.secretFile == "" {
		// There is no file beside a URL: every replica reads the one
		// secret that migration 8 made in the database, once the store is
		// open (serve). The keys are checked here all the same, so that a
		// bad key file stops start-up before the database is opened; serve
		// loads them again under the database's secret.
		cfg.secretInDB = true
	} else {
		var err error
		if secret, err = loadSecret(cfg.secretFile, cfg.dbPath); err != nil {
			return &configError{settingName("secret-file"), err.Error()}
		}
		cfg.secret = secret
	}
	keys, err := loadKeyring(cfg.apiKeys, cfg.apiKeysFile, secret)
	if err != nil {
		return err
	}
	cfg.keys = keys
	if isPostgresURL(cfg.dbPath) && !keys.configured() {
		// A key generated at start-up would differ from one replica to the
		// next, so clients would be refused by every replica but one.
		return &configError{settingName("db"), "a PostgreSQL database is served by replicas that must accept the same keys: set PETSTORE_API_KEYS or -api-keys-file"}
	}
	if !keys.configured() && cfg.dbPath == memoryDB && cfg.logFormat == "json" {
		// The key generated for a database in memory is kept nowhere, so it
		// could only be shown in the log, which must never hold a key.
		return &configError{envPrefix + "API_KEYS", "no API key is configured, and with -log-format json and -db :memory: a generated key could only be shown in the log; set PETSTORE_API_KEYS or -api-keys-file"}
	}
	return nil
}

// checkReplica checks the settings of -replicate.
func (cfg *config) checkReplica() error {
	if cfg.replicaURL == "" {
		for _, name := range []string{"replicate-sync", "replicate-timeout", "replicate-snapshot-interval", "replicate-retention"} {
			if cfg.given[name] {
				return &configError{settingName("replicate"), fmt.Sprintf("is missing: -%s sets up the replication that -replicate turns on", name)}
			}
		}
		return nil
	}
	switch {
	case isPostgresURL(cfg.dbPath):
		return &configError{settingName("replicate"), "replicates a SQLite file; PostgreSQL keeps its own copies: archive its WAL with pgBackRest or WAL-G for point-in-time recovery, and use synchronous_commit with a standby for zero loss (docs/scaling.md)"}
	case cfg.dbPath == memoryDB:
		return &configError{settingName("replicate"), "replicates a SQLite file, and -db :memory: has none; give -db a file"}
	}
	target, err := parseReplicaURL(cfg.replicaURL)
	if err != nil {
		return &configError{settingName("replicate"), err.Error()}
	}
	if target.s3() && cfg.awsCABundle {
		return &configError{"AWS_CA_BUNDLE", "is set, and the replica's S3 client cannot use it; unset it, and put a private CA in the system's trust store or in SSL_CERT_FILE, which Go reads"}
	}
	cfg.replica.target = target
	if err := checkDurations(true, map[string]time.Duration{"replicate-timeout": cfg.replica.timeout,
		"replicate-snapshot-interval": cfg.replica.snapshotInterval, "replicate-retention": cfg.replica.retention}); err != nil {
		return err
	}
	if cfg.replica.retention < cfg.replica.snapshotInterval {
		return &configError{settingName("replicate-retention"), fmt.Sprintf("%v is shorter than -replicate-snapshot-interval (%v): a restore needs a snapshot within the window", cfg.replica.retention, cfg.replica.snapshotInterval)}
	}
	return nil
}

// checkRate checks -rate-limit and -rate-burst and fills in the default
// burst. A burst without a rate is refused rather than ignored: the operator
// meant to limit something.
func (l *limits) checkRate() error {
	r, b := l.rateLimit, l.rateBurst
	switch {
	case r < 0 || math.IsInf(r, 0) || math.IsNaN(r):
		return &configError{settingName("rate-limit"), fmt.Sprintf("%v is not a number of requests per second (0 or more; 0 turns the limit off)", r)}
	case b < 0:
		return &configError{settingName("rate-burst"), fmt.Sprintf("%d is negative; a burst is 1 or more requests (0 for the default)", b)}
	case r == 0 && b > 0:
		return &configError{settingName("rate-burst"), "has no effect without -rate-limit; set both, or neither"}
	case r > 0 && b == 0:
		// A burst below 1 would refuse every request; the rate rounded up
		// lets a client spend one second's worth at once.
		l.rateBurst = max(1, int(math.Ceil(min(r, math.MaxInt32))))
	}
	return nil
}

// checkMaxConns checks -max-conns against the open-file limit (0 when
// unknown) and puts the default in place of 0.
func (cfg *config) checkMaxConns(limit uint64) error {
	switch {
	case cfg.maxConns < 0:
		return &configError{settingName("max-conns"), fmt.Sprintf("%d is negative; 0 means the default for the open-file limit", cfg.maxConns)}
	case cfg.maxConns == 0:
		cfg.maxConns = defaultMaxConns(limit)
	case limit > 0 && uint64(cfg.maxConns)+connReserve > limit:
		return &configError{settingName("max-conns"), fmt.Sprintf("%d connections do not fit the open-file limit of %d (ulimit -n) with the %d files the rest of the service needs; raise the limit or set at most %d", cfg.maxConns, limit, connReserve, int64(limit)-connReserve)}
	}
	return nil
}

// readSeed reads a JSON array of NewPet, each checked by the same rules as a
// createPet body.
func readSeed(path string) ([]newPet, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read: %v", errors.Unwrap(err))
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("%s is not a JSON array of pets: %v", path, err)
	}
	pets := make([]newPet, 0, len(raw))
	for i, r := range raw {
		p, err := decodeNewPet(r)
		if err != nil {
			msg := err.Error()
			if e, ok := errors.AsType[*apiError](err); ok {
				msg = e.Message
			}
			return nil, fmt.Errorf("%s: pet %d (counting from 0): %s", path, i, msg)
		}
		pets = append(pets, p)
	}
	return pets, nil
}
