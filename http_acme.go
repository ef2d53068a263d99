package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/mholt/acmez/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Certificates by themselves (-domain): CertMagic, Caddy's engine, orders
// them from the ACME CA (HTTP-01 on the plain listener, TLS-ALPN-01 on the
// HTTPS one; either suffices), keeps them in the database (acmeStorage), and
// renews them ahead of expiry (its schedule, ARI where the CA offers it).
// On PostgreSQL every replica reads the same storage: one replica at a time
// orders or renews a name (a lock in the database), the others serve what
// it stored. Only the names of -domain are ever ordered: CertMagic's
// on-demand mode stays off, so a handshake for any other name fails without
// an order. An order that failed is tried again on CertMagic's growing
// schedule (1, 2, 2, 5, 10 minutes... up to 6 hours), never in a loop.

// acmeCertificates is the service's CertMagic.
type acmeCertificates struct {
	names   []string
	magic   *certmagic.Config
	cache   *certmagic.Cache
	issuer  *certmagic.ACMEIssuer
	storage *acmeStorage
}

// acmeOptions are what the engine needs beside the settings: where the
// service listens, for the challenges (a nil plain listener turns HTTP-01
// off), and how often certificates are looked at for renewal.
type acmeOptions struct {
	https, plain net.Addr
	renewCheck   time.Duration
}

// newACMECertificates sets CertMagic up for the names of t, keeping its
// storage in st and logging through log, its lines that name a client held
// to the rule of failures. It orders nothing until start.
func newACMECertificates(t tlsSettings, o acmeOptions, log *slog.Logger, failures *connFailures, st *store) *acmeCertificates {
	zl := zap.New(&zapToSlog{h: log.Handler().WithAttrs([]slog.Attr{slog.String("component", "acme")}), failures: failures})
	a := &acmeCertificates{names: t.names, storage: newACMEStorage(st)}
	a.cache = certmagic.NewCache(certmagic.CacheOptions{
		GetConfigForCert:   func(certmagic.Certificate) (*certmagic.Config, error) { return a.magic, nil },
		RenewCheckInterval: o.renewCheck,
		Logger:             zl,
	})
	a.magic = certmagic.New(a.cache, certmagic.Config{Storage: a.storage, Logger: zl, OnEvent: a.onEvent(log)})
	host, httpsPort := hostPort(o.https)
	issuer := certmagic.ACMEIssuer{
		CA:           t.acmeCA,
		Email:        t.acmeEmail,
		Agreed:       true,
		TrustedRoots: t.acmeRoots,
		Profile:      t.acmeProfile,
		// The service listens on these itself: CertMagic finds them taken
		// and leaves the answers to the service's handlers (the plain
		// listener's, and the HTTPS listener's GetCertificate).
		ListenHost:              host,
		AltTLSALPNPort:          httpsPort,
		DisableHTTPChallenge:    o.plain == nil,
		DisableTLSALPNChallenge: false,
		Logger:                  zl,
	}
	if o.plain != nil {
		_, issuer.AltHTTPPort = hostPort(o.plain)
	}
	a.issuer = certmagic.NewACMEIssuer(a.magic, issuer)
	a.magic.Issuers = []certmagic.Issuer{a.issuer}
	return a
}

// hostPort is the host and port of a TCP address ("" for an unspecified
// host).
func hostPort(addr net.Addr) (string, int) {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok {
		return "", 0
	}
	if tcp.IP.IsUnspecified() {
		return "", tcp.Port
	}
	return tcp.IP.String(), tcp.Port
}

// tlsConfig is the HTTPS listener's: CertMagic's certificates (and its
// answers to TLS-ALPN-01, acme-tls/1 last among the protocols).
func (a *acmeCertificates) tlsConfig() *tls.Config {
	return serverTLSConfig(a.magic.TLSConfig(), acmez.ACMETLS1Protocol)
}

// challenges answers ACME's HTTP-01 challenges on the plain listener, and
// passes every other request to next.
func (a *acmeCertificates) challenges(next http.Handler) http.Handler {
	return a.issuer.HTTPChallengeHandler(next)
}

// loadStored puts the certificates the storage holds for the names into
// the cache, before the listener is announced: a restart, or a replica
// started later, serves them from its first handshake, with no order. A
// name without one is left to start.
func (a *acmeCertificates) loadStored(ctx context.Context) {
	for _, name := range a.names {
		_, _ = a.magic.CacheManagedCertificate(ctx, name)
	}
}

// start begins managing the names: the stored certificates are served at
// once, and what is missing or due is ordered in the background, retried
// on CertMagic's schedule when it fails.
func (a *acmeCertificates) start(ctx context.Context) error {
	return a.magic.ManageAsync(ctx, a.names)
}

// stop ends the renewals and releases the locks this process holds.
func (a *acmeCertificates) stop() {
	a.cache.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	a.storage.releaseAll(ctx)
}

