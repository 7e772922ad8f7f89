// Package v1alpha1 is the routing document: the whole configuration of a
// warmroute router, written by the operator into the routing ConfigMap and
// read by every router replica (and the LoRA agent in each vLLM pod).
//
// It is the only contract between the controller and the router, so it is
// versioned, decoded strictly and validated before use: a router that cannot
// understand a document keeps serving with the last one it could.
package v1alpha1

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	kjson "sigs.k8s.io/json"
)

const (
	// APIVersion and Kind identify the document; a router refuses any other.
	APIVersion = "routing.warmroute.dev/v1alpha1"
	Kind       = "RoutingConfig"

	// ConfigMapKey is the key of the document in the routing ConfigMap.
	ConfigMapKey = "routing.json"

	// Bounds shared with the LLMEndpoint API (spec.routing.prefixAware).
	MinPrefixLength          = 1024
	MaxPrefixLength          = 65536
	DefaultPrefixLength      = 4096
	MinConcurrencyThreshold  = 1
	MaxConcurrencyThreshold  = 1024
	DefaultConcurrencyThresh = 10
)

// Strategy is how the router picks an instance for a request. It is the one
// strategy type of the project: the router's policy registers an
// implementation for each value (sidecar/router/policy), and the CRD's enum
// (api/v1alpha1 RoutingStrategy) lists the same names.
type Strategy string

const (
	StrategyRandom                   Strategy = "RANDOM"
	StrategyLeastOutstandingRequests Strategy = "LEAST_OUTSTANDING_REQUESTS"
	StrategyPrefixAware              Strategy = "PREFIX_AWARE"
)

// Strategies are the strategies a routing document may name, in the order
// messages list them.
var Strategies = []Strategy{StrategyRandom, StrategyLeastOutstandingRequests, StrategyPrefixAware}

// Valid reports whether s is one of Strategies.
func (s Strategy) Valid() bool { return slices.Contains(Strategies, s) }

// ErrUnknownStrategy says s is not one of the given strategies, naming them.
func ErrUnknownStrategy(s Strategy, known []Strategy) error {
	names := make([]string, len(known))
	for i, k := range known {
		names[i] = string(k)
	}
	return fmt.Errorf("%q is not one of %s", s, strings.Join(names, ", "))
}

// Document is the routing configuration of one LLMEndpoint.
type Document struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Endpoint is "namespace/name" of the LLMEndpoint, for logs and metrics.
	Endpoint string `json:"endpoint"`
	// Generation is the LLMEndpoint's metadata.generation this was built from.
	Generation int64 `json:"generation"`
	// Model is the served model name clients send as "model".
	Model string `json:"model"`
	// Strategy is the routing strategy.
	Strategy Strategy `json:"strategy"`
	// PrefixAware tunes the PREFIX_AWARE strategy (and the load guard).
	PrefixAware PrefixAware `json:"prefixAware"`
	// HashSeed seeds every hash, so that all router replicas agree.
	HashSeed uint64 `json:"hashSeed"`
	// Instances are the ready vLLM instances, ordered by ID: those not
	// terminating, and those terminating while they drain (Draining).
	Instances []Instance `json:"instances"`
	// Adapters are the LoRA adapters and the instances that hold them.
	Adapters []Adapter `json:"adapters,omitempty"`
	// FlowControl shares the fleet between tenants when it is full; nil:
	// no queue and no limits. A router older than the field refuses a
	// document that sets it (strict decoding) and keeps the last one it
	// could read.
	FlowControl *FlowControl `json:"flowControl,omitempty"`
}

// PrefixAware holds the prefix-aware routing parameters.
type PrefixAware struct {
	// PrefixLength is how much of a request forms its routing key: bytes of
	// the raw body on /invocations, characters of message text on the
	// OpenAI API.
	PrefixLength int `json:"prefixLength"`
	// ConcurrencyThreshold is the most in-flight requests the preferred
	// instance may have before a request overflows to another instance.
	ConcurrencyThreshold int `json:"concurrencyThreshold"`
}

