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

// Package objectstore runs an S3-protocol server on loopback for tests:
// gofakes3 over memory, behind a check of the access key each request is
// signed with (gofakes3 checks none), so that a test can tell a client
// that sends the right credentials from one that sends the wrong ones.
package objectstore

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// Server is an S3-compatible store at URL.
type Server struct {
	// URL is the endpoint, http://127.0.0.1:port.
	URL     string
	backend *s3mem.Backend
	srv     *http.Server
}

// credential finds the access key of a SigV4 Authorization header.
var credential = regexp.MustCompile(`Credential=([^/]+)/`)

// Start serves on a loopback port until Close, answering 403
// AccessDenied, as S3 does, to any request not signed with accessKey.
func Start(accessKey string) (*Server, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	backend := s3mem.New()
	fake := gofakes3.New(backend).Server()
	s := &Server{URL: "http://" + l.Addr().String(), backend: backend}
	s.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if m := credential.FindStringSubmatch(r.Header.Get("Authorization")); m == nil || m[1] != accessKey {
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>`)
			return
		}
		fake.ServeHTTP(w, r)
	})}
	go func() { _ = s.srv.Serve(l) }()
	return s, nil
}

// Put stores an object, creating its bucket if need be.
func (s *Server) Put(bucket, key string, data []byte) error {
	if ok, err := s.backend.BucketExists(bucket); err != nil {
		return err
	} else if !ok {
		if err := s.backend.CreateBucket(bucket); err != nil {
			return err
		}
	}
	// What gofakes3 records for an object put through its API, and
	// answers GET with (clients refuse a GET without it).
	meta := map[string]string{"Last-Modified": time.Now().UTC().Format(http.TimeFormat)}
	_, err := s.backend.PutObject(bucket, key, meta, bytes.NewReader(data), int64(len(data)), nil)
	return err
}

// Close stops the server.
func (s *Server) Close() error { return s.srv.Close() }