// expiries is when the certificate served for each name expires; a name
// without one yet is left out.
func (a *acmeCertificates) expiries() map[string]time.Time {
	out := map[string]time.Time{}
	for _, name := range a.names {
		for _, c := range a.cache.AllMatchingCertificates(name) {
			if c.Leaf != nil && c.Leaf.NotAfter.After(out[name]) {
				out[name] = c.Leaf.NotAfter
			}
		}
	}
	return out
}

// onEvent logs what operators act on: a certificate obtained or renewed
// (INFO), and an order that failed (WARN, with the CA's error; it is tried
// again later, and a valid certificate, if any, is served meanwhile).
func (a *acmeCertificates) onEvent(log *slog.Logger) func(context.Context, string, map[string]any) error {
	return func(ctx context.Context, event string, data map[string]any) error {
		switch event {
		case "cert_obtained":
			log.InfoContext(ctx, "TLS certificate obtained", "name", data["identifier"], "renewal", data["renewal"], "ca", data["issuer"])
		case "cert_failed":
			log.WarnContext(ctx, "TLS certificate not obtained; it is ordered again later, on a growing schedule", "name", data["identifier"], "renewal", data["renewal"], "err", fmt.Sprint(data["error"]))
		}
		return nil
	}
}

// acmeStorage is CertMagic's Storage (with its Locker and TryLocker), kept
// in the database: CertMagic sees a small file system of slash-separated
// keys, whose directories are the prefixes of the keys stored.
type acmeStorage struct {
	st    *store
	owner string // this process, in the locks it holds

	mu   sync.Mutex
	held map[string]context.CancelFunc // the locks held, each with its renewer
}

// The locks' timing: a held lock's expiry is pushed forward every
// acmeLockRenew to acmeLockTTL ahead, so that one outlives a dead holder by
// at most acmeLockTTL; a blocked Lock tries again every acmeLockPoll.
const (
	acmeLockTTL   = 20 * time.Second
	acmeLockRenew = 5 * time.Second
	acmeLockPoll  = time.Second
)

// newACMEStorage returns the storage of st, owned by a fresh id.
func newACMEStorage(st *store) *acmeStorage {
	return &acmeStorage{st: st, owner: rand.Text(), held: map[string]context.CancelFunc{}}
}

// Store writes value under key.
func (s *acmeStorage) Store(ctx context.Context, key string, value []byte) error {
	return s.st.acmePut(ctx, key, value, time.Now())
}

// Load reads the value under key; an error wrapping fs.ErrNotExist when
// there is none.
func (s *acmeStorage) Load(ctx context.Context, key string) ([]byte, error) {
	value, _, err := s.st.acmeGet(ctx, key)
	if err == errACMENotStored {
		return nil, fmt.Errorf("%s: %w", key, fs.ErrNotExist)
	}
	return value, err
}

// Delete deletes key, or the directory key with everything under it; a key
// that is not there is no error.
func (s *acmeStorage) Delete(ctx context.Context, key string) error {
	return s.st.acmeDelete(ctx, key)
}

// Exists reports whether key is a key or a directory.
func (s *acmeStorage) Exists(ctx context.Context, key string) bool {
	_, err := s.Stat(ctx, key)
	return err == nil
}

// List returns the keys and directories directly under dir (every one
// below it with recursive), as full keys; an error wrapping fs.ErrNotExist
// when there is none.
func (s *acmeStorage) List(ctx context.Context, dir string, recursive bool) ([]string, error) {
	prefix := strings.TrimSuffix(dir, "/") + "/"
	if dir == "" {
		prefix = ""
	}
	entries, err := s.st.acmeUnder(ctx, prefix)
	if err != nil {
		return nil, err
	}
	var out []string
	seen := map[string]bool{}
	for _, e := range entries {
		rest := e.key[len(prefix):]
		parts := strings.Split(rest, "/")
		for i := range parts {
			if !recursive && i > 0 {
				break
			}
			k := prefix + strings.Join(parts[:i+1], "/")
			if !seen[k] {
				seen[k] = true
				out = append(out, k)
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: %w", dir, fs.ErrNotExist)
	}
	slices.Sort(out)
	return out, nil
}

// Stat describes key: a key, or a directory (the prefix of keys, whose
// time is its newest key's); an error wrapping fs.ErrNotExist when it is
// neither.
func (s *acmeStorage) Stat(ctx context.Context, key string) (certmagic.KeyInfo, error) {
	value, modified, err := s.st.acmeGet(ctx, key)
	switch {
	case err == nil:
		return certmagic.KeyInfo{Key: key, Modified: modified, Size: int64(len(value)), IsTerminal: true}, nil
	case err != errACMENotStored:
		return certmagic.KeyInfo{}, err
	}
	entries, err := s.st.acmeUnder(ctx, strings.TrimSuffix(key, "/")+"/")
	if err != nil {
		return certmagic.KeyInfo{}, err
	}
	if len(entries) == 0 {
		return certmagic.KeyInfo{}, fmt.Errorf("%s: %w", key, fs.ErrNotExist)
	}
	info := certmagic.KeyInfo{Key: key}
	for _, e := range entries {
		if e.modified.After(info.Modified) {
			info.Modified = e.modified
		}
	}
	return info, nil
}

// Lock takes the lock name, waiting while another process (or another
// goroutine of this one) holds it, until ctx ends.
func (s *acmeStorage) Lock(ctx context.Context, name string) error {
	for {
		ok, err := s.TryLock(ctx, name)
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(acmeLockPoll):
		}
	}
}

// TryLock takes the lock name if it is free (or its holder let it expire),
// and keeps it from expiring while it is held.
func (s *acmeStorage) TryLock(ctx context.Context, name string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, mine := s.held[name]; mine {
		return false, nil // held by another goroutine of this process
	}
	now := time.Now()
	ok, err := s.st.acmeLock(ctx, name, s.owner, now.Add(acmeLockTTL), now)
	if err != nil || !ok {
		return false, err
	}
	renewCtx, stop := context.WithCancel(context.Background())
	s.held[name] = stop
	go s.renew(renewCtx, name)
	return true, nil
}

// renew pushes the expiry of the held lock name forward until ctx ends.
func (s *acmeStorage) renew(ctx context.Context, name string) {
	t := time.NewTicker(acmeLockRenew)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			// A failed renewal is tried again at the next tick; the lock
			// holds for acmeLockTTL, several ticks.
			_, _ = s.st.acmeRenewLock(ctx, name, s.owner, time.Now().Add(acmeLockTTL))
		}
	}
}