// Instance is one vLLM server.
type Instance struct {
	// ID is stable for the instance's life (the pod name).
	ID string `json:"id"`
	// Address is IP:port of its HTTP server (an IP literal, never a name).
	Address string `json:"address"`
	// Weight scales its share of keys; 0 means 1.
	Weight int `json:"weight,omitempty"`
	// Draining says the instance is terminating: it takes no new keys and
	// serves the keys it holds while the routers warm their next owners,
	// until the operator removes it, before vLLM is told to stop. A router
	// older than the field refuses a document that sets it (strict
	// decoding) and keeps the last one it could read, in which the
	// instance still serves, until the document without it.
	Draining bool `json:"draining,omitempty"`
}

// Adapter is a LoRA adapter served on a subset of the instances.
type Adapter struct {
	// Name is what clients send as "model".
	Name string `json:"name"`
	// URI is where the adapter's weights come from.
	URI string `json:"uri,omitempty"`
	// S3 is how the LoRA agent reaches an s3:// URI's bucket.
	S3 *S3Source `json:"s3,omitempty"`
	// Desired are the IDs of the instances that should hold the adapter
	// (its placement); the LoRA agent on each instance loads what names it.
	Desired []string `json:"desired,omitempty"`
	// Ready are the IDs of the instances where the adapter is loaded; the
	// router sends the adapter's requests only to these.
	Ready []string `json:"ready,omitempty"`
}

// S3Source is an S3 bucket's endpoint and credentials, as the LoRA agent
// needs them (spec.loraAdapters[].s3 of the LLMEndpoint).
type S3Source struct {
	// Endpoint is the URL of an S3-compatible store; empty for AWS S3.
	Endpoint string `json:"endpoint,omitempty"`
	// Region is the bucket's region; empty for us-east-1.
	Region string `json:"region,omitempty"`
	// CredentialsSecret names a Secret in the pod's namespace with
	// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY; empty: anonymous.
	CredentialsSecret string `json:"credentialsSecret,omitempty"`
}

// Decode parses and validates a document, refusing unknown fields so that a
// typo or a newer schema is noticed instead of silently ignored. Keys match
// case-sensitively (sigs.k8s.io/json, as the API server decodes): a key
// spelled "HashSeed" is a typo to report, not the field to fill, though
// encoding/json would take it for hashSeed.
func Decode(data []byte) (*Document, error) {
	// One pass of the standard decoder finds trailing data, which a strict
	// Unmarshal would only call an invalid character.
	dec := json.NewDecoder(bytes.NewReader(data))
	var first json.RawMessage
	if err := dec.Decode(&first); err != nil {
		return nil, fmt.Errorf("decode routing document: %w", err)
	}
	if dec.More() {
		return nil, errors.New("decode routing document: trailing data after the document")
	}
	var d Document
	strict, err := kjson.UnmarshalStrict(data, &d, kjson.DisallowUnknownFields)
	if err != nil {
		return nil, fmt.Errorf("decode routing document: %w", err)
	}
	if len(strict) > 0 {
		// Each names the field's path, e.g. unknown field "instances[0].ID".
		return nil, fmt.Errorf("decode routing document: %w", errors.Join(strict...))
	}
	d.Default()
	if err := d.Validate(); err != nil {
		return nil, err
	}
	return &d, nil
}

// Encode renders the document deterministically (same content, same bytes),
// which lets the operator skip writes when nothing changed.
func (d *Document) Encode() ([]byte, error) {
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode routing document: %w", err)
	}
	return append(b, '\n'), nil
}

// Default fills zero values with the API's defaults.
func (d *Document) Default() {
	if d.Strategy == "" {
		d.Strategy = StrategyPrefixAware
	}
	if d.PrefixAware.PrefixLength == 0 {
		d.PrefixAware.PrefixLength = DefaultPrefixLength
	}
	if d.PrefixAware.ConcurrencyThreshold == 0 {
		d.PrefixAware.ConcurrencyThreshold = DefaultConcurrencyThresh
	}
}

