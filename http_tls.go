package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// HTTPS. With -domain, certificates are ordered and renewed from an ACME CA
// by themselves (http_acme.go); with -tls-cert and -tls-key, the shop's own
// certificate is served, and read again on SIGHUP and when its files change.
// Either way the API listener speaks TLS 1.2 and 1.3 only, with Go's cipher
// suites, HTTP/2 by ALPN beside HTTP/1.1, and every answer carries
// Strict-Transport-Security. Beside it, -http-addr is a plain listener that
// answers ACME's HTTP-01 challenges, redirects pages to https, and refuses
// without running it every request under /v1, however spelt, and every
// request that carries credentials, whatever its path: a key that crossed
// the network in clear must be rotated, not used (Stripe's rule, not a
// redirect, which would run the request after the key was exposed).

// letsEncryptCA is the default ACME directory: Let's Encrypt's production
// one.
const letsEncryptCA = "https://acme-v02.api.letsencrypt.org/directory"

// hstsValue is the Strict-Transport-Security of every HTTPS answer: a year,
// the value browsers' preload lists ask for (without includeSubDomains,
// which is the domain owner's choice, not the service's).
const hstsValue = "max-age=31536000"

// hstsField is hstsValue as the value of a header field.
var hstsField = [1]string{hstsValue}

// tlsSettings are the HTTPS settings, checked (see check).
type tlsSettings struct {
	domains    string   // -domain, as given
	names      []string // its names, checked, in lower case
	acmeCA     string
	acmeCARoot string
	acmeRoots  *x509.CertPool // from acmeCARoot; nil: the system's
	acmeEmail  string
	// acmeProfile is the certificate profile asked of the CA (-acme-profile;
	// "": the CA's default), and acmeRenewCheck how often the
	// certificates are looked at for renewal.
	acmeProfile    string
	acmeRenewCheck time.Duration
	certFile       string
	keyFile        string
	own            *ownCertificate // loaded by check with -tls-cert
	httpAddr       string
}

// on reports whether the API is served over HTTPS.
func (t tlsSettings) on() bool { return t.domains != "" || t.certFile != "" }

// check validates the HTTPS settings, loads the files they name, and puts
// -http-addr's default in place (":80" with -domain, unless given).
func (t *tlsSettings) check(given map[string]bool) error {
	switch {
	case t.domains != "" && (t.certFile != "" || t.keyFile != ""):
		return &configError{settingName("domain"), "is for certificates ordered by themselves, and -tls-cert/-tls-key for your own: give one or the other"}
	case t.certFile != "" && t.keyFile == "":
		return &configError{settingName("tls-key"), "is missing: -tls-cert needs the private key of its certificate"}
	case t.keyFile != "" && t.certFile == "":
		return &configError{settingName("tls-cert"), "is missing: -tls-key needs the certificate it is the key of"}
	case t.domains == "" && (given["acme-ca"] || given["acme-ca-root"] || given["acme-email"] || given["acme-profile"] || given["acme-renew-check"]):
		return &configError{settingName("domain"), "is missing: the -acme-* settings set up the certificates that -domain orders"}
	}
	if t.domains != "" {
		if err := t.checkACME(given); err != nil {
			return err
		}
	}
	if t.certFile != "" {
		own, err := loadOwnCertificate(t.certFile, t.keyFile)
		if err != nil {
			return err
		}
		t.own = own
	}
	if t.httpAddr != "" {
		if !t.on() {
			return &configError{settingName("http-addr"), "is the plain listener beside HTTPS: set -domain or -tls-cert too, or serve plain HTTP on -addr alone"}
		}
		if err := checkAddr(t.httpAddr); err != nil {
			return &configError{settingName("http-addr"), err.Error()}
		}
	}
	return nil
}

