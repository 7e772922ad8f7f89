package picker

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// Every call of the pick API is signed with a key only this endpoint's
// router pods hold: the operator generates it once per endpoint, keeps it
// in a Secret, and mounts it in the router pods (and nowhere else). The
// signature is an HMAC-SHA256 over the method, path, caller, time and body;
// the picker refuses a call without one, with a wrong one, or older than
// maxSkew, and signs its answer over the caller's signature and the
// answer's body, so that a replica follows only its sibling's decisions.

// AuthHeader carries a call's signature: "v1 <unix ms> <hex mac> <caller>".
const AuthHeader = "X-Warmroute-Pick-Auth"

// answerHeader carries the picker's signature of its answer.
const answerHeader = "X-Warmroute-Pick-Answer"

// maxSkew is how far a call's time may be from the picker's clock: pod
// clocks in a cluster agree to well under a second, and a call takes
// milliseconds; a captured call cannot be replayed after it.
const maxSkew = 30 * time.Second

// minSecretBytes is the least key material accepted: 128 bits.
const minSecretBytes = 16

// Keys are derived from the endpoint's secret, one per use, so that the
// block-hash seed (kept out of the routing document, which anyone who can
// read ConfigMaps can read) and the signing key never coincide.
type Keys struct {
	sign []byte
	// HashSeed keys the block hashes (policy.Config.HashSeed): without
	// the secret, a hash says nothing of the text it stands for.
	HashSeed uint64
}

// DeriveKeys derives the keys from the endpoint's secret.
func DeriveKeys(secret []byte) (Keys, error) {
	if len(secret) < minSecretBytes {
		return Keys{}, fmt.Errorf("pick key: %d bytes, want at least %d", len(secret), minSecretBytes)
	}
	seed := derive(secret, "warmroute block hashes v1")
	return Keys{sign: derive(secret, "warmroute pick api v1"), HashSeed: binary.LittleEndian.Uint64(seed)}, nil
}

// LoadKeys reads the secret from a mounted file (trailing whitespace
// trimmed) and derives the keys.
func LoadKeys(path string) (Keys, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Keys{}, fmt.Errorf("read pick key: %w", err)
	}
	return DeriveKeys([]byte(strings.TrimSpace(string(b))))
}

func derive(secret []byte, label string) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(label))
	return m.Sum(nil)
}

func (k Keys) mac(parts ...[]byte) []byte {
	m := hmac.New(sha256.New, k.sign)
	for _, p := range parts {
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(p)))
		m.Write(n[:])
		m.Write(p)
	}
	return m.Sum(nil)
}

// signCall sets the signature of a call by caller with body.
func (k Keys) signCall(req *http.Request, caller string, body []byte, now time.Time) string {
	ts := strconv.FormatInt(now.UnixMilli(), 10)
	mac := hex.EncodeToString(k.mac([]byte(req.Method), []byte(req.URL.Path), []byte(caller), []byte(ts), body))
	req.Header.Set(AuthHeader, "v1 "+ts+" "+mac+" "+caller)
	return mac
}

var errUnauthenticated = errors.New("pick API call not signed with this endpoint's key")

// verifyCall checks a call's signature and returns its caller and mac.
func (k Keys) verifyCall(req *http.Request, body []byte, now time.Time) (caller, mac string, err error) {
	f := strings.SplitN(req.Header.Get(AuthHeader), " ", 4)
	if len(f) != 4 || f[0] != "v1" || f[3] == "" {
		return "", "", errUnauthenticated
	}
	ms, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return "", "", errUnauthenticated
	}
	if d := now.Sub(time.UnixMilli(ms)); d > maxSkew || d < -maxSkew {
		return "", "", fmt.Errorf("%w: signed %s from the picker's clock", errUnauthenticated, d.Round(time.Millisecond))
	}
	got, err := hex.DecodeString(f[2])
	want := k.mac([]byte(req.Method), []byte(req.URL.Path), []byte(f[3]), []byte(f[1]), body)
	if err != nil || !hmac.Equal(got, want) {
		return "", "", errUnauthenticated
	}
	return f[3], f[2], nil
}

// signAnswer signs the picker's answer to the call with mac.
func (k Keys) signAnswer(h http.Header, callMAC string, body []byte) {
	h.Set(answerHeader, hex.EncodeToString(k.mac([]byte(callMAC), body)))
}

// verifyAnswer checks that an answer comes from a holder of the key and
// answers this very call.
func (k Keys) verifyAnswer(h http.Header, callMAC string, body []byte) error {
	got, err := hex.DecodeString(h.Get(answerHeader))
	if err != nil || !hmac.Equal(got, k.mac([]byte(callMAC), body)) {
		return errors.New("pick API answer not signed with this endpoint's key")
	}
	return nil
}

// RandomKeys are keys of this process's own, for a router that decides
// alone and shares hashes with nobody.
func RandomKeys() Keys {
	secret := make([]byte, 32)
	_, _ = rand.Read(secret) // crypto/rand.Read never fails
	k, _ := DeriveKeys(secret)
	return k
}

// Zero reports whether k holds no key.
func (k Keys) Zero() bool { return len(k.sign) == 0 }
