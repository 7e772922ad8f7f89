/*
Copyright 2026 The warmroute Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package loraagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	routing "github.com/warmroute/warmroute/api/routing/v1alpha1"
	v1alpha1 "github.com/warmroute/warmroute/api/v1alpha1"
)

// The keys of a credentials Secret, named as the AWS tools name them.
const (
	keyAccessKeyID     = "AWS_ACCESS_KEY_ID"
	keySecretAccessKey = "AWS_SECRET_ACCESS_KEY"
	keySessionToken    = "AWS_SESSION_TOKEN"
)

// sourceFile records, inside an adapter's directory, which source it was
// downloaded from: a directory whose record matches is complete and reused.
const sourceFile = ".warmroute-source"

// fetchTimeout bounds one adapter's download: LoRA adapters are tens of
// megabytes to a few gigabytes, minutes at the slowest links object
// stores serve; a stalled download is retried with back-off instead.
const fetchTimeout = 15 * time.Minute

// ObjectStore downloads adapters from S3 buckets into Dir, one directory
// per adapter, which vLLM then loads (the pod mounts Dir in both
// containers).
type ObjectStore struct {
	Dir string
	// Secret reads a credentials Secret of the pod's namespace.
	Secret func(ctx context.Context, name string) (map[string][]byte, error)
}

// dir is where the adapter's files go: its name, escaped, as a name may
// contain '/'.
func (o *ObjectStore) dir(adapter string) string {
	return filepath.Join(o.Dir, url.PathEscape(adapter))
}

// Fetch downloads every object under the URI's prefix into the adapter's
// directory, keeping their paths below the prefix, unless a complete
// download of the same source is there; it returns the directory.
func (o *ObjectStore) Fetch(ctx context.Context, adapter string, src v1alpha1.WeightsSource, opts *routing.S3Source) (string, error) {
	if opts == nil {
		opts = &routing.S3Source{}
	}
	uri := "s3://" + path.Join(src.Bucket, src.Path)
	record := uri + " " + opts.Endpoint + " " + opts.Region + "\n"
	dir := o.dir(adapter)
	if got, err := os.ReadFile(filepath.Join(dir, sourceFile)); err == nil && string(got) == record {
		return dir, nil
	}
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	client, err := o.client(ctx, opts)
	if err != nil {
		return "", fmt.Errorf("fetch %s: %w", uri, err)
	}
	// Into a fresh directory beside the final one, renamed into place
	// when whole: vLLM never sees half an adapter, and a crash leaves
	// nothing that looks complete.
	partial, err := os.MkdirTemp(o.Dir, ".partial-")
	if err != nil {
		return "", fmt.Errorf("fetch %s: %w", uri, err)
	}
	// Gone once renamed into place; a leftover never looks complete.
	defer func() { _ = os.RemoveAll(partial) }()
	prefix := src.Path
	if prefix != "" {
		prefix += "/"
	}
	n := 0
	for obj := range client.ListObjectsIter(ctx, src.Bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if obj.Err != nil {
			return "", fmt.Errorf("fetch %s: list: %w", uri, obj.Err)
		}
		rel := strings.TrimPrefix(obj.Key, prefix)
		if rel == "" || strings.HasSuffix(rel, "/") {
			continue // a folder marker
		}
		if !filepath.IsLocal(rel) {
			return "", fmt.Errorf("fetch %s: object %q leaves the adapter's directory", uri, obj.Key)
		}
		if err := download(ctx, client, src.Bucket, obj.Key, filepath.Join(partial, rel)); err != nil {
			return "", fmt.Errorf("fetch %s: %w", uri, err)
		}
		n++
	}
	if n == 0 {
		return "", fmt.Errorf("fetch %s: no objects under the prefix", uri)
	}
	if err := os.WriteFile(filepath.Join(partial, sourceFile), []byte(record), 0o644); err != nil {
		return "", fmt.Errorf("fetch %s: %w", uri, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return "", fmt.Errorf("fetch %s: %w", uri, err)
	}
	if err := os.Rename(partial, dir); err != nil {
		return "", fmt.Errorf("fetch %s: %w", uri, err)
	}
	return dir, nil
}

// Remove deletes an adapter's download, once vLLM no longer holds it.
func (o *ObjectStore) Remove(adapter string) error { return os.RemoveAll(o.dir(adapter)) }

// client is an S3 client for the options: AWS S3 (bucket lookup as AWS
// wants it) or, with an endpoint, an S3-compatible store addressed
// path-style, which any such store serves; the Secret's credentials, or
// none.
func (o *ObjectStore) client(ctx context.Context, opts *routing.S3Source) (*minio.Client, error) {
	host, secure, lookup := "s3.amazonaws.com", true, minio.BucketLookupAuto
	if opts.Endpoint != "" {
		u, err := url.Parse(opts.Endpoint)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return nil, fmt.Errorf("endpoint %q is not an http(s) URL", opts.Endpoint)
		}
		host, secure, lookup = u.Host, u.Scheme == "https", minio.BucketLookupPath
	}
	creds := credentials.NewStatic("", "", "", credentials.SignatureAnonymous)
	if opts.CredentialsSecret != "" {
		if o.Secret == nil {
			return nil, errors.New("no way to read credentials Secrets")
		}
		data, err := o.Secret(ctx, opts.CredentialsSecret)
		if err != nil {
			return nil, fmt.Errorf("credentials: %w", err)
		}
		id, key := string(data[keyAccessKeyID]), string(data[keySecretAccessKey])
		if id == "" || key == "" {
			return nil, fmt.Errorf("credentials: Secret %s lacks %s or %s", opts.CredentialsSecret, keyAccessKeyID, keySecretAccessKey)
		}
		creds = credentials.NewStaticV4(id, key, string(data[keySessionToken]))
	}
	region := opts.Region
	if region == "" {
		region = "us-east-1"
	}
	// One attempt per call: the agent retries a failed load with back-off.
	return minio.New(host, &minio.Options{Creds: creds, Secure: secure, Region: region, BucketLookup: lookup, MaxRetries: 1})
}

func download(ctx context.Context, client *minio.Client, bucket, key, dest string) error {
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		return err
	}
	obj, err := client.GetObject(ctx, bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return fmt.Errorf("get %s: %w", key, err)
	}
	defer func() { _ = obj.Close() }() // read only
	f, err := os.Create(dest)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, obj); err != nil {
		_ = f.Close() // the copy's error is the one to report
		return fmt.Errorf("get %s: %w", key, err)
	}
	return f.Close()
}