// checkACME checks the settings of -domain.
func (t *tlsSettings) checkACME(given map[string]bool) error {
	for name := range strings.SplitSeq(t.domains, ",") {
		name = strings.ToLower(strings.TrimSpace(name))
		if !validDomain(name) {
			return &configError{settingName("domain"), fmt.Sprintf("%q is not a domain name a certificate can be ordered for by HTTP or TLS challenges: give names such as shop.example.com, separated by commas, without a wildcard, a port or an IP address", abbreviate(name))}
		}
		t.names = append(t.names, name)
	}
	if !given["http-addr"] {
		t.httpAddr = ":80"
	}
	u, err := url.Parse(t.acmeCA)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return &configError{settingName("acme-ca"), fmt.Sprintf("%q is not an https URL of an ACME directory (such as %s)", abbreviate(t.acmeCA), letsEncryptCA)}
	}
	if t.acmeEmail != "" && (strings.Count(t.acmeEmail, "@") != 1 || strings.ContainsAny(t.acmeEmail, " \t,<>")) {
		return &configError{settingName("acme-email"), fmt.Sprintf("%q is not an address such as ops@example.com", abbreviate(t.acmeEmail))}
	}
	if t.acmeRenewCheck < time.Second {
		return &configError{settingName("acme-renew-check"), fmt.Sprintf("%v is too short; at least 1s (the default is 10m)", t.acmeRenewCheck)}
	}
	if t.acmeCARoot != "" {
		b, err := os.ReadFile(t.acmeCARoot)
		if err != nil {
			return &configError{settingName("acme-ca-root"), fmt.Sprintf("cannot read %s: %v", t.acmeCARoot, errors.Unwrap(err))}
		}
		t.acmeRoots = x509.NewCertPool()
		if !t.acmeRoots.AppendCertsFromPEM(b) {
			return &configError{settingName("acme-ca-root"), fmt.Sprintf("%s holds no PEM certificate", t.acmeCARoot)}
		}
	}
	return nil
}

// domainLabel is one label of a domain name: letters, digits and '-', not
// at either end.
var domainLabel = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// validDomain reports whether name is a domain name, in lower case, that an
// ACME CA can validate by HTTP-01 or TLS-ALPN-01: no wildcard (those need
// DNS-01), no IP address.
func validDomain(name string) bool {
	if len(name) == 0 || len(name) > 253 || net.ParseIP(name) != nil {
		return false
	}
	for label := range strings.SplitSeq(name, ".") {
		if !domainLabel.MatchString(label) {
			return false
		}
	}
	return true
}

// serverTLSConfig is the API listener's TLS: 1.2 and 1.3 only, Go's cipher
// suites (nothing tuned by hand), HTTP/2 first by ALPN and HTTP/1.1 beside
// it, and the certificate getCert picks. extraProtos come last (ACME's
// acme-tls/1: only a validator offers it, so it never wins over these).
func serverTLSConfig(base *tls.Config, extraProtos ...string) *tls.Config {
	c := base.Clone()
	c.MinVersion = tls.VersionTLS12
	c.NextProtos = append([]string{"h2", "http/1.1"}, extraProtos...)
	return c
}

// hsts tells browsers to use HTTPS only, for a year, on every answer that
// came over TLS.
func hsts(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS != nil {
			w.Header()["Strict-Transport-Security"] = hstsField[:] // as Set would, shared (see jsonFields)
		}
		next.ServeHTTP(w, r)
	})
}

// ownCertificate is the shop's own certificate, from -tls-cert and
// -tls-key. Handshakes read it through an atomic pointer, so that a reload
// swaps it without blocking or dropping a connection; a pair that cannot be
// loaded keeps the one in force. Once loaded, its files are read by one
// goroutine only (keepFresh), which nothing waits for: a file that hangs it
// (one on a network file system that stopped answering) holds neither the
// keys' reload nor the stop.
type ownCertificate struct {
	certFile, keyFile string
	current           atomic.Pointer[tls.Certificate]
	keyMode           atomic.Uint32 // the mode of the key file of the pair in force
	requests          chan string   // reloads asked for (SIGHUP), and why

	// Read and written by reload alone, so by keepFresh's goroutine once
	// the pair is loaded: the stamps of the files of the pair in force, and
	// of those last refused (nil when the last reload was not), which are
	// not read again until they change, so that a pair refused is logged
	// once, not at every look.
	stamp   [2]fileStamp
	refused *[2]fileStamp
}

// fileStamp is what tells a file changed: its size, modification time and
// inode (a file replaced by a rename has another).
type fileStamp struct {
	size  int64
	mtime time.Time
	ino   uint64
}

