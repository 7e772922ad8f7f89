package picker

import (
	"crypto/aes"
	"crypto/cipher"
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
	"sync/atomic"
	"time"
)

// The pick API trusts nothing but the endpoint's key, which only this
// endpoint's router pods hold (the operator's Secret). A call's header
// carries an HMAC over what identifies the call, checked before a byte of
// the body is read; calls too far from the picker's clock or seen before
// in their session are refused (replay.go). Bodies, calls and answers of
// every status, are sealed with AES-GCM under a key derived per session,
// an answer bound to its call's MAC and status, so that a replica acts on
// no answer an impostor makes. Plaintexts are padded to a size bucket, so
// an observer of the pod network learns no hashes, names or lengths.

// AuthHeader carries a call's signature: "<wire version> <session> <seq>
// <unix ms> <hex mac> <caller>".
const AuthHeader = "X-Warmroute-Pick-Auth"

// wireVersion is the first field of AuthHeader and the paths' version.
const wireVersion = "v3"

// maxSkew is how far a call's time may be from the picker's clock: pod
// clocks in a cluster agree to well under a second, and a call takes
// milliseconds. It bounds how long the picker must remember a session's
// sequence numbers (sessionTTL).
const maxSkew = 30 * time.Second

// minSecretBytes is the least key material accepted: 128 bits.
const minSecretBytes = 16

// Keys are derived from the endpoint's secret, one per use, so that the
// block-hash seed (kept out of the routing document, which anyone who can
// read ConfigMaps can read), the signing key and the sealing key never
// coincide.
type Keys struct {
	sign []byte
	// seal derives each session's AEAD key (sessionAEAD).
	seal []byte
	// HashSeed keys the block hashes (policy.Config.HashSeed): without
	// the secret, a hash says nothing of the text it stands for.
	HashSeed uint64
}

