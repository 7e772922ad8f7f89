// Command eppclient is the Gateway stand-in of test/node's InferencePool
// spec, run in a pod: for each request it plays Envoy towards the
// endpoint's picker over the Endpoint Picker Protocol (ext_proc v3,
// FULL_DUPLEX_STREAMED, mutual TLS), forwards the request to the vLLM pod
// the picker names, and streams the response back through the picker. Each
// prompt goes twice; the repeat must reach the same pod, where its prefix
// is cached. It prints one line per request and exits 0 when every request
// got a 200 and every repeat stayed, 1 otherwise.
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/warmroute/warmroute/sidecar/router/epp"
)

func main() {
	picker := flag.String("picker", "", "picker address (the endpoint's -epp Service, port 9002)")
	serverName := flag.String("server-name", "", "name the picker's certificate must carry")
	tlsDir := flag.String("tls-dir", "", "directory with ca.crt and, unless -no-client-cert, tls.crt and tls.key")
	noClientCert := flag.Bool("no-client-cert", false, "present no client certificate (the picker must refuse)")
	model := flag.String("model", "", "model name")
	prompts := flag.Int("prompts", 3, "distinct prompts, each sent twice")
	flag.Parse()
	if *picker == "" || *model == "" || *tlsDir == "" {
		fmt.Fprintln(os.Stderr, "eppclient: -picker, -model and -tls-dir are required")
		os.Exit(2)
	}
	if err := run(*picker, *serverName, *tlsDir, *noClientCert, *model, *prompts); err != nil {
		fmt.Println("FAILED:", err)
		os.Exit(1)
	}
	fmt.Println("OK")
}

func run(picker, serverName, tlsDir string, noClientCert bool, model string, prompts int) error {
	ca, err := os.ReadFile(tlsDir + "/ca.crt")
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		return errors.New("ca.crt holds no certificate")
	}
	cfg := &tls.Config{RootCAs: roots, ServerName: serverName, MinVersion: tls.VersionTLS12}
	if !noClientCert {
		cert, err := tls.LoadX509KeyPair(tlsDir+"/tls.crt", tlsDir+"/tls.key")
		if err != nil {
			return err
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	cc, err := grpc.NewClient(picker, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		return err
	}
	defer func() { _ = cc.Close() }()
	processor := extprocv3.NewExternalProcessorClient(cc)
	chosen := map[int]string{}
	for i := range 2 * prompts {
		p := i % prompts
		body := fmt.Sprintf(`{"model":%q,"max_tokens":8,"messages":[{"role":"system","content":"You are the support bot of a bicycle shop; answer briefly. %s"},{"role":"user","content":"question %d"}]}`,
			model, strings.Repeat("Policies and opening hours follow. ", 40), p)
		dest, status, err := throughGateway(processor, []byte(body))
		// kube-proxy refuses connections to a Service until it has
		// programmed its endpoints; a Gateway keeps retrying its picker.
		for deadline := time.Now().Add(30 * time.Second); err != nil && strings.Contains(err.Error(), "connection refused") && time.Now().Before(deadline); {
			fmt.Printf("request %d: %v; retrying\n", i, err)
			time.Sleep(time.Second)
			dest, status, err = throughGateway(processor, []byte(body))
		}
		if err != nil {
			return fmt.Errorf("request %d: %w", i, err)
		}
		fmt.Printf("request %d (prompt %d): picked %s, status %d\n", i, p, dest, status)
		if status != http.StatusOK {
			return fmt.Errorf("request %d: status %d", i, status)
		}
		if first, ok := chosen[p]; ok && first != dest {
			return fmt.Errorf("the repeat of prompt %d went to %s, its first to %s", p, dest, first)
		}
		chosen[p] = dest
	}
	return nil
}

// throughGateway sends one chat request's headers and body to the picker,
// forwards the body the picker returns to the pod it names, and streams
// the response through the picker.
func throughGateway(processor extprocv3.ExternalProcessorClient, body []byte) (string, int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := processor.Process(ctx)
	if err != nil {
		return "", 0, fmt.Errorf("open the ext_proc stream: %w", err)
	}
	header := func(k, v string) *corev3.HeaderValue { return &corev3.HeaderValue{Key: k, RawValue: []byte(v)} }
	if err := stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{header(":method", "POST"), header(":path", "/v1/chat/completions"),
			header("content-type", "application/json"), header("content-length", strconv.Itoa(len(body)))}}}}}); err != nil {
		return "", 0, fmt.Errorf("send headers: %w", err)
	}
	if err := stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: body, EndOfStream: true}}}); err != nil {
		return "", 0, fmt.Errorf("send body: %w", err)
	}
	resp, err := stream.Recv()
	if err != nil {
		return "", 0, fmt.Errorf("receive the header mutation: %w", err)
	}
	if ir := resp.GetImmediateResponse(); ir != nil {
		return "", 0, fmt.Errorf("the picker answered itself: %v", ir)
	}
	fwd := http.Header{"Content-Type": {"application/json"}}
	mut := resp.GetRequestHeaders().GetResponse().GetHeaderMutation()
	for _, k := range mut.GetRemoveHeaders() {
		fwd.Del(k)
	}
	var dest string
	for _, h := range mut.GetSetHeaders() {
		fwd.Set(h.GetHeader().GetKey(), string(h.GetHeader().GetRawValue()))
		if h.GetHeader().GetKey() == epp.DestinationHeader {
			dest = string(h.GetHeader().GetRawValue())
		}
	}
	if dest == "" {
		return "", 0, fmt.Errorf("no %s header", epp.DestinationHeader)
	}
	var sent []byte
	for {
		resp, err := stream.Recv()
		if err != nil {
			return "", 0, fmt.Errorf("receive the request body: %w", err)
		}
		piece := resp.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		if piece == nil {
			return "", 0, fmt.Errorf("expected a request body piece, got %v", resp)
		}
		sent = append(sent, piece.GetBody()...)
		if piece.GetEndOfStream() {
			break
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+dest+"/v1/chat/completions", bytes.NewReader(sent))
	if err != nil {
		return "", 0, err
	}
	req.Header = fwd
	hr, err := http.DefaultClient.Do(req)
	if err != nil {
		return dest, 0, fmt.Errorf("forward to %s: %w", dest, err)
	}
	defer hr.Body.Close()
	out, err := io.ReadAll(hr.Body)
	if err != nil {
		return dest, 0, err
	}
	if err := stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{header(":status", strconv.Itoa(hr.StatusCode))}}}}}); err != nil {
		return dest, 0, err
	}
	if _, err := stream.Recv(); err != nil {
		return dest, 0, err
	}
	if err := stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocv3.HttpBody{Body: out, EndOfStream: true}}}); err != nil {
		return dest, 0, err
	}
	if resp, err = stream.Recv(); err != nil {
		return dest, 0, err
	}
	if back := resp.GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse().GetBody(); !bytes.Contains(back, []byte(`"choices"`)) {
		return dest, 0, fmt.Errorf("the response through the picker has no choices: %.200s", back)
	}
	if err := stream.CloseSend(); err != nil {
		return dest, 0, err
	}
	if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
		return dest, 0, fmt.Errorf("the stream did not end: %w", err)
	}
	return dest, hr.StatusCode, nil
}