// stampOf is the stamp of the file at path; the zero stamp when it cannot
// be read.
func stampOf(path string) fileStamp {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}
	}
	return fileStamp{size: fi.Size(), mtime: fi.ModTime(), ino: inodeOf(fi)}
}

// maxPEMFileLen bounds the files of -tls-cert and -tls-key: a chain of
// certificates is a few kilobytes, and a longer file is refused, not read
// without end (a symbolic link to /dev/zero is refused as a device before).
const maxPEMFileLen = 1 << 20

// loadOwnCertificate loads the pair of certFile and keyFile. Its errors are
// settings that cannot work, naming the file at fault.
func loadOwnCertificate(certFile, keyFile string) (*ownCertificate, error) {
	o := &ownCertificate{certFile: certFile, keyFile: keyFile, requests: make(chan string, 1)}
	if err := o.reload(); err != nil {
		return nil, err
	}
	return o, nil
}

// readPEMFile reads the file of setting as the key file is read (see
// readRegular): a FIFO, a device or a file over maxPEMFileLen is refused at
// once, with an error naming the setting.
func readPEMFile(setting, path string) ([]byte, os.FileMode, error) {
	b, mode, err := readRegular(path, maxPEMFileLen)
	if errors.As(err, new(syscall.Errno)) {
		return nil, 0, &configError{settingName(setting), fmt.Sprintf("cannot read %s: %v", path, errors.Unwrap(err))}
	} else if err != nil {
		return nil, 0, &configError{settingName(setting), fmt.Sprintf("%s %v", path, err)}
	}
	return b, mode, nil
}

// reload reads the pair again and, when it is a valid one, serves it from
// the next handshake on. It returns a *configError naming the setting at
// fault, and keeps the pair in force, when it is not.
func (o *ownCertificate) reload() error {
	stamp := [2]fileStamp{stampOf(o.certFile), stampOf(o.keyFile)}
	cert, keyMode, err := o.read()
	if err != nil {
		o.refused = &stamp
		return err
	}
	o.current.Store(cert)
	o.keyMode.Store(uint32(keyMode))
	o.stamp, o.refused = stamp, nil
	return nil
}

// read reads and checks the pair, and returns it with the mode of its key
// file; its errors are those of reload.
func (o *ownCertificate) read() (*tls.Certificate, os.FileMode, error) {
	certPEM, _, err := readPEMFile("tls-cert", o.certFile)
	if err != nil {
		return nil, 0, err
	}
	keyPEM, keyMode, err := readPEMFile("tls-key", o.keyFile)
	if err != nil {
		return nil, 0, err
	}
	if b, _ := pem.Decode(certPEM); b == nil || b.Type != "CERTIFICATE" {
		return nil, 0, &configError{settingName("tls-cert"), fmt.Sprintf("%s holds no PEM certificate", o.certFile)}
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		// crypto/tls's message names neither file, and never the key's
		// content.
		return nil, 0, &configError{settingName("tls-key"), fmt.Sprintf("%s and %s are not a certificate and its private key: %v", o.certFile, o.keyFile, err)}
	}
	if now := time.Now(); !now.Before(cert.Leaf.NotAfter) {
		return nil, 0, &configError{settingName("tls-cert"), fmt.Sprintf("the certificate of %s expired at %s", o.certFile, cert.Leaf.NotAfter.UTC().Format(time.RFC3339))}
	}
	return &cert, keyMode, nil
}

// changed reports whether either file changed since the pair in force was
// read, and since the pair last refused was: a pair refused is read again
// (and its refusal logged again) only once its files change again, or on
// request.
func (o *ownCertificate) changed() bool {
	now := [2]fileStamp{stampOf(o.certFile), stampOf(o.keyFile)}
	return now != o.stamp && (o.refused == nil || now != *o.refused)
}

// getCertificate is the TLS config's: the pair in force.
func (o *ownCertificate) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return o.current.Load(), nil
}

