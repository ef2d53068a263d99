package main

import (
	"context"
	"io"
	"log/slog"
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

// client is the Litestream client of the replica, logging to log, its
// every call bounded in time (see boundedClient), and, with a lease, every
// write and delete fenced by it: nothing is written into the replica once
// the lease may have lapsed, whoever writes (the service's uploads, and
// Litestream's own compactions, snapshots, removals and last upload at
// close). A restore, which only reads, has no lease (nil).
func (t replicaTarget) client(log *slog.Logger, timeout time.Duration, lease replicaLease) litestream.ReplicaClient {
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
	return &boundedClient{ReplicaClient: c, timeout: timeout, lease: lease}
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
	lease   replicaLease // nil: nothing to fence
}

// fenced bounds ctx to the lease's life, and refuses a write once the
// lease may have lapsed: an upload that began under the lease must not land
// after another service may have taken the path over.
func (c *boundedClient) fenced(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc, error) {
	if c.lease == nil {
		ctx, cancel := within(ctx, d)
		return ctx, cancel, nil
	}
	until, ok := c.lease.heldUntil(time.Now())
	if !ok {
		return ctx, func() {}, errReplicaFenced
	}
	ctx, cancel := context.WithDeadline(ctx, earliest(time.Now().Add(d), until))
	return ctx, cancel, nil
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

// WriteLTXFile is the client's, bounded and fenced.
func (c *boundedClient) WriteLTXFile(ctx context.Context, level int, minTXID, maxTXID ltx.TXID, r io.Reader) (*ltx.FileInfo, error) {
	d := bigTransfer
	if level == 0 {
		d = max(c.timeout, time.Minute)
	}
	ctx, cancel, err := c.fenced(ctx, d)
	defer cancel()
	if err != nil {
		return nil, err
	}
	return c.ReplicaClient.WriteLTXFile(ctx, level, minTXID, maxTXID, r)
}

// DeleteLTXFiles is the client's, bounded and fenced.
func (c *boundedClient) DeleteLTXFiles(ctx context.Context, a []*ltx.FileInfo) error {
	ctx, cancel, err := c.fenced(ctx, bigTransfer)
	defer cancel()
	if err != nil {
		return err
	}
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

// earliest is the earlier of a and b.
func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
