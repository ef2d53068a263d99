package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/benbjohnson/litestream"
	"github.com/benbjohnson/litestream/file"
	lss3 "github.com/benbjohnson/litestream/s3"
	"github.com/superfly/ltx"
)

// Where the database is replicated to (-replicate, petstore restore -from):
// an S3-compatible bucket or a directory, named by a URL, and the Litestream
// client that reads and writes it.

// replicaTarget is a replica's place, parsed from its URL.
type replicaTarget struct {
	raw string // as given

	// s3://BUCKET/PATH?endpoint=&region=&force-path-style=
	bucket, path, endpoint, region string
	forcePathStyle                 bool

	dir string // file:///DIR
}

// s3 reports whether the replica is in an S3-compatible bucket.
func (t replicaTarget) s3() bool { return t.bucket != "" }

// String names the replica for logs and messages: its scheme, bucket or
// directory and path, and its endpoint, never anything else of its query.
func (t replicaTarget) String() string {
	if !t.s3() {
		return "file://" + t.dir
	}
	s := "s3://" + t.bucket + "/" + t.path
	if t.endpoint != "" {
		s += " (endpoint " + t.endpoint + ")"
	}
	return s
}

// parseReplicaURL reads a replica's URL: s3://BUCKET/PATH with the query
// parameters endpoint, region and force-path-style, or file:///DIR. A URL
// that carries credentials (user information, or a query parameter for a
// key) is refused: it would show in ps and in logs; the S3 client takes its
// credentials from the environment the AWS SDK reads.
func parseReplicaURL(raw string) (replicaTarget, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return replicaTarget{}, fmt.Errorf("%q is not a URL such as s3://BUCKET/PATH or file:///DIR", abbreviate(raw))
	}
	if u.User != nil {
		return replicaTarget{}, errors.New("the URL carries credentials, which would show in ps and in logs; give them in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or the AWS shared config) instead")
	}
	t := replicaTarget{raw: raw}
	switch u.Scheme {
	case "s3":
		return t, t.readS3(u)
	case "file":
		if u.Host != "" && u.Host != "localhost" || u.Path == "" || len(u.Query()) > 0 {
			return t, fmt.Errorf("%q is not a file URL of a directory, such as file:///var/lib/petstore-replica", abbreviate(raw))
		}
		t.dir = path.Clean(u.Path)
		return t, nil
	}
	return t, fmt.Errorf("%q: the replica's URL is s3://BUCKET/PATH (any S3-compatible store, with ?endpoint=) or file:///DIR", abbreviate(raw))
}

// readS3 reads an s3:// URL's bucket, path and query into t.
func (t *replicaTarget) readS3(u *url.URL) error {
	t.bucket = u.Host
	t.path = strings.Trim(path.Clean("/"+u.Path), "/")
	if t.bucket == "" || t.path == "" {
		return fmt.Errorf("%q: name a bucket and a path in it, s3://BUCKET/PATH", abbreviate(t.raw))
	}
	for name, values := range u.Query() {
		v := values[len(values)-1]
		switch name {
		case "endpoint":
			t.endpoint = v
		case "region":
			t.region = v
		case "force-path-style":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("force-path-style=%q is not true or false", abbreviate(v))
			}
			t.forcePathStyle = b
		default:
			if credentialWord(name) {
				return errors.New("the URL carries credentials, which would show in ps and in logs; give them in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or the AWS shared config) instead")
			}
			return fmt.Errorf("the query parameter %q is not one of endpoint, region, force-path-style", abbreviate(name))
		}
	}
	if t.endpoint != "" {
		e, err := url.Parse(t.endpoint)
		switch {
		case err == nil && e.User != nil:
			return errors.New("the endpoint carries credentials, which would show in ps and in logs; give them in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or the AWS shared config) instead")
		case err != nil || (e.Scheme != "http" && e.Scheme != "https") || e.Host == "":
			return fmt.Errorf("endpoint=%q is not an http or https URL of an S3-compatible store", abbreviate(t.endpoint))
		}
	}
	return nil
}