// DeriveKeys derives the keys from the endpoint's secret.
func DeriveKeys(secret []byte) (Keys, error) {
	if len(secret) < minSecretBytes {
		return Keys{}, fmt.Errorf("pick key: %d bytes, want at least %d", len(secret), minSecretBytes)
	}
	return Keys{
		sign:     derive(secret, "warmroute pick api v2 sign"),
		seal:     derive(secret, "warmroute pick api v2 seal"),
		HashSeed: binary.LittleEndian.Uint64(derive(secret, "warmroute block hashes v1")),
	}, nil
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

func derive(key []byte, label string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(label))
	return m.Sum(nil)
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

// sessionID names one process's calls: random, so that two processes
// (a replica and its restarted self, under the same pod name) never share
// a sequence, nor a sealing key and nonce.
type sessionID [16]byte

// session is a caller's side of its calls: its id, the AEAD keyed for it,
// and the sequence numbering its calls (never 0, never reused).
type session struct {
	id   sessionID
	aead cipher.AEAD
	seq  atomic.Uint64
}

func (k Keys) newSession() *session {
	s := &session{}
	_, _ = rand.Read(s.id[:])
	s.aead = k.sessionAEAD(s.id)
	return s
}

// sessionAEAD is AES-256-GCM under a key derived for the session: nonces
// are the direction and the call's sequence number, unique per key.
func (k Keys) sessionAEAD(id sessionID) cipher.AEAD {
	block, err := aes.NewCipher(derive(k.seal, string(id[:])))
	if err != nil {
		panic(err) // a 32-byte key is always valid
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		panic(err)
	}
	return aead
}

// Directions, the first byte of a nonce: a call and its answer share the
// sequence number.
const (
	dirCall   byte = 1
	dirAnswer byte = 2
)

func nonce(dir byte, seq uint64) []byte {
	var n [12]byte
	n[0] = dir
	binary.LittleEndian.PutUint64(n[4:], seq)
	return n[:]
}

// call is an authenticated call: what its AuthHeader says, and once
// accepted, the caller's session and the opened body.
type call struct {
	caller  string
	session sessionID
	seq     uint64
	at      time.Time
	// mac is the header's MAC, the additional data of the body and of
	// the answer.
	mac  []byte
	peer *peer
	body []byte
}

func (k Keys) callMAC(method, path, caller string, id sessionID, seq uint64, ms string, length int64) []byte {
	m := hmac.New(sha256.New, k.sign)
	for _, p := range [][]byte{[]byte(method), []byte(path), []byte(caller), id[:],
		binary.LittleEndian.AppendUint64(nil, seq), []byte(ms), binary.LittleEndian.AppendUint64(nil, uint64(length))} {
		m.Write(binary.LittleEndian.AppendUint64(nil, uint64(len(p))))
		m.Write(p)
	}
	return m.Sum(nil)
}

// signCall signs a call by caller whose body is length bytes (sealed).
func (k Keys) signCall(req *http.Request, caller string, s *session, seq uint64, length int64, now time.Time) []byte {
	ms := strconv.FormatInt(now.UnixMilli(), 10)
	mac := k.callMAC(req.Method, req.URL.Path, caller, s.id, seq, ms, length)
	req.Header.Set(AuthHeader, wireVersion+" "+hex.EncodeToString(s.id[:])+" "+strconv.FormatUint(seq, 10)+" "+ms+" "+hex.EncodeToString(mac)+" "+caller)
	return mac
}

var errUnauthenticated = errors.New("pick API call not signed with this endpoint's key")

// verifyCall checks a call's header, before its body is read: the body's
// length is the request's Content-Length, which the MAC covers.
func (k Keys) verifyCall(req *http.Request, now time.Time) (call, error) {
	f := strings.SplitN(req.Header.Get(AuthHeader), " ", 6)
	if len(f) != 6 || f[0] != wireVersion || f[5] == "" || req.ContentLength < 0 {
		return call{}, errUnauthenticated
	}
	c := call{caller: f[5]}
	id, err := hex.DecodeString(f[1])
	if err != nil || len(id) != len(c.session) {
		return call{}, errUnauthenticated
	}
	copy(c.session[:], id)
	if c.seq, err = strconv.ParseUint(f[2], 10, 64); err != nil || c.seq == 0 {
		return call{}, errUnauthenticated
	}
	ms, err := strconv.ParseInt(f[3], 10, 64)
	if err != nil {
		return call{}, errUnauthenticated
	}
	c.at = time.UnixMilli(ms)
	if d := now.Sub(c.at); d > maxSkew || d < -maxSkew {
		return call{}, fmt.Errorf("%w: signed %s from the picker's clock", errUnauthenticated, d.Round(time.Millisecond))
	}
	got, err := hex.DecodeString(f[4])
	c.mac = k.callMAC(req.Method, req.URL.Path, c.caller, c.session, c.seq, f[3], req.ContentLength)
	if err != nil || !hmac.Equal(got, c.mac) {
		return call{}, errUnauthenticated
	}
	return c, nil
}

// answerAD is an answer's additional data: the call's MAC and the status,
// so that neither an answer to another call nor another status passes.
func answerAD(callMAC []byte, status int) []byte {
	return binary.BigEndian.AppendUint16(append([]byte(nil), callMAC...), uint16(status))
}

// Padding. A sealed body is as long as its bucket: the next power of two
// from minBucket, and past maxBucket the next multiple of it. A pick's
// size then says only its prompt's power of two, at worst twice the bytes,
// which a pick's few KB do not notice.
const (
	minBucket = 256
	maxBucket = 64 << 10
)

// padded is body with its length in front, in a buffer of its bucket's
// size, with room after it for the AEAD's tag.
func padded(body []byte, overhead int) []byte {
	n := binary.PutUvarint(make([]byte, binary.MaxVarintLen64), uint64(len(body))) + len(body)
	size := minBucket
	for size < n && size < maxBucket {
		size *= 2
	}
	if n > size {
		size = (n + maxBucket - 1) / maxBucket * maxBucket
	}
	b := make([]byte, 0, size+overhead)
	b = binary.AppendUvarint(b, uint64(len(body)))
	b = append(b, body...)
	return b[:size]
}

// unpadded is the body within an opened plaintext.
func unpadded(plain []byte) ([]byte, error) {
	n, k := binary.Uvarint(plain)
	if k <= 0 || n > uint64(len(plain)-k) {
		return nil, fmt.Errorf("%w: padding", errMalformed)
	}
	return plain[k : k+int(n)], nil
}
