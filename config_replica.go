package main

import (
	"errors"
	"fmt"
	"net/url"
	"path"
	"strconv"
	"strings"
)

// The replica's URL, as -replicate and petstore restore -from take it.

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