// reloadLogged reloads the pair and logs the outcome: an ERROR naming the
// setting when the pair is refused, and the old one stays.
func (o *ownCertificate) reloadLogged(log *slog.Logger, why string) {
	if err := o.reload(); err != nil {
		log.Error("TLS certificate not reloaded; the previous one stays in force", "why", why, "err", err)
		return
	}
	leaf := o.current.Load().Leaf
	log.Info("TLS certificate reloaded", "why", why, "file", o.certFile, "serial", leaf.SerialNumber.Text(16), "not_after", leaf.NotAfter.UTC())
	o.warnOpenKey(log)
}

// warnOpenKey logs a WARN when the key file of the pair in force (the file
// itself, through any link) gives its group or other users any access:
// whoever reads it can pose as the shop. A warning, as for the database,
// not a refusal: a directory above may keep them out.
func (o *ownCertificate) warnOpenKey(log *slog.Logger) {
	if perm := os.FileMode(o.keyMode.Load()).Perm(); perm&0o077 != 0 {
		log.Warn("the TLS private key file can be read or changed by other users than its owner, and whoever reads it can pose as this service: chmod 600 it",
			"setting", settingName("tls-key"), "file", o.keyFile, "mode", fmt.Sprintf("%04o", perm))
	}
}

// requestReload asks keepFresh for a reload, without waiting for it: a
// request already waiting makes this one needless, since its reload reads
// the files as they are by then.
func (o *ownCertificate) requestReload(why string) {
	select {
	case o.requests <- why:
	default:
	}
}

// certWatchInterval is how often the files of -tls-cert and -tls-key are
// looked at for a change (a renewal by certbot or a deploy script).
const certWatchInterval = 2 * time.Second

// keepFresh reloads the pair when asked (requestReload), and when its files
// changed at a look (each value of looks), until ctx is done. A pair caught
// half-written, or otherwise refused, is logged once and read again at the
// next change or request.
func (o *ownCertificate) keepFresh(ctx context.Context, log *slog.Logger, looks <-chan time.Time) {
	for {
		select {
		case <-ctx.Done():
			return
		case why := <-o.requests:
			o.reloadLogged(log, why)
		case <-looks:
			o.look(log)
		}
	}
}

// look reloads the pair when its files changed (see changed).
func (o *ownCertificate) look(log *slog.Logger) {
	if o.changed() {
		o.reloadLogged(log, "the files changed")
	}
}

// expiries is the own certificate's expiry under each of its names (its
// common name when it has none).
func (o *ownCertificate) expiries() map[string]time.Time {
	leaf := o.current.Load().Leaf
	names := leaf.DNSNames
	for _, ip := range leaf.IPAddresses {
		names = append(names, ip.String())
	}
	if len(names) == 0 {
		names = []string{leaf.Subject.CommonName}
	}
	out := make(map[string]time.Time, len(names))
	for _, n := range names {
		out[n] = leaf.NotAfter
	}
	return out
}

