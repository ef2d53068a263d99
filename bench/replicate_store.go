package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// The store of bench replicate: versitygw on 127.0.0.1, a client of it
// that makes the buckets and lists the replicas, and the proxies between
// the services and it, which count every request and may delay it.

// The root credentials of the run's versitygw, which the services and the
// restores sign with, and the region the run's client signs for
// (versitygw's default).
const (
	s3AccessKey = "petstore-bench-access-key"
	s3SecretKey = "petstore-bench-secret-key-0123456789"
	s3Region    = "us-east-1"
)

// s3Store is the run's versitygw and a client of it.
type s3Store struct {
	proc     *process
	endpoint string // http://127.0.0.1:PORT
	client   *s3.Client
}

// startS3Store starts versitygw (the binary bin) on its posix backend over
// root, on a free port of 127.0.0.1, and waits until it answers.
func startS3Store(ctx context.Context, bin, root string) (*s3Store, error) {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := serverCommand(ctx, bin, "--port", addr, "--quiet", "posix", root)
	// Its own environment, whole: versitygw reads dozens of VGW_ and ROOT_
	// variables, which a developer's shell could set.
	cmd.Env = []string{"ROOT_ACCESS_KEY_ID=" + s3AccessKey, "ROOT_SECRET_ACCESS_KEY=" + s3SecretKey}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start versitygw: %w", err)
	}
	s := &s3Store{proc: &process{cmd: cmd}, endpoint: "http://" + addr}
	s.proc.url = s.endpoint
	client := &http.Client{Timeout: time.Second}
	defer client.CloseIdleConnections()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		// Any answer is S3's: 403 to a request without a signature.
		res, err := client.Get(s.endpoint)
		if err == nil {
			res.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			s.proc.stop()
			return nil, fmt.Errorf("versitygw on %s did not answer within 10s: %v", addr, err)
		}
	}
	s.client = s3.New(s3.Options{
		Region:       s3Region,
		BaseEndpoint: aws.String(s.endpoint),
		UsePathStyle: true,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: s3AccessKey, SecretAccessKey: s3SecretKey, Source: "bench replicate's store"}, nil
		}),
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})
	return s, nil
}

// stop stops versitygw, by its PID.
func (s *s3Store) stop() { s.proc.stop() }

// pids is versitygw's process, whose CPU time is measured.
func (s *s3Store) pids() []int { return []int{s.proc.cmd.Process.Pid} }

// newBucket creates the bucket name.
func (s *s3Store) newBucket(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := s.client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		return fmt.Errorf("create the bucket %s: %w", name, err)
	}
	return nil
}

// replicaListing is what a replica holds, by Litestream's level ("0000"
// is level 0, "0009" the snapshots) or file (lock.json, the lease).
type replicaListing map[string]objectsSize

// objectsSize is a number of objects and their bytes.
type objectsSize struct{ objects, bytes int64 }

// total is the whole listing's.
func (l replicaListing) total() objectsSize {
	var t objectsSize
	for _, s := range l {
		t.objects += s.objects
		t.bytes += s.bytes
	}
	return t
}

// list lists the replica under replicaPrefix in bucket.
func (s *s3Store) list(ctx context.Context, bucket string) (replicaListing, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	l := replicaListing{}
	pages := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String(replicaPrefix)})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", bucket, err)
		}
		for _, o := range page.Contents {
			group, _, _ := strings.Cut(strings.TrimPrefix(aws.ToString(o.Key), replicaPrefix), "/")
			g := l[group]
			g.objects++
			g.bytes += aws.ToInt64(o.Size)
			l[group] = g
		}
	}
	return l, nil
}

// traffic is what crossed a proxy: requests by the S3 operation they are
// billed as, and the bytes of their bodies each way.
type traffic struct {
	Put    int64 `json:"put"`    // PutObject, and a multipart upload's parts and POSTs
	Get    int64 `json:"get"`    // GetObject
	Head   int64 `json:"head"`   // HeadObject
	List   int64 `json:"list"`   // ListObjectsV2, and any GET of a bucket
	Delete int64 `json:"delete"` // DeleteObjects (one request for up to 1,000 objects), DeleteObject
	Other  int64 `json:"other"`
	L0Puts int64 `json:"l0_puts"` // PUTs of level-0 files: one per upload of what was committed
	Up     int64 `json:"up"`      // bytes of the request bodies
	Down   int64 `json:"down"`    // bytes of the response bodies
	// ListDown is the bytes of the listings among them: a listing names
	// every file it finds, up to 1,000 a page.
	ListDown int64 `json:"list_down"`
}

// minus is what t counts more than before.
func (t traffic) minus(before traffic) traffic {
	return traffic{Put: t.Put - before.Put, Get: t.Get - before.Get, Head: t.Head - before.Head, List: t.List - before.List,
		Delete: t.Delete - before.Delete, Other: t.Other - before.Other, L0Puts: t.L0Puts - before.L0Puts,
		Up: t.Up - before.Up, Down: t.Down - before.Down, ListDown: t.ListDown - before.ListDown}
}

// trafficPath is where a proxy answers its counts itself, as JSON, rather
// than passing the request on: no S3 bucket's name may hold "_".
const trafficPath = "/_proxy/traffic"

