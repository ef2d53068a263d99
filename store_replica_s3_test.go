package main

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// TestTheS3ServerTakesConditionalWrites holds the tests' S3 server
// (helpers_s3_test.go) to what replication needs of a store: a PUT with
// If-None-Match: * creates an object once and is refused 412 after, as
// the replica's lease needs; the service given -replicate on a bucket of
// the test's own uploads its commits there; a second service on the same
// replica is refused at start, naming the first; and a server of the
// test's own stops and starts again on its port and directory, for the
// tests of an outage.
func TestTheS3ServerTakesConditionalWrites(t *testing.T) {
	t.Parallel()
	if !inALoopbackNetworkWithS3(t) {
		return
	}
	bucket := sharedS3(t).newBucket(t)

	t.Run("a PUT with If-None-Match: * creates once, then gets 412", func(t *testing.T) {
		put := func(body string) error {
			_, err := bucket.Client.PutObject(t.Context(), &s3.PutObjectInput{Bucket: aws.String(bucket.Name), Key: aws.String("conditional/once"),
				Body: strings.NewReader(body), IfNoneMatch: aws.String("*")})
			return err
		}
		if err := put("first"); err != nil {
			t.Fatalf("the first PUT: %v", err)
		}
		if err := put("second"); s3Status(err) != http.StatusPreconditionFailed {
			t.Fatalf("the second PUT: %v, want status 412", err)
		}
	})

	dir := t.TempDir()
	env := maps.Clone(bucket.Env)
	env["PETSTORE_ADDR"] = "127.0.0.1:0"
	env["PETSTORE_API_KEYS"] = testKey
	t.Run("the service uploads a create to the replica", func(t *testing.T) {
		first := startRun(t, env, "-db", filepath.Join(dir, "first.db"), "-replicate", bucket.URL, "-replicate-sync")
		before := ltxFiles(bucket.keys(t))
		if len(before) == 0 {
			t.Errorf("no LTX file under %s/%s once the service started (its first sync); the keys: %q", bucket.Name, bucket.Path, bucket.keys(t))
		}
		res := doRequest(t, first.URL, "POST", "/v1/pets", `{"name":"Rex","categoryId":1}`, nil)
		if res.Status != http.StatusCreated {
			t.Fatalf("POST /v1/pets: %d %s", res.Status, res.Body)
		}
		// With -replicate-sync the 201 came once the commit was in the
		// replica: there is a new file at once.
		after := ltxFiles(bucket.keys(t))
		if !slices.ContainsFunc(after, func(k string) bool { return !slices.Contains(before, k) }) {
			t.Errorf("no new LTX file under %s/%s after the create: before %q, after %q", bucket.Name, bucket.Path, before, after)
		}

		t.Run("a second service on the same replica is refused, naming the first", func(t *testing.T) {
			err := runConfig(t, env, "-db", filepath.Join(dir, "second.db"), "-replicate", bucket.URL)
			ce, ok := errors.AsType[*configError](err)
			holder := fmt.Sprintf("process %d", os.Getpid())
			if !ok || ce.setting != settingName("replicate") || !strings.Contains(ce.problem, holder) {
				t.Fatalf("run() = %v, want a configError for %s naming %q", err, settingName("replicate"), holder)
			}
		})
	})

	t.Run("a server of the test's own stops and starts again on its port and directory", func(t *testing.T) {
		alone := startS3Alone(t)
		b := alone.newBucket(t)
		alone.stop(t)
		noRetry := func(o *s3.Options) { o.RetryMaxAttempts = 1 }
		if _, err := b.Client.HeadBucket(t.Context(), &s3.HeadBucketInput{Bucket: aws.String(b.Name)}, noRetry); err == nil || s3Status(err) != 0 {
			t.Fatalf("HeadBucket while the server is stopped: %v, want no answer", err)
		}
		alone.start(t)
		if _, err := b.Client.HeadBucket(t.Context(), &s3.HeadBucketInput{Bucket: aws.String(b.Name)}); err != nil {
			t.Fatalf("HeadBucket once started again: %v", err)
		}
	})
}

// ltxFiles are the LTX files (Litestream's changes and snapshots) among keys.
func ltxFiles(keys []string) []string {
	return slices.DeleteFunc(slices.Clone(keys), func(k string) bool { return !strings.HasSuffix(k, ".ltx") })
}