// plainHandler serves the plain listener beside HTTPS: ACME's HTTP-01
// challenges (through challenges, when certificates are ordered), a 308 to
// https for a GET or HEAD of a page (see redirectable), and 403
// https_required for everything else, without running it and without
// reading its body (the connection is closed after the answer). A request
// that carries credentials in any form (see carriesCredentials) is refused
// before anything else looks at it, the challenges included, whatever its
// path: it crossed the network readable, and a redirect would have it sent
// again and run as if nothing had happened. A valid key it carried is named
// in a WARN (its label and id, never the key): it must be rotated. refused
// counts the refusals. httpsPort is the HTTPS listener's port; names, the
// names the redirect may lead to, those of the certificate served now.
func plainHandler(log *slog.Logger, keys keyring, refused func(), httpsPort int, names func() []string, challenges func(http.Handler) http.Handler) http.Handler {
	refuse := func(w http.ResponseWriter, r *http.Request) {
		if info := requestInfoFrom(r.Context()); info != nil {
			info.route = "plain: refused"
		}
		refused()
		warnKeysInClear(log, keys, r)
		w.Header().Set("Connection", "close")
		writeError(w, r, log, errorf(codeHTTPSRequired, "this service answers its API over HTTPS only, and did not run this request, which crossed the network in clear: send it to https://%s%s; if it carried an API key, that key may have been read on the way, so have it rotated", redirectHost(r.Host, httpsPort, names()), abbreviate(r.URL.Path)))
	}
	var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !redirectable(r) {
			refuse(w, r)
			return
		}
		if info := requestInfoFrom(r.Context()); info != nil {
			info.route = "plain: redirect to https"
		}
		w.Header().Set("Location", "https://"+redirectHost(r.Host, httpsPort, names())+r.URL.RequestURI())
		w.WriteHeader(http.StatusPermanentRedirect)
	})
	if challenges != nil {
		h = challenges(h)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if carriesCredentials(r) {
			refuse(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// maxRedirectTarget bounds the path and query a plain request may be
// redirected with: the Location header echoes them, and no header grows
// with what a client sent past 512 bytes (docs/security.md).
const maxRedirectTarget = 256

// redirectable reports whether a plain request without credentials may be
// redirected to https: a GET or HEAD of a page, its path in the one form
// the API listener routes (no empty, '.' or '..' segment, no ';' or '\',
// which some servers and proxies read otherwise) and outside /v1 however
// it is spelt (in any case: /V1/pets is refused too), and a target short
// enough to echo. Anything else is refused: what cannot be told from the
// API for certain is treated as the API.
func redirectable(r *http.Request) bool {
	p := r.URL.Path
	switch {
	case r.Method != http.MethodGet && r.Method != http.MethodHead:
		return false
	case p == "" || p[0] != '/' || path.Clean(p) != p || strings.ContainsAny(p, ";\\"):
		return false
	case len(r.URL.RequestURI()) > maxRedirectTarget:
		return false
	}
	lower := strings.ToLower(p)
	return lower != "/v1" && !strings.HasPrefix(lower, "/v1/")
}

// carriesCredentials reports whether r carries anything the service
// accepts as credentials, in any form: an Authorization header, whatever
// its scheme, value or position among several, or a stream ticket (the
// query parameter ticket, in any case and encoding of its name).
func carriesCredentials(r *http.Request) bool {
	return len(r.Header.Values("Authorization")) > 0 || hasTicketParameter(r.URL.RawQuery)
}

// hasTicketParameter reports whether the raw query names a parameter
// ticket, read more loosely than the feed reads it (separated by '&' or
// ';', its name in any case, escaped or not), so that no spelling of a
// ticket is redirected.
func hasTicketParameter(rawQuery string) bool {
	for part := range strings.FieldsFuncSeq(rawQuery, func(c rune) bool { return c == '&' || c == ';' }) {
		name, _, _ := strings.Cut(part, "=")
		if unescaped, err := url.QueryUnescape(name); err == nil {
			name = unescaped
		}
		if strings.EqualFold(strings.TrimSpace(name), "ticket") {
			return true
		}
	}
	return false
}

// warnKeysInClear logs a WARN for each valid key that r carried in any of
// its Authorization headers (see keysOfHeader), once per key: its label
// and id, never the key, and the request's id.
func warnKeysInClear(log *slog.Logger, keys keyring, r *http.Request) {
	ks := keys.keys()
	var warned []string
	for _, header := range r.Header.Values("Authorization") {
		for _, candidate := range keysOfHeader(header) {
			e, ok := ks.match(candidate)
			if !ok || slices.Contains(warned, e.shortID()) {
				continue
			}
			warned = append(warned, e.shortID())
			requestID := ""
			if info := requestInfoFrom(r.Context()); info != nil {
				requestID = info.id
			}
			log.WarnContext(r.Context(), "an API key was sent over plain HTTP, readable and changeable by anyone on the way, and its request was refused: rotate the key (docs/https.md)",
				"caller", e.label, "id", e.shortID(), "client", r.RemoteAddr, "request_id", requestID)
		}
	}
}

// keysOfHeader is what an Authorization header may hold as a key, in any
// scheme a client may have been configured with: the token of Bearer (or
// of any scheme), the user and the password of Basic, and the whole value.
func keysOfHeader(header string) []string {
	header = strings.TrimSpace(header)
	candidates := []string{header}
	scheme, token, found := strings.Cut(header, " ")
	if !found {
		return candidates
	}
	token = strings.TrimSpace(token)
	candidates = append(candidates, token)
	if strings.EqualFold(scheme, "Basic") {
		if b, err := base64.StdEncoding.DecodeString(token); err == nil {
			user, password, _ := strings.Cut(string(b), ":")
			candidates = append(candidates, user, password)
		}
	}
	return candidates
}

// redirectHost is the host, and port unless 443, that a plain request for
// host is sent to over HTTPS: host itself when it is one of names (or any
// well-formed host when names is empty), otherwise the first of names, so
// that a forged Host header cannot send a client elsewhere.
func redirectHost(host string, httpsPort int, names []string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.ToLower(strings.Trim(host, "[]"))
	switch {
	case len(names) > 0 && !containsName(names, host):
		host = names[0]
	case len(names) == 0 && !validDomain(host) && net.ParseIP(host) == nil:
		host = "localhost"
	}
	if httpsPort == 443 {
		if strings.Contains(host, ":") {
			return "[" + host + "]"
		}
		return host
	}
	return net.JoinHostPort(host, strconv.Itoa(httpsPort))
}

// containsName reports whether names holds name.
func containsName(names []string, name string) bool { return slices.Contains(names, name) }

// certificates are where the HTTPS listener's certificates come from: the
// shop's own (-tls-cert), or ordered by themselves (-domain).
type certificates struct {
	tls   *tls.Config
	names []string // -domain's names; nil with the shop's own certificate
	own   *ownCertificate
	acme  *acmeCertificates
}

// certificatesOf sets up the certificates of t for a service whose HTTPS
// listener is https and plain listener plain (nil: none), the engine's
// lines that name a client held to the rule of failures; nil when t is not
// HTTPS.
func certificatesOf(t tlsSettings, log *slog.Logger, failures *connFailures, st *store, https, plain net.Addr) *certificates {
	switch {
	case t.own != nil:
		t.own.warnOpenKey(log)
		return &certificates{own: t.own, tls: serverTLSConfig(&tls.Config{GetCertificate: t.own.getCertificate})}
	case t.domains != "":
		acme := newACMECertificates(t, acmeOptions{https: https, plain: plain, renewCheck: t.acmeRenewCheck}, log, failures, st)
		return &certificates{acme: acme, names: t.names, tls: acme.tlsConfig()}
	}
	return nil
}

// loadStored serves, from the first handshake on, the certificates that
// the storage already holds (-domain); the shop's own is loaded already.
func (c *certificates) loadStored(ctx context.Context) {
	if c != nil && c.acme != nil {
		c.acme.loadStored(ctx)
	}
}

// redirectNames are the names a plain request may be redirected to: those
// of -domain, or those the shop's own certificate holds now.
func (c *certificates) redirectNames() []string {
	if c.acme != nil {
		return c.names
	}
	return slices.Sorted(maps.Keys(c.own.expiries()))
}

// challenges answers ACME's HTTP-01 challenges before next, with -domain.
func (c *certificates) challenges() func(http.Handler) http.Handler {
	if c.acme == nil {
		return nil
	}
	return c.acme.challenges
}

// expiries is when each served certificate expires, by name.
func (c *certificates) expiries() map[string]time.Time {
	if c.acme != nil {
		return c.acme.expiries()
	}
	return c.own.expiries()
}

// run keeps the certificates fresh until ctx is done: the own pair's files
// are watched for changes; the ordered ones are managed (ordered, renewed).
// It returns when ctx is done.
func (c *certificates) run(ctx context.Context, log *slog.Logger) {
	if c.own != nil {
		// Not waited for (see ownCertificate): it ends at its next step
		// once ctx is done, unless a file holds it.
		looks := time.NewTicker(certWatchInterval)
		go func() {
			defer looks.Stop()
			c.own.keepFresh(ctx, log, looks.C)
		}()
		<-ctx.Done()
		return
	}
	if err := c.acme.start(ctx); err != nil {
		log.Error("TLS certificates not managed", "names", c.names, "err", err)
	}
	<-ctx.Done()
	c.acme.stop()
}

// reload asks for the own pair to be read again (SIGHUP), and returns at
// once: the reload runs in keepFresh's goroutine. Ordered certificates renew
// by themselves.
func (c *certificates) reload() {
	if c != nil && c.own != nil {
		c.own.requestReload("SIGHUP")
	}
}