// Unlock releases the lock name, which this process holds.
func (s *acmeStorage) Unlock(ctx context.Context, name string) error {
	s.mu.Lock()
	stop, mine := s.held[name]
	delete(s.held, name)
	s.mu.Unlock()
	if !mine {
		return fmt.Errorf("ACME lock %s is not held by this process", name)
	}
	stop()
	return s.st.acmeUnlock(ctx, name, s.owner)
}

// releaseAll releases every lock this process still holds (an order in
// progress at shutdown), so that another replica need not wait for them to
// expire.
func (s *acmeStorage) releaseAll(ctx context.Context) {
	s.mu.Lock()
	names := make([]string, 0, len(s.held))
	for name, stop := range s.held {
		stop()
		names = append(names, name)
	}
	clear(s.held)
	s.mu.Unlock()
	for _, name := range names {
		_ = s.st.acmeUnlock(ctx, name, s.owner)
	}
}

// zapToSlog is a zap core that writes to a slog handler: CertMagic logs
// through zap only, and the service's log is slog's. Its DEBUG lines (one
// per handshake) are dropped unless the handler takes them, and its ERROR
// lines are WARN: an order or a renewal that failed is tried again, and the
// certificate in force is served meanwhile. A line that names a client (a
// challenge it could not answer, with the client's server name) is
// sampled, counted and cut by failures (see connFailures.clientLine).
type zapToSlog struct {
	h        slog.Handler
	attrs    []slog.Attr
	failures *connFailures
}

// levelOf is the slog level of a zap one.
func levelOf(l zapcore.Level) slog.Level {
	switch {
	case l <= zapcore.DebugLevel:
		return slog.LevelDebug
	case l == zapcore.InfoLevel:
		return slog.LevelInfo
	}
	return slog.LevelWarn
}

func (c *zapToSlog) Enabled(l zapcore.Level) bool {
	return c.h.Enabled(context.Background(), levelOf(l))
}

func (c *zapToSlog) With(fields []zapcore.Field) zapcore.Core {
	return &zapToSlog{h: c.h, attrs: append(slices.Clip(c.attrs), attrsOf(fields)...), failures: c.failures}
}

func (c *zapToSlog) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *zapToSlog) Write(e zapcore.Entry, fields []zapcore.Field) error {
	attrs := append(slices.Clip(c.attrs), attrsOf(fields)...)
	if c.failures != nil {
		var ok bool
		if attrs, ok = c.failures.clientLine(levelOf(e.Level), attrs); !ok {
			return nil
		}
	}
	r := slog.NewRecord(e.Time, levelOf(e.Level), e.Message, 0)
	r.AddAttrs(attrs...)
	return c.h.Handle(context.Background(), r)
}

func (c *zapToSlog) Sync() error { return nil }

// attrsOf turns zap fields into slog attributes, through zap's own encoder
// (which knows every kind of field), in the order of their names.
func attrsOf(fields []zapcore.Field) []slog.Attr {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range fields {
		f.AddTo(enc)
	}
	attrs := make([]slog.Attr, 0, len(enc.Fields))
	for _, k := range slices.Sorted(maps.Keys(enc.Fields)) {
		attrs = append(attrs, slog.Any(k, enc.Fields[k]))
	}
	return attrs
}

// defaultACMERenewCheck is how often the certificates are looked at for
// renewal unless -acme-renew-check says otherwise: CertMagic's own default.
const defaultACMERenewCheck = certmagic.DefaultRenewCheckInterval