// credentialWord reports whether a query parameter's name looks like one
// that carries a credential.
func credentialWord(name string) bool {
	n := strings.ToLower(strings.NewReplacer("-", "", "_", "").Replace(name))
	for _, w := range []string{"key", "secret", "token", "password", "credential", "signature"} {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// client is the Litestream client of the replica, logging to log, its
// every call bounded in time (see boundedClient).
func (t replicaTarget) client(log *slog.Logger, timeout time.Duration) litestream.ReplicaClient {
	var c litestream.ReplicaClient
	if t.s3() {
		sc := lss3.NewReplicaClient()
		sc.Bucket, sc.Path = t.bucket, t.path
		sc.Endpoint, sc.Region, sc.ForcePathStyle = t.endpoint, t.region, t.forcePathStyle
		c = sc
	} else {
		c = file.NewReplicaClient(t.dir)
	}
	c.SetLogger(log)
	return &boundedClient{ReplicaClient: c, timeout: timeout}
}

// boundedClient bounds every call of a replica client in time. The S3
// client's own HTTP timeout is 24 hours, and an upload that hangs holds the
// replica's lock: without a bound, a store that stops answering (rather than
// refusing) would stop every later sync for as long. An upload of level 0
// (one sync's transactions) gets the replica timeout, but at least a minute,
// for a large transaction; a compaction or a snapshot, ten minutes.
type boundedClient struct {
	litestream.ReplicaClient
	timeout time.Duration
}

// bigTransfer bounds a compaction's or a snapshot's transfer.
const bigTransfer = 10 * time.Minute

// within returns ctx bounded by d.
func within(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d)
}

// Init is the client's, bounded.
func (c *boundedClient) Init(ctx context.Context) error {
	ctx, cancel := within(ctx, max(c.timeout, time.Minute))
	defer cancel()
	return c.ReplicaClient.Init(ctx)
}

// WriteLTXFile is the client's, bounded.
func (c *boundedClient) WriteLTXFile(ctx context.Context, level int, minTXID, maxTXID ltx.TXID, r io.Reader) (*ltx.FileInfo, error) {
	d := bigTransfer
	if level == 0 {
		d = max(c.timeout, time.Minute)
	}
	ctx, cancel := within(ctx, d)
	defer cancel()
	return c.ReplicaClient.WriteLTXFile(ctx, level, minTXID, maxTXID, r)
}

// DeleteLTXFiles is the client's, bounded.
func (c *boundedClient) DeleteLTXFiles(ctx context.Context, a []*ltx.FileInfo) error {
	ctx, cancel := within(ctx, bigTransfer)
	defer cancel()
	return c.ReplicaClient.DeleteLTXFiles(ctx, a)
}

// LTXFiles is the client's, its listing bounded.
func (c *boundedClient) LTXFiles(ctx context.Context, level int, seek ltx.TXID, useMetadata bool) (ltx.FileIterator, error) {
	ctx, cancel := within(ctx, bigTransfer)
	itr, err := c.ReplicaClient.LTXFiles(ctx, level, seek, useMetadata)
	if err != nil {
		cancel()
		return nil, err
	}
	return &boundedIterator{FileIterator: itr, cancel: cancel}, nil
}

// OpenLTXFile is the client's, the reading of the file bounded.
func (c *boundedClient) OpenLTXFile(ctx context.Context, level int, minTXID, maxTXID ltx.TXID, offset, size int64) (io.ReadCloser, error) {
	ctx, cancel := within(ctx, bigTransfer)
	rc, err := c.ReplicaClient.OpenLTXFile(ctx, level, minTXID, maxTXID, offset, size)
	if err != nil {
		cancel()
		return nil, err
	}
	return &boundedReader{ReadCloser: rc, cancel: cancel}, nil
}

// boundedIterator ends its listing's bound when closed.
type boundedIterator struct {
	ltx.FileIterator
	cancel context.CancelFunc
}

// Close closes the iterator and ends its bound.
func (i *boundedIterator) Close() error {
	defer i.cancel()
	return i.FileIterator.Close()
}

// boundedReader ends its reading's bound when closed.
type boundedReader struct {
	io.ReadCloser
	cancel context.CancelFunc
}

// Close closes the reader and ends its bound.
func (r *boundedReader) Close() error {
	defer r.cancel()
	return r.ReadCloser.Close()
}
