package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Test helpers: the one switch that runs the crash tests and the README's
// tour again with every service they start replicating its database, with
// -replicate-sync, to a bucket of a real S3 server (versitygw), in a
// network namespace of loopback alone. TestTheCrashTestsAndTheTourOverAReplica
// starts that run; in it, startCommand gives each database a bucket of its
// own (the same one each time the same file is served again, as after a
// crash).

// replicaVariable switches the services the tests start to replicating.
const replicaVariable = "PETSTORE_TEST_REPLICA"

// testReplica is true in the run over a replica.
var testReplica = os.Getenv(replicaVariable) != ""

// binaryVariable passes the service built outside a network namespace to
// a run inside it, which cannot fetch what a build needs, and the main
// run's build to the runs after it (builtBinaryEnv).
const binaryVariable = "PETSTORE_TEST_BINARY"

// overReplicaTests are the tests the run over a replica runs: the crash
// tests and the README's tour.
var overReplicaTests = []string{"TestSIGKILLLosesNothingAcknowledged", "TestSIGTERMAnswersEveryInFlightCreate", "TestSIGKILLKeepsTheCatalogueAndOrdersInAgreement", "TestTheREADMETourRuns"}

// replicaBuckets are, in the run over a replica, the bucket of each
// database served, by its path.
var replicaBuckets struct {
	mu     sync.Mutex
	byPath map[string]*s3Bucket
}

// replicaEnvFor returns, in the run over a replica, the variables that make
// a service started in dir with env replicate its database in sync mode,
// to its bucket; nil in any other run.
func replicaEnvFor(t *testing.T, dir string, env []string) []string {
	t.Helper()
	if !testReplica {
		return nil
	}
	db := "petstore.db"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PETSTORE_DB="); ok && v != "" {
			db = v
		}
	}
	if isPostgresURL(db) || db == memoryDB {
		return nil // replicates a SQLite file only
	}
	if !filepath.IsAbs(db) {
		db = filepath.Join(dir, db)
	}
	replicaBuckets.mu.Lock()
	defer replicaBuckets.mu.Unlock()
	if replicaBuckets.byPath == nil {
		replicaBuckets.byPath = map[string]*s3Bucket{}
	}
	b := replicaBuckets.byPath[db]
	if b == nil {
		b = sharedS3(t).newBucket(t)
		replicaBuckets.byPath[db] = b
		// Once the test's services are gone: the switch did make them
		// replicate.
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			out, err := b.Client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(b.Name), Prefix: aws.String(b.Path + "/")})
			if err != nil || len(out.Contents) == 0 {
				t.Errorf("the service on %s replicated nothing to %s (%v)", db, b.URL, err)
			}
		})
	}
	out := []string{"PETSTORE_REPLICATE=" + b.URL, "PETSTORE_REPLICATE_SYNC=true"}
	for k, v := range b.Env {
		out = append(out, k+"="+v)
	}
	return out
}

// TestTheCrashTestsAndTheTourOverAReplica runs the crash tests and the
// README's tour again, in a test binary of their own in a network
// namespace of loopback alone, with every service they start replicating
// in sync mode to versitygw: what they hold of a service (nothing
// acknowledged lost to SIGKILL, every in-flight create answered on SIGTERM,
// the catalogue and the orders agreeing, the tour's answers) holds with
// replication on, restarts after a crash included (the lease of a holder
// that died on this machine is taken at once).
func TestTheCrashTestsAndTheTourOverAReplica(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs the real binary and versitygw")
	}
	unshare, err := exec.LookPath("unshare")
	if err == nil {
		_, err = exec.LookPath("ip")
	}
	missingPart(t, "the tests over a replica (a network namespace of loopback alone: unshare, ip)", "apt-get install util-linux iproute2, and run as root", err)
	env := []string{versitygwVariable + "=" + buildVersitygw(t), binaryVariable + "=" + buildBinary(t), replicaVariable + "=1", netnsVariable + "=" + t.Name()}
	args := argsWithout("test.testlogfile", "test.coverprofile", "test.gocoverdir", "test.run", "test.skip", "test.count", "test.cpuprofile", "test.memprofile", "test.trace")
	args = append(args, "-test.run=^("+strings.Join(overReplicaTests, "|")+")$", "-test.count=1")
	cmd := exec.CommandContext(t.Context(), unshare, append([]string{unshareFlags(), "sh", "-c", `ip link set lo up && exec "$0" "$@"`, os.Args[0]}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("the crash tests and the tour over a replica: %v\n%s", err, out)
	}
}