// Validate checks the document, naming the offending field.
func (d *Document) Validate() error {
	var errs []error
	if d.APIVersion != APIVersion {
		errs = append(errs, fmt.Errorf("apiVersion: %q, want %q", d.APIVersion, APIVersion))
	}
	if d.Kind != Kind {
		errs = append(errs, fmt.Errorf("kind: %q, want %q", d.Kind, Kind))
	}
	if !d.Strategy.Valid() {
		errs = append(errs, fmt.Errorf("strategy: %w", ErrUnknownStrategy(d.Strategy, Strategies)))
	}
	if p := d.PrefixAware.PrefixLength; p < MinPrefixLength || p > MaxPrefixLength {
		errs = append(errs, fmt.Errorf("prefixAware.prefixLength: %d is outside %d..%d", p, MinPrefixLength, MaxPrefixLength))
	}
	if c := d.PrefixAware.ConcurrencyThreshold; c < MinConcurrencyThreshold || c > MaxConcurrencyThreshold {
		errs = append(errs, fmt.Errorf("prefixAware.concurrencyThreshold: %d is outside %d..%d", c, MinConcurrencyThreshold, MaxConcurrencyThreshold))
	}
	ids := make(map[string]bool, len(d.Instances))
	for i, in := range d.Instances {
		switch {
		case in.ID == "":
			errs = append(errs, fmt.Errorf("instances[%d].id: must not be empty", i))
		case ids[in.ID]:
			errs = append(errs, fmt.Errorf("instances[%d].id: duplicate %q", i, in.ID))
		}
		ids[in.ID] = true
		if err := validAddress(in.Address); err != nil {
			errs = append(errs, fmt.Errorf("instances[%d].address: %w", i, err))
		}
		if in.Weight < 0 {
			errs = append(errs, fmt.Errorf("instances[%d].weight: %d must not be negative", i, in.Weight))
		}
	}
	names := make(map[string]bool, len(d.Adapters))
	for i, a := range d.Adapters {
		switch {
		case a.Name == "":
			errs = append(errs, fmt.Errorf("adapters[%d].name: must not be empty", i))
		case a.Name == d.Model:
			errs = append(errs, fmt.Errorf("adapters[%d].name: %q is the base model's name", i, a.Name))
		case names[a.Name]:
			errs = append(errs, fmt.Errorf("adapters[%d].name: duplicate %q", i, a.Name))
		}
		names[a.Name] = true
		for j, id := range a.Ready {
			if !ids[id] {
				errs = append(errs, fmt.Errorf("adapters[%d].ready[%d]: %q is not an instance", i, j, id))
			}
		}
	}
	if d.FlowControl != nil {
		if err := d.FlowControl.Validate("flowControl"); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("invalid routing document: %w", errors.Join(errs...))
	}
	return nil
}

// validAddress accepts an IP:port literal that names one reachable host.
// Host names are refused (the router would resolve them per connection,
// and the operator writes pod IPs), and so are addresses that cannot be a
// pod's: unspecified (this host), link-local (169.254.0.0/16 holds cloud
// metadata services) and multicast. Loopback passes here; the router
// refuses it unless told otherwise, since in a pod it is the router itself.
func validAddress(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not IP:port: %w", addr, err)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("%q has no valid port", addr)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || ip.Zone() != "" {
		return fmt.Errorf("%q: the host must be an IP address literal (a pod IP), not a name", addr)
	}
	ip = ip.Unmap()
	switch {
	case ip.IsUnspecified():
		return fmt.Errorf("%q: the unspecified address names no instance", addr)
	case ip.IsLinkLocalUnicast():
		return fmt.Errorf("%q: link-local addresses (169.254.0.0/16, fe80::/10) are refused; they reach node-local services such as cloud metadata, not pods", addr)
	case ip.IsMulticast():
		return fmt.Errorf("%q: multicast addresses name no instance", addr)
	}
	return nil
}

// IsLoopbackAddress reports whether a valid instance address is on
// loopback (127.0.0.0/8, ::1).
func IsLoopbackAddress(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// InstanceWeight is the instance's weight with the default applied.
func (in Instance) InstanceWeight() int {
	if in.Weight <= 0 {
		return 1
	}
	return in.Weight
}