// runStoreProxy is `bench storeproxy ADDR BACKEND_URL DELAY`: a proxy in
// front of the store, a process of its own so that its CPU time is
// measured apart from the benchmark's (whose children, wrk among them,
// count in its own). It counts each request and adds DELAY to it before
// passing it on; GET /_proxy/traffic answers the counts. One proxy serves
// one replicating service, so that its counts are that service's. It
// stops on SIGTERM.
func runStoreProxy(args []string) error {
	if len(args) != 3 {
		return errors.New("usage: bench storeproxy ADDR BACKEND_URL DELAY")
	}
	target, err := url.Parse(args[1])
	if err != nil || target.Scheme != "http" || target.Hostname() != "127.0.0.1" {
		return fmt.Errorf("backend %q: not http://127.0.0.1:PORT", args[1])
	}
	delay, err := time.ParseDuration(args[2])
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", args[0])
	if err != nil {
		return err
	}
	// The request's Host is left as the service sent it: its signature
	// covers it, and versitygw checks it.
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 256, IdleConnTimeout: time.Minute}
	p := &storeProxy{delay: delay, rp: rp}
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
		<-sig
		srv.Close()
	}()
	fmt.Printf("store proxy listening on http://%s\n", ln.Addr())
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// storeProxy is the handler of bench storeproxy.
type storeProxy struct {
	delay time.Duration
	rp    *httputil.ReverseProxy

	mu sync.Mutex
	t  traffic
}

// ServeHTTP answers the counts, or counts the request, waits the delay and
// passes it on.
func (p *storeProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == trafficPath {
		p.mu.Lock()
		t := p.t
		p.mu.Unlock()
		json.NewEncoder(w).Encode(t)
		return
	}
	if p.delay > 0 {
		t := time.NewTimer(p.delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	var up atomic.Int64
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = &countingBody{ReadCloser: r.Body, n: &up}
	}
	cw := &countingWriter{ResponseWriter: w}
	p.rp.ServeHTTP(cw, r)
	op := s3Operation(r)
	p.mu.Lock()
	defer p.mu.Unlock()
	*op(&p.t)++
	if r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/0000/") && !r.URL.Query().Has("partNumber") {
		p.t.L0Puts++
	}
	p.t.Up += up.Load()
	p.t.Down += cw.n
	if op(&p.t) == &p.t.List {
		p.t.ListDown += cw.n
	}
}

// s3Operation is the counter of the S3 operation r is billed as, on a
// path-style URL (/BUCKET or /BUCKET/KEY).
func s3Operation(r *http.Request) func(*traffic) *int64 {
	keyed := strings.Contains(strings.Trim(r.URL.Path, "/"), "/")
	q := r.URL.Query()
	switch {
	case r.Method == http.MethodPost && q.Has("delete"), r.Method == http.MethodDelete:
		return func(t *traffic) *int64 { return &t.Delete }
	case r.Method == http.MethodPut, r.Method == http.MethodPost:
		return func(t *traffic) *int64 { return &t.Put }
	case r.Method == http.MethodHead:
		return func(t *traffic) *int64 { return &t.Head }
	case r.Method == http.MethodGet && keyed:
		return func(t *traffic) *int64 { return &t.Get }
	case r.Method == http.MethodGet:
		return func(t *traffic) *int64 { return &t.List }
	}
	return func(t *traffic) *int64 { return &t.Other }
}

// countingProxy is a bench storeproxy the run started.
type countingProxy struct {
	proc *process
	url  string
}

// traffic is what the proxy has counted so far.
func (p *countingProxy) traffic(ctx context.Context) (traffic, error) {
	var t traffic
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", p.url+trafficPath, nil)
	if err != nil {
		return t, err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return t, fmt.Errorf("read the proxy's counts: %w", err)
	}
	defer res.Body.Close()
	if err := json.NewDecoder(res.Body).Decode(&t); err != nil {
		return t, fmt.Errorf("read the proxy's counts: %w", err)
	}
	return t, nil
}

// pids is the proxy's process, whose CPU time is measured.
func (p *countingProxy) pids() []int { return []int{p.proc.cmd.Process.Pid} }

// countingBody counts the bytes read from a request's body.
type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

// Read reads and counts.
func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// countingWriter counts the bytes of a response's body.
type countingWriter struct {
	http.ResponseWriter
	n int64
}

// Write writes and counts.
func (w *countingWriter) Write(p []byte) (int, error) {
	n, err := w.ResponseWriter.Write(p)
	w.n += int64(n)
	return n, err
}

// Unwrap lets the reverse proxy flush the response it copies.
func (w *countingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// levelNames names the groups of a replica's listing, in the report's
// order.
func levelNames(l replicaListing) []string {
	names := make([]string, 0, len(l))
	for name := range l {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// levelName says what a group of the listing is.
func levelName(group string) string {
	switch group {
	case "0009":
		return "snapshots (level 9)"
	case "lock.json":
		return "the lease (lock.json)"
	}
	if len(group) == 4 && strings.Trim(group, "0123456789abcdef") == "" {
		return "level " + strings.TrimLeft(group[:3], "0") + group[3:]
	}
	return group
}
