package node_test

// An outside client of edgereg/1, written from wire/PROTOCOL.md alone: it
// uses quic-go and fxamacker/cbor directly, builds every frame by hand and
// checks what the document promises, section by section. It never imports
// the wire codec: a node that drifted from the document fails here even
// when edgereg's own client drifted with it.

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/qlog"
	"github.com/quic-go/quic-go/qlogwriter"

	"github.com/edgereg/edgereg/node"
	"github.com/edgereg/edgereg/node/nodetest"
	"github.com/edgereg/edgereg/wasm"
	"github.com/edgereg/edgereg/wire/pki"
)

// Message types (PROTOCOL.md section 5).
const (
	tRegister      = 1
	tUpdateTopics  = 2
	tHeartbeat     = 3
	tUnregister    = 4
	tGetRoutes     = 10
	tClusterInfo   = 11
	tTopics        = 12
	tMemberGroup   = 13
	tWatch         = 14
	tRouteEvent    = 15
	tUnwatch       = 16
	tPing          = 17
	tNodeInfo      = 18
	tDeleteTopic   = 20
	tWipeWritePerm = 21
	tAddWritePerm  = 22
	tKVPut         = 23
	tKVGet         = 24
	tKVDelete      = 25
	tKVList        = 26
	tLeases        = 27
	tPolicyPush    = 30
	tPolicyList    = 31
	tPolicyRollbk  = 32
	tPolicyRemove  = 33
	tPolicyTest    = 34
)

// Error codes (section 12).
const (
	eBadRequest    = 1
	eTooLarge      = 2
	eUnknownType   = 3
	eNotAuthorized = 4
	eNotFound      = 5
	eLeaseNotFound = 7
	eStaleEpoch    = 8
	eConflict      = 10
	eNotLeader     = 11
	eOverloaded    = 12
)

// checks counts every assertion of the outside client, so the report can
// say how many the node passed.
var outsideChecks, outsideFailed atomic.Int64

func check(t *testing.T, ok bool, format string, args ...any) bool {
	t.Helper()
	outsideChecks.Add(1)
	if !ok {
		outsideFailed.Add(1)
		t.Errorf("PROTOCOL.md: "+format, args...)
	}
	return ok
}

var canonical = func() cbor.EncMode {
	em, err := cbor.CoreDetEncOptions().EncMode()
	if err != nil {
		panic(err)
	}
	return em
}()

// strict decodes as section 3.2 says a receiver should: no duplicate keys,
// definite lengths only, no tags.
var strict = func() cbor.DecMode {
	dm, err := cbor.DecOptions{
		DupMapKey:             cbor.DupMapKeyEnforcedAPF,
		IndefLength:           cbor.IndefLengthForbidden,
		TagsMd:                cbor.TagsForbidden,
		DefaultMapType:        reflect.TypeOf(map[any]any{}),
		MaxNestedLevels:       32,
		UTF8:                  cbor.UTF8RejectInvalid,
		IntDec:                cbor.IntDecConvertNone,
		MaxArrayElements:      1 << 20,
		MaxMapPairs:           1 << 20,
		DefaultByteStringType: reflect.TypeOf([]byte(nil)),
	}.DecMode()
	if err != nil {
		panic(err)
	}
	return dm
}()

func enc(t *testing.T, v any) []byte {
	t.Helper()
	b, err := canonical.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// withLen puts the 4-byte big-endian length in front of CBOR bytes (2).
func withLen(cb []byte) []byte {
	out := make([]byte, 4, 4+len(cb))
	binary.BigEndian.PutUint32(out, uint32(len(cb)))
	return append(out, cb...)
}

// request builds a Frame map (2.1): key 1 type, key 2 id (omitted when 0),
// key 3 the body inline (omitted when nil).
func request(t *testing.T, typ, id uint64, body any) []byte {
	m := map[uint64]any{1: typ}
	if id != 0 {
		m[2] = id
	}
	if body != nil {
		m[3] = body
	}
	return withLen(enc(t, m))
}

// frame is a received Frame map.
type frame struct {
	raw    []byte // the CBOR bytes, without the length
	typ    uint64
	id     uint64
	body   cbor.RawMessage
	hasErr bool
	code   uint64
	msg    string
}

func (f frame) String() string {
	if f.hasErr {
		return fmt.Sprintf("frame{type %d id %d error %d %q}", f.typ, f.id, f.code, f.msg)
	}
	return fmt.Sprintf("frame{type %d id %d body %x}", f.typ, f.id, []byte(f.body))
}

// m decodes the body as a map of unsigned keys.
func (f frame) m(t *testing.T) map[uint64]any {
	t.Helper()
	if len(f.body) == 0 {
		return map[uint64]any{}
	}
	var v any
	if err := strict.Unmarshal(f.body, &v); err != nil {
		t.Fatalf("body of %v: %v", f, err)
	}
	return asMap(t, v)
}

func asMap(t *testing.T, v any) map[uint64]any {
	t.Helper()
	out := map[uint64]any{}
	if v == nil {
		return out
	}
	mm, ok := v.(map[any]any)
	if !ok {
		t.Fatalf("not a map: %#v", v)
	}
	for k, val := range mm {
		ku, ok := k.(uint64)
		if !ok {
			t.Fatalf("map key %#v is not an unsigned integer (section 3)", k)
		}
		out[ku] = val
	}
	return out
}

func asList(v any) []any { l, _ := v.([]any); return l }
func asU(v any) uint64   { u, _ := v.(uint64); return u }
func asS(v any) string   { s, _ := v.(string); return s }
func asI(v any) int64 {
	switch x := v.(type) {
	case uint64:
		return int64(x)
	case int64:
		return x
	}
	return 0
}

func decodeFrame(t *testing.T, cb []byte) frame {
	t.Helper()
	var mm map[uint64]cbor.RawMessage
	if err := strict.Unmarshal(cb, &mm); err != nil {
		t.Fatalf("frame from node is not a strict Frame map (3.2): %v (%x)", err, cb)
	}
	f := frame{raw: cb}
	if r, ok := mm[1]; ok {
		if err := strict.Unmarshal(r, &f.typ); err != nil {
			t.Fatalf("frame type: %v", err)
		}
	}
	if r, ok := mm[2]; ok {
		if err := strict.Unmarshal(r, &f.id); err != nil {
			t.Fatalf("frame id: %v", err)
		}
	}
	f.body = mm[3]
	if r, ok := mm[4]; ok {
		f.hasErr = true
		var e any
		if err := strict.Unmarshal(r, &e); err != nil {
			t.Fatalf("frame error: %v", err)
		}
		em := asMap(t, e)
		f.code, f.msg = asU(em[1]), asS(em[2])
	}
	return f
}

// outside is one test's node and CA.
type outside struct {
	t  *testing.T
	ca *nodetest.CA
	tn *nodetest.Node
}

func newOutside(t *testing.T, edit func(*node.Config)) *outside {
	t.Cleanup(func() { // run with -v for the running count
		t.Logf("outside client so far: %d checks, %d failed", outsideChecks.Load(), outsideFailed.Load())
	})
	ca := nodetest.NewCA(t)
	return &outside{t: t, ca: ca, tn: nodetest.Start(t, ca, edit)}
}

// tlsFor builds the client TLS config section 1 describes: TLS 1.3, ALPN
// edgereg/1, the node verified by the CA as "localhost" (1.1).
func (o *outside) tlsFor(role pki.Role, name string, groups ...string) *tls.Config {
	o.t.Helper()
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS13,
		RootCAs:    o.ca.Local().CAPool,
		ServerName: "localhost",
		NextProtos: []string{"edgereg/1"},
	}
	if role != "" {
		certPEM, keyPEM, err := o.ca.Local().Issue(role, name, groups, time.Hour)
		if err != nil {
			o.t.Fatal(err)
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			o.t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg
}

func (o *outside) dialTLS(cfg *tls.Config) (*quic.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return quic.DialAddr(ctx, o.tn.Addr(), cfg, &quic.Config{KeepAlivePeriod: 15 * time.Second, HandshakeIdleTimeout: 5 * time.Second})
}

// dial connects with a fresh certificate of role ("" for none).
func (o *outside) dial(role pki.Role, name string, groups ...string) *quic.Conn {
	o.t.Helper()
	qc, err := o.dialTLS(o.tlsFor(role, name, groups...))
	if err != nil {
		o.t.Fatalf("dial as %q: %v", role, err)
	}
	o.t.Cleanup(func() { qc.CloseWithError(0, "") })
	return qc
}

type rawStream struct {
	t      *testing.T
	s      *quic.Stream
	nextID uint64
	// early holds the pushes read while waiting for a watch's answer:
	// PROTOCOL.md 11 lets a watch's first events come before its
	// WatchAck, and nextEventFrame must still find them.
	early []frame
}

func open(t *testing.T, qc *quic.Conn) *rawStream {
	t.Helper()
	s, err := qc.OpenStream()
	if err != nil {
		t.Fatalf("open stream: %v", err)
	}
	t.Cleanup(func() { s.CancelRead(0); s.CancelWrite(0) })
	return &rawStream{t: t, s: s}
}

func (rs *rawStream) write(b []byte) error {
	rs.s.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_, err := rs.s.Write(b)
	return err
}

func (rs *rawStream) send(typ uint64, body any) uint64 {
	rs.t.Helper()
	rs.nextID++
	if err := rs.write(request(rs.t, typ, rs.nextID, body)); err != nil {
		rs.t.Fatalf("send type %d: %v", typ, err)
	}
	return rs.nextID
}

// next reads one frame; err is io.EOF on the node's FIN, a *quic.StreamError
// on a reset.
func (rs *rawStream) next(timeout time.Duration) (frame, error) {
	rs.t.Helper()
	rs.s.SetReadDeadline(time.Now().Add(timeout))
	var hdr [4]byte
	if _, err := io.ReadFull(rs.s, hdr[:]); err != nil {
		return frame{}, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n == 0 || n > 64<<20 {
		rs.t.Fatalf("node sent a frame of %d bytes (2.2: 1..64 MiB)", n)
	}
	cb := make([]byte, n)
	if _, err := io.ReadFull(rs.s, cb); err != nil {
		return frame{}, err
	}
	f := decodeFrame(rs.t, cb)
	// 3.1: edgereg encodes everything deterministically.
	var v any
	if err := strict.Unmarshal(cb, &v); err == nil {
		check(rs.t, bytes.Equal(enc(rs.t, v), cb), "3.1: node's frame %v is not in core deterministic encoding", f)
		check(rs.t, !hasNull(v), "3.1: edgereg never sends null, got %v", f)
	}
	return f, nil
}

// read reads the next non-push frame, skipping route-event pushes.
func (rs *rawStream) read() frame {
	rs.t.Helper()
	return rs.readKeeping(false)
}

// readKeeping is read that, with keep, keeps the pushes it passes for
// nextEventFrame.
func (rs *rawStream) readKeeping(keep bool) frame {
	rs.t.Helper()
	for {
		f, err := rs.next(10 * time.Second)
		if err != nil {
			rs.t.Fatalf("read: %v", err)
		}
		if f.typ == tRouteEvent && f.id == 0 {
			if keep {
				rs.early = append(rs.early, f)
			}
			continue
		}
		return f
	}
}

// call sends a request and reads its answer, checking type and id (4).
// The pushes a watch's answer comes after are kept (11).
func (rs *rawStream) call(typ uint64, body any) frame {
	rs.t.Helper()
	id := rs.send(typ, body)
	f := rs.readKeeping(typ == tWatch)
	check(rs.t, f.typ == typ && f.id == id, "4: answer to type %d id %d came as %v", typ, id, f)
	return f
}

func (rs *rawStream) ok(typ uint64, body any) frame {
	rs.t.Helper()
	f := rs.call(typ, body)
	if !check(rs.t, !f.hasErr, "type %d: want success, got %v", typ, f) {
		rs.t.FailNow()
	}
	return f
}

func (rs *rawStream) refused(what string, typ uint64, body any, code uint64) frame {
	rs.t.Helper()
	f := rs.call(typ, body)
	check(rs.t, f.hasErr && f.code == code, "%s: want code %d, got %v", what, code, f)
	check(rs.t, !f.hasErr || len(f.body) == 0, "2.1: %s: an error response carries no body: %v", what, f)
	return f
}

// alive checks the stream still answers (a ping).
func (rs *rawStream) alive(what string) {
	rs.t.Helper()
	id := rs.send(tPing, nil)
	f, err := rs.next(10 * time.Second)
	check(rs.t, err == nil && f.typ == tPing && f.id == id && !f.hasErr, "%s: stream should stay open and answer a ping, got %v, %v", what, f, err)
}

// ended reads until the stream ends and returns how: nil for a FIN, else
// the reset.
func (rs *rawStream) ended(timeout time.Duration) error {
	rs.t.Helper()
	rs.s.SetReadDeadline(time.Now().Add(timeout))
	_, err := io.Copy(io.Discard, rs.s)
	return err
}

func streamCode(err error) (quic.StreamErrorCode, bool) {
	var se *quic.StreamError
	if errors.As(err, &se) && se.Remote {
		return se.ErrorCode, true
	}
	return 0, false
}

func connCode(err error) (quic.ApplicationErrorCode, bool) {
	var ae *quic.ApplicationError
	if errors.As(err, &ae) && ae.Remote {
		return ae.ErrorCode, true
	}
	return 0, false
}

// Bodies, by the field tables of sections 7 and 8.

func topicCfg(name string) map[uint64]any {
	return map[uint64]any{1: name, 2: uint64(8), 3: uint64(8), 4: uint64(6)}
}

func registerBody(cluster, group string, id int, addr string, counter uint64, topics ...string) map[uint64]any {
	tc := []any{}
	for _, n := range topics {
		tc = append(tc, topicCfg(n))
	}
	return map[uint64]any{1: cluster, 2: group, 3: id, 4: addr, 8: map[uint64]any{1: uint64(1), 3: counter}, 9: tc}
}

func topicVersions(topics ...string) map[uint64]any {
	l := []any{}
	for _, n := range topics {
		l = append(l, map[uint64]any{1: n})
	}
	return map[uint64]any{1: l}
}

// routeVersion is section 9's version: the first 8 bytes of SHA-256 of the
// route's bytes, 0 read as 1.
func routeVersion(route []byte) uint64 {
	sum := sha256.Sum256(route)
	v := binary.BigEndian.Uint64(sum[:8])
	if v == 0 {
		v = 1
	}
	return v
}

// results returns a Routes body's results with each route's raw bytes.
type result struct {
	topic   string
	status  uint64
	version uint64
	route   []byte
}

func routeResults(t *testing.T, f frame) []result {
	t.Helper()
	var body map[uint64]cbor.RawMessage
	if err := strict.Unmarshal(f.body, &body); err != nil {
		t.Fatalf("Routes: %v", err)
	}
	var raws []cbor.RawMessage
	if err := strict.Unmarshal(body[1], &raws); err != nil {
		t.Fatalf("Routes.Results: %v", err)
	}
	out := make([]result, 0, len(raws))
	for _, r := range raws {
		out = append(out, decodeResult(t, r))
	}
	return out
}

func decodeResult(t *testing.T, r []byte) result {
	t.Helper()
	var rm map[uint64]cbor.RawMessage
	if err := strict.Unmarshal(r, &rm); err != nil {
		t.Fatalf("RouteResult: %v", err)
	}
	var res result
	if v, ok := rm[1]; ok {
		strict.Unmarshal(v, &res.topic)
	}
	if v, ok := rm[2]; ok {
		strict.Unmarshal(v, &res.status)
	}
	if v, ok := rm[3]; ok {
		strict.Unmarshal(v, &res.version)
	}
	res.route = rm[4]
	return res
}

// TestOutsideProtocol is the outside client against one node with the
// default limits.
func TestOutsideProtocol(t *testing.T) {
	o := newOutside(t, nil)

	t.Run("transport", o.transport)
	t.Run("ping", o.ping)
	t.Run("framing", o.framing)
	t.Run("decoding rules", o.decodingRules)
	t.Run("unknown types", o.unknownTypes)
	t.Run("broker session", o.brokerSession)
	t.Run("queries", o.queries)
	t.Run("watch", o.watch)
	t.Run("operator", o.operator)
	t.Run("authorization", o.authorization)
	t.Run("names", o.names)
	t.Run("key types", o.keyTypes)
}

// transport is section 1: ALPN, mutual TLS, roles, streams.
func (o *outside) transport(t *testing.T) {
	noALPN := o.tlsFor(pki.RoleClient, "no-alpn")
	noALPN.NextProtos = nil
	_, err := o.dialTLS(noALPN)
	var alpnErr *quic.TransportError
	check(t, errors.As(err, &alpnErr) && alpnErr.Remote && alpnErr.ErrorCode == 0x178,
		"1: a handshake without ALPN edgereg/1 fails with CRYPTO_ERROR 0x178 (no_application_protocol), got %v", err)
	for _, protos := range [][]string{{"edgereg/2"}, {"EDGEREG/1"}, {"edgereg/1 "}} {
		other := o.tlsFor(pki.RoleClient, "other-alpn")
		other.NextProtos = protos
		_, err = o.dialTLS(other)
		check(t, errors.As(err, &alpnErr) && alpnErr.Remote && alpnErr.ErrorCode == 0x178,
			"1: a handshake offering only %q fails with CRYPTO_ERROR 0x178, got %v", protos, err)
	}
	both := o.tlsFor(pki.RoleClient, "two-alpn")
	both.NextProtos = []string{"edgereg/2", "h3", "edgereg/1"}
	if qc, err := o.dialTLS(both); check(t, err == nil, "1/13: a client offering edgereg/1 among others is served, got %v", err) {
		check(t, qc.ConnectionState().TLS.NegotiatedProtocol == "edgereg/1", "1/13: the handshake picks edgereg/1")
		qc.CloseWithError(0, "")
	}
	// 1.1: without anonymous clients allowed, a handshake without a client
	// certificate fails. Under TLS 1.3 the client's side of the handshake
	// completes first, so the dial may succeed: the failure is the
	// connection's close with the TLS alert certificate_required.
	err = failedConn(t, o, o.tlsFor("", ""))
	var te *quic.TransportError
	check(t, errors.As(err, &te) && te.Remote && te.ErrorCode == 0x174,
		"1.1: a connection without a client certificate fails with CRYPTO_ERROR 0x174 (certificate_required), got %v", err)

	// A certificate of another CA ends the same way, with its TLS alert.
	stranger := &outside{t: t, ca: nodetest.NewCA(t), tn: o.tn}
	cfg := stranger.tlsFor(pki.RoleClient, "stranger")
	cfg.RootCAs = o.ca.Local().CAPool
	err = failedConn(t, o, cfg)
	check(t, errors.As(err, &te) && te.Remote && te.ErrorCode >= 0x100 && te.ErrorCode <= 0x1ff,
		"1.1: a certificate of another CA fails the connection with a CRYPTO_ERROR, got %v", err)
	t.Logf("another CA: %v", err)

	qc := o.dial(pki.RoleClient, "transport")
	check(t, qc.ConnectionState().TLS.Version == tls.VersionTLS13, "1: TLS 1.3 only")
	check(t, qc.ConnectionState().TLS.NegotiatedProtocol == "edgereg/1", "1: ALPN edgereg/1")
	_, err = qc.OpenUniStream()
	var limit *quic.StreamLimitReachedError
	check(t, errors.As(err, &limit), "1: a node grants no unidirectional streams, got %v", err)

	// 4.1 one-shot use: request, FIN, response, the node's FIN.
	rs := open(t, qc)
	rs.send(tPing, nil)
	rs.s.Close()
	f := rs.read()
	check(t, f.typ == tPing && !f.hasErr, "4.1: one-shot ping answered, got %v", f)
	check(t, rs.ended(10*time.Second) == nil, "4.1: after the answer the node finishes the stream")

	// 4.1: id 0 is fine, key 2 is then omitted in the answer too.
	rs = open(t, qc)
	rs.write(request(t, tPing, 0, nil))
	f = rs.read()
	check(t, f.typ == tPing && f.id == 0 && !f.hasErr, "4.1: ping with id 0 answered, got %v", f)
	_, hasID := mustRawMap(t, f.raw)[2]
	check(t, !hasID, "2.1: id 0 is omitted")

	// 4.2 pipelining: answers in order, matched by id.
	rs = open(t, qc)
	var ids []uint64
	for range 20 {
		ids = append(ids, rs.send(tPing, nil))
	}
	for _, id := range ids {
		f := rs.read()
		check(t, f.id == id, "4: answers in the order of the requests: want id %d, got %v", id, f)
	}
	// The largest id.
	rs.write(request(t, tPing, ^uint64(0), nil))
	f = rs.read()
	check(t, f.id == ^uint64(0), "2.1: 64-bit ids are echoed, got %v", f)
}

func mustRawMap(t *testing.T, cb []byte) map[uint64]cbor.RawMessage {
	t.Helper()
	var mm map[uint64]cbor.RawMessage
	if err := strict.Unmarshal(cb, &mm); err != nil {
		t.Fatal(err)
	}
	return mm
}

// ping is 8.11.
func (o *outside) ping(t *testing.T) {
	rs := open(t, o.dial(pki.RoleClient, "ping"))
	f := rs.ok(tPing, nil)
	p := f.m(t)
	check(t, asS(p[1]) != "", "8.11: Pong.NodeID is set, got %v", p)
	check(t, asI(p[2]) > 0, "8.11: Pong.StartedMs is set, got %v", p)
	_, warming := p[3]
	check(t, !warming, "8.11: warm-up is off here, so WarmingUp is omitted, got %v", p)
	// A Ping body with padding is ignored (8.11), as any body of a type
	// that takes none (5), even one with a duplicate key.
	f = rs.ok(tPing, map[uint64]any{1: make([]byte, 32)})
	check(t, asS(f.m(t)[1]) == asS(p[1]), "8.11: padded ping answered by the same node")
	dup := withLen(append([]byte{0xa3, 0x01, 0x11, 0x02, 0x18, 0x63, 0x03}, 0xa2, 0x01, 0x01, 0x01, 0x02))
	rs.write(dup)
	f = rs.read()
	check(t, f.typ == tPing && f.id == 0x63 && !f.hasErr, "5: a duplicate key inside the body of a type that takes none is not looked for, got %v", f)
	// The test vector of 14.1.
	rs.write(mustHex(t, "00000005a20111020b"))
	f = rs.read()
	check(t, f.typ == tPing && f.id == 11 && !f.hasErr, "14.1: the vector ping is answered, got %v", f)
}

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b := make([]byte, len(s)/2)
	for i := range b {
		fmt.Sscanf(s[2*i:2*i+2], "%02x", &b[i])
	}
	return b
}

// framing is sections 2, 2.2 and 4.4.
func (o *outside) framing(t *testing.T) {
	qc := o.dial(pki.RoleClient, "framing")

	// Zero length: code 1 "empty frame", type 0 id 0, stream closed.
	rs := open(t, qc)
	rs.write([]byte{0, 0, 0, 0})
	f := rs.read()
	check(t, f.hasErr && f.code == eBadRequest && f.msg == "empty frame" && f.typ == 0 && f.id == 0, "2.2: zero-length frame, got %v", f)
	check(t, rs.ended(10*time.Second) == nil, "2.2: after an empty frame the node finishes its send side")
	checkStopSending(t, rs, "2.2 empty frame")

	// Over the reader limit: code 2 with the documented message.
	rs = open(t, qc)
	rs.write([]byte{0x00, 0x10, 0x00, 0x01})
	f = rs.read()
	want := "frame of 1048577 bytes exceeds limit 1048576"
	check(t, f.hasErr && f.code == eTooLarge && f.msg == want && f.typ == 0 && f.id == 0, "2.2: oversize client frame: want code 2 %q, got %v", want, f)
	check(t, rs.ended(10*time.Second) == nil, "2.2: after a frame too large the node finishes its send side")
	checkStopSending(t, rs, "2.2 frame too large")

	// Exactly at the limit is allowed: the node waits for the body (it
	// must not answer code 2). A ping padded to exactly 1 MiB.
	rs = open(t, qc)
	pad := 1<<20 - 11 // map(2)+type+key 3+map(1)+key 1+bstr header 5 bytes
	body := enc(t, map[uint64]any{1: uint64(tPing), 3: map[uint64]any{1: make([]byte, pad)}})
	if len(body) != 1<<20 {
		pad -= len(body) - 1<<20
		body = enc(t, map[uint64]any{1: uint64(tPing), 3: map[uint64]any{1: make([]byte, pad)}})
	}
	rs.write(withLen(body))
	f = rs.read()
	check(t, len(body) == 1<<20 && f.typ == tPing && !f.hasErr, "2.2: a frame of exactly 1 MiB is within the limit, got %v (len %d)", f, len(body))

	// Broker and operator connections have 16 MiB, node connections 1 MiB.
	for _, c := range []struct {
		role  pki.Role
		name  string
		frame []byte
		want  string
	}{
		{pki.RoleBroker, "framing-broker", []byte{0x01, 0x00, 0x00, 0x01}, "frame of 16777217 bytes exceeds limit 16777216"},
		{pki.RoleOperator, "framing-operator", []byte{0x01, 0x00, 0x00, 0x01}, "frame of 16777217 bytes exceeds limit 16777216"},
		{pki.RoleNode, "framing-node.example", []byte{0x00, 0x10, 0x00, 0x01}, "frame of 1048577 bytes exceeds limit 1048576"},
		{pki.RoleBroker, "framing-broker-hard", []byte{0x04, 0x00, 0x00, 0x01}, "frame of 67108865 bytes exceeds limit 16777216"},
	} {
		bs := open(t, o.dial(c.role, c.name))
		bs.write(c.frame)
		f = bs.read()
		check(t, f.hasErr && f.code == eTooLarge && f.msg == c.want && f.typ == 0 && f.id == 0, "2.2: oversize %s frame: want %q, got %v", c.role, c.want, f)
	}

	// Undecodable Frame map: code 1, type 0 id 0, stream stays open.
	for name, cb := range map[string][]byte{
		"not a map":            {0x82, 0x01, 0x02},
		"truncated":            {0xa2, 0x01, 0x11, 0x02},
		"trailing bytes":       {0xa1, 0x01, 0x11, 0x00},
		"duplicate frame key":  {0xa3, 0x01, 0x11, 0x02, 0x01, 0x01, 0x11},
		"dup key, wider form":  {0xa2, 0x01, 0x11, 0x18, 0x01, 0x11},
		"type is text":         {0xa1, 0x01, 0x61, 0x61},
		"type over 65535":      {0xa1, 0x01, 0x1a, 0x00, 0x01, 0x00, 0x00},
		"negative id":          {0xa2, 0x01, 0x11, 0x02, 0x20},
		"tag on the frame":     {0xc0, 0xa1, 0x01, 0x11},
		"indefinite map":       {0xbf, 0x01, 0x11, 0xff},
		"reserved info 28":     {0xa1, 0x01, 0x1c},
		"tag in unknown key":   {0xa2, 0x01, 0x11, 0x09, 0xc1, 0x00},
		"indefinite in body":   {0xa2, 0x01, 0x11, 0x03, 0x5f, 0x41, 0x00, 0xff},
		"tag inside ping body": {0xa2, 0x01, 0x11, 0x03, 0xa1, 0x01, 0xc2, 0x40},
		"float type":           {0xa1, 0x01, 0xf9, 0x4c, 0x40},
		"bool type":            {0xa1, 0x01, 0xf5},
	} {
		rs := open(t, qc)
		rs.write(withLen(cb))
		f, err := rs.next(10 * time.Second)
		check(t, err == nil && f.hasErr && f.code == eBadRequest && f.typ == 0 && f.id == 0, "2.2/4.4: %s: want code 1 type 0 id 0, got %v %v", name, f, err)
		rs.alive("2.2/4.4 " + name)
	}

	// 2: a frame not sent in full within the read timeout is reset; tested
	// with short timeouts in TestOutsideTimeouts.
}

// checkStopSending checks the node stopped reading after closing a stream
// on a framing error (2.2: it stops reading with STOP_SENDING).
func checkStopSending(t *testing.T, rs *rawStream, what string) {
	t.Helper()
	var err error
	for range 100 {
		if err = rs.write(make([]byte, 1024)); err != nil {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	code, ok := streamCode(err)
	check(t, ok && code == 0x21, "1.2/%s: the node stops reading with STOP_SENDING 0x21, got %v", what, err)
}

// decodingRules is 3.2 applied to bodies: refused with the request's type
// and id, the stream open.
func (o *outside) decodingRules(t *testing.T) {
	qc := o.dial(pki.RoleClient, "rules")
	rs := open(t, qc)
	frameWith := func(typ byte, id byte, body ...byte) []byte {
		return withLen(append([]byte{0xa3, 0x01, typ, 0x02, 0x18, id, 0x03}, body...))
	}
	topicTV := []byte{0xa1, 0x01, 0x61, 0x61} // {1: "a"}
	for name, body := range map[string][]byte{
		"duplicate body key":     append([]byte{0xa2, 0x01, 0x81}, append(topicTV, 0x01, 0x81, 0xa1, 0x01, 0x61, 0x62)...),
		"dup TopicVersion key":   {0xa1, 0x01, 0x81, 0xa2, 0x01, 0x61, 0x61, 0x01, 0x61, 0x62},
		"dup key in unknown key": append([]byte{0xa2, 0x01, 0x81}, append(topicTV, 0x09, 0xa2, 0x00, 0x00, 0x00, 0x00)...),
		"topics is a map":        {0xa1, 0x01, 0xa0},
		"topic name is bytes":    {0xa1, 0x01, 0x81, 0xa1, 0x01, 0x41, 0x61},
		"invalid utf-8":          {0xa1, 0x01, 0x81, 0xa1, 0x01, 0x62, 0xc3, 0x28},
		"encoded surrogate":      {0xa1, 0x01, 0x81, 0xa1, 0x01, 0x63, 0xed, 0xa0, 0x80},
		"negative version":       {0xa1, 0x01, 0x81, 0xa2, 0x01, 0x61, 0x61, 0x02, 0x20},
		"float version":          {0xa1, 0x01, 0x81, 0xa2, 0x01, 0x61, 0x61, 0x02, 0xf9, 0x3c, 0x00},
		"no topics":              {0xa1, 0x01, 0x80},
		"invalid topic name":     {0xa1, 0x01, 0x81, 0xa1, 0x01, 0x61, 0x2f},
		"body is not a map":      {0x81, 0x01},
		"labels value not text":  append([]byte{0xa2, 0x01, 0x81}, append(topicTV, 0x02, 0xa1, 0x02, 0xa1, 0x61, 0x61, 0x01)...),
	} {
		rs.write(frameWith(tGetRoutes, 0x42, body...))
		f := rs.read()
		check(t, f.hasErr && f.code == eBadRequest && f.typ == tGetRoutes && f.id == 0x42, "3.2: %s: want code 1 with type 10 id 0x42, got %v", name, f)
	}
	rs.alive("3.2 bad bodies")

	// Nesting over 16: the Frame is level 1, the body 2; 15 more arrays
	// inside an unknown key of the body reach 17.
	deep := []byte{0xa2, 0x01, 0x81}
	deep = append(deep, topicTV...)
	deep = append(deep, 0x09)
	for range 15 {
		deep = append(deep, 0x81)
	}
	deep = append(deep, 0x00)
	rs.write(frameWith(tGetRoutes, 0x43, deep...))
	f := rs.read()
	check(t, f.hasErr && f.code == eBadRequest, "3.2: nesting 17 is refused, got %v", f)
	// Nesting 16 is fine: one level less.
	ok16 := []byte{0xa2, 0x01, 0x81}
	ok16 = append(ok16, topicTV...)
	ok16 = append(ok16, 0x09)
	for range 14 {
		ok16 = append(ok16, 0x81)
	}
	ok16 = append(ok16, 0x00)
	rs.write(frameWith(tGetRoutes, 0x44, ok16...))
	f = rs.read()
	check(t, !f.hasErr && f.id == 0x44, "3.2: nesting 16 is accepted, got %v", f)
	// Null for any field is the zero value (3.1): Client null.
	rs.write(frameWith(tGetRoutes, 0x45, append([]byte{0xa2, 0x01, 0x81}, append(topicTV, 0x02, 0xf6)...)...))
	f = rs.read()
	check(t, !f.hasErr && f.id == 0x45, "3.1: null is accepted as the zero value, got %v", f)
	// Unknown keys are ignored.
	rs.write(frameWith(tGetRoutes, 0x46, append([]byte{0xa2, 0x01, 0x81}, append(topicTV, 0x18, 0x63, 0x63, 0x61, 0x62, 0x63)...)...))
	f = rs.read()
	check(t, !f.hasErr && f.id == 0x46, "3.1: unknown keys are ignored, got %v", f)
	// An unknown key in the Frame map is ignored too.
	rs.write(withLen([]byte{0xa3, 0x01, 0x11, 0x02, 0x18, 0x47, 0x18, 0x20, 0x00}))
	f = rs.read()
	check(t, !f.hasErr && f.id == 0x47, "3.1: unknown Frame key ignored, got %v", f)
	// Topics per request: 10,000 is the cap, 10,001 code 1.
	many := func(n int) map[uint64]any {
		l := make([]any, n)
		for i := range l {
			l[i] = map[uint64]any{1: "a"}
		}
		return map[uint64]any{1: l}
	}
	f = rs.call(tGetRoutes, many(10_000))
	check(t, !f.hasErr && len(routeResults(t, f)) == 10_000, "8.5: 10,000 topics are answered, got %v", f.hasErr)
	rs.refused("8.5: 10,001 topics", tGetRoutes, many(10_001), eBadRequest)
	rs.alive("after the topic cap")
}

// unknownTypes is 5 and 13: code 3 with type and id, the stream open.
func (o *outside) unknownTypes(t *testing.T) {
	rs := open(t, o.dial(pki.RoleOperator, "types"))
	for _, typ := range []uint64{0, 5, 9, 15, 19, 28, 29, 35, 1000, 65535} {
		rs.refused(fmt.Sprintf("5: type %d", typ), typ, nil, eUnknownType)
	}
	rs.alive("after unknown types")
}

// brokerSession is section 10 and 8.1-8.4.
func (o *outside) brokerSession(t *testing.T) {
	bs := open(t, o.dial(pki.RoleBroker, "broker-a", "sess-a", "sess-b"))
	f := bs.ok(tRegister, registerBody("sess", "sess-a", 0, "10.1.0.1:10911", 1, "SessTopic", "SessOther"))
	ack := f.m(t)
	lease := asMap(t, ack[1])
	epoch := asU(lease[1])
	check(t, epoch != 0, "8.1: RegisterAck.Lease.Epoch set, got %v", ack)
	check(t, asI(lease[2]) > time.Now().UnixMilli(), "8.1: DeadlineMs in the future, got %v", lease)
	check(t, asU(lease[4]) == 30_000, "8.1: LeaseAck.HeartbeatIntervalMs is the node's 30 s, got %v", lease)
	check(t, asU(lease[5]) == 120_000, "8.1: LeaseAck.ThresholdMs is the default 120 s, got %v", lease)

	f = bs.ok(tRegister, registerBody("sess", "sess-a", 0, "10.1.0.1:10911", 1, "SessTopic", "SessOther"))
	epoch2 := asU(asMap(t, f.m(t)[1])[1])
	check(t, epoch2 != epoch, "10: every registration gets a new epoch (%d, %d)", epoch, epoch2)

	hb := func(ep uint64, counter uint64) map[uint64]any {
		return map[uint64]any{1: "sess", 2: "10.1.0.1:10911", 3: ep, 4: map[uint64]any{1: uint64(1), 3: counter}}
	}
	f = bs.ok(tHeartbeat, hb(epoch2, 1))
	_, vc := f.m(t)[3]
	check(t, !vc, "8.1: heartbeat with the held data version: no VersionChanged, got %v", f.m(t))
	f = bs.ok(tHeartbeat, hb(epoch2, 99))
	check(t, f.m(t)[3] == true, "10: heartbeat with another data version: VersionChanged, got %v", f.m(t))
	bs.refused("10: heartbeat with an old epoch", tHeartbeat, hb(epoch, 1), eStaleEpoch)
	bs.refused("10: heartbeat without a lease", tHeartbeat, map[uint64]any{1: "sess", 2: "10.9.9.9:1", 3: epoch2, 4: map[uint64]any{}}, eLeaseNotFound)

	// update-topics
	up := map[uint64]any{1: "sess", 2: "10.1.0.1:10911", 3: epoch2, 4: map[uint64]any{1: uint64(1), 3: uint64(2)},
		5: []any{topicCfg("SessNew")}, 6: []any{"SessOther"}}
	f = bs.ok(tUpdateTopics, up)
	check(t, asU(f.m(t)[1]) == epoch2, "8.2: update-topics answers a LeaseAck of the same epoch, got %v", f.m(t))
	up[3] = epoch
	bs.refused("10: update-topics with an old epoch", tUpdateTopics, up, eStaleEpoch)

	// A slave's update-topics: code 11.
	f = bs.ok(tRegister, registerBody("sess", "sess-a", 1, "10.1.0.2:10911", 1, "SessTopic"))
	sack := f.m(t)
	check(t, asS(sack[2]) == "10.1.0.1:10911", "8.1: a slave learns MasterAddr, got %v", sack)
	sepoch := asU(asMap(t, sack[1])[1])
	bs.refused("10: update-topics from a slave", tUpdateTopics, map[uint64]any{1: "sess", 2: "10.1.0.2:10911", 3: sepoch,
		4: map[uint64]any{3: uint64(5)}, 5: []any{topicCfg("SlaveTopic")}}, eNotLeader)

	// The group in another cluster: conflict.
	bs.refused("10: a group in another cluster", tRegister, registerBody("other", "sess-a", 0, "10.1.0.9:10911", 1, "X"), eConflict)
	// A negative broker id is refused.
	bs.refused("8.1: a negative BrokerID", tRegister, registerBody("sess", "sess-b", -1, "10.1.0.5:10911", 1, "X"), eBadRequest)
	// Invalid names.
	bs.refused("8: an empty broker name", tRegister, registerBody("sess", "", 0, "10.1.0.5:10911", 1, "X"), eBadRequest)
	bs.refused("8: an address without a port", tRegister, registerBody("sess", "sess-b", 0, "10.1.0.5", 1, "X"), eBadRequest)
	bs.refused("7.2: an invalid topic name", tRegister, registerBody("sess", "sess-b", 0, "10.1.0.5:10911", 1, "bad/topic"), eBadRequest)
	bs.refused("7.2: a topic name of 128 characters", tRegister, registerBody("sess", "sess-b", 0, "10.1.0.5:10911", 1, strings.Repeat("a", 128)), eBadRequest)
	bs.refused("8: a name of 256 bytes", tRegister, registerBody(strings.Repeat("c", 256), "sess-b", 0, "10.1.0.5:10911", 1, "X"), eBadRequest)
	bs.refused("3.2: Perm 256 for a uint8", tRegister, map[uint64]any{1: "sess", 2: "sess-b", 3: 0, 4: "10.1.0.5:10911",
		8: map[uint64]any{}, 9: []any{map[uint64]any{1: "X", 4: uint64(256)}}}, eBadRequest)
	bs.refused("3.2: an integer for a bool", tRegister, map[uint64]any{1: "sess", 2: "sess-b", 3: 0, 4: "10.1.0.5:10911",
		7: uint64(1), 8: map[uint64]any{}, 9: []any{}}, eBadRequest)
	bs.refused("6: a group its certificate does not allow", tRegister, registerBody("sess", "sess-c", 0, "10.1.0.6:10911", 1, "X"), eNotAuthorized)
	bs.refused("6: an invalid register is code 1 before authorization", tRegister, registerBody("sess", "", 0, "10.1.0.6", 1, "X"), eBadRequest)

	// The route the session made.
	cs := open(t, o.dial(pki.RoleClient, "sess-reader"))
	f = cs.ok(tGetRoutes, topicVersions("SessTopic", "SessNew", "SessOther"))
	rr := routeResults(t, f)
	check(t, len(rr) == 3 && rr[0].status == 0 && rr[1].status == 0 && rr[2].status == 2, "8.2: upserted and removed topics, got %+v", rr)

	// unregister: stale epoch 8, then success, then 7.
	bs.refused("10: unregister with an old epoch", tUnregister, map[uint64]any{1: "sess", 2: "10.1.0.1:10911", 3: epoch}, eStaleEpoch)
	f = bs.ok(tUnregister, map[uint64]any{1: "sess", 2: "10.1.0.1:10911", 3: epoch2})
	check(t, len(f.body) == 0, "8.4: unregister answers no body, got %v", f)
	bs.refused("4.5: a repeated unregister", tUnregister, map[uint64]any{1: "sess", 2: "10.1.0.1:10911", 3: epoch2}, eLeaseNotFound)

	// 10: when the master leaves, the slave's queues lose WRITE.
	f = cs.ok(tGetRoutes, topicVersions("SessTopic"))
	rr = routeResults(t, f)
	if check(t, len(rr) == 1 && rr[0].status == 0, "10: the slave still serves the topic, got %+v", rr) {
		var route map[uint64][]map[uint64]any
		strict.Unmarshal(rr[0].route, &route)
		perm := asU(route[1][0][4])
		check(t, perm&2 == 0 && perm&4 != 0, "10: read-only without a master: perm %d", perm)
	}
}

// queries is 8.5-8.8 and 9.
func (o *outside) queries(t *testing.T) {
	bs := open(t, o.dial(pki.RoleBroker, "q-broker"))
	bs.ok(tRegister, registerBody("qc", "q-a", 0, "10.2.0.1:10911", 1, "QTopic", "rmq_sys_x", "QUnit"))
	bs.ok(tRegister, registerBody("qc", "q-b", 0, "10.2.0.2:10911", 1, "QTopic"))
	// Unit flags.
	bs.ok(tRegister, map[uint64]any{1: "qc2", 2: "q-c", 3: 0, 4: "10.2.0.3:10911", 8: map[uint64]any{3: uint64(1)},
		9: []any{map[uint64]any{1: "QUnitT", 2: uint64(1), 3: uint64(1), 4: uint64(6), 5: uint64(1)},
			map[uint64]any{1: "QUnitSub", 2: uint64(1), 3: uint64(1), 4: uint64(6), 5: uint64(2)},
			map[uint64]any{1: "QUnitBoth", 2: uint64(1), 3: uint64(1), 4: uint64(6), 5: uint64(3)}}})

	rs := open(t, o.dial(pki.RoleClient, "q-client"))
	f := rs.ok(tGetRoutes, topicVersions("QTopic", "QMissing", "QTopic"))
	rr := routeResults(t, f)
	if check(t, len(rr) == 3, "9: one result per entry, a topic named twice twice, got %d", len(rr)) {
		check(t, rr[0].topic == "QTopic" && rr[0].status == 0 && len(rr[0].route) > 0, "9: status ok with a route, got %+v", rr[0])
		check(t, rr[0].version == routeVersion(rr[0].route), "9: version is SHA-256 of the route bytes: %x vs %x", rr[0].version, routeVersion(rr[0].route))
		check(t, rr[1].topic == "QMissing" && rr[1].status == 2 && rr[1].version == 0 && rr[1].route == nil, "9: not-found carries nothing, got %+v", rr[1])
		check(t, rr[2].topic == "QTopic" && bytes.Equal(rr[2].route, rr[0].route), "9: the second entry of a topic gets the same route")
		var route map[uint64][]map[uint64]any
		strict.Unmarshal(rr[0].route, &route)
		check(t, len(route[1]) == 2 && len(route[2]) == 2 && asS(route[1][0][1]) == "q-a" && asS(route[1][1][1]) == "q-b" &&
			asS(route[2][0][2]) == "q-a", "7.6: parallel arrays sorted by broker name, got %v", route)
		var v any
		strict.Unmarshal(rr[0].route, &v)
		check(t, bytes.Equal(enc(t, v), rr[0].route), "9: the route is core deterministic CBOR")
		body := f.m(t)
		groups := asList(body[2])
		check(t, len(groups) == 2 && asS(asMap(t, groups[0])[1]) == "q-a" && asS(asMap(t, groups[1])[1]) == "q-b",
			"8.5/9.1: Routes.Groups names each group once, sorted, got %v", groups)
		if len(groups) == 2 {
			g := asMap(t, groups[0])
			check(t, asI(g[3]) > 0, "7.12: DeadlineInMs positive for a live group, got %v", g)
		}
		ns := asMap(t, body[3])
		check(t, asS(ns[1]) != "" && asI(ns[2]) > 0, "8.5/9.1: Routes.Node carries the node's id and start, got %v", ns)

		// Not modified.
		f = rs.ok(tGetRoutes, map[uint64]any{1: []any{map[uint64]any{1: "QTopic", 2: rr[0].version}, map[uint64]any{1: "QTopic", 2: uint64(12345)}}})
		nm := routeResults(t, f)
		check(t, len(nm) == 2 && nm[0].status == 1 && nm[0].version == rr[0].version && nm[0].route == nil, "9: the current version is answered not-modified, got %+v", nm)
		check(t, len(nm) == 2 && nm[1].status == 0 && bytes.Equal(nm[1].route, rr[0].route), "9: another version gets the route, got %+v", nm)
		groups = asList(f.m(t)[2])
		check(t, len(groups) == 2, "8.5: Groups include the groups of not-modified routes, got %v", groups)
	}
	// The vector of 14.2 is a valid request.
	rs.write(mustHex(t, "00000015a3010a020503a10181a10169546f70696354657374"))
	f = rs.read()
	check(t, f.typ == tGetRoutes && f.id == 5 && !f.hasErr, "14.2: vector request answered, got %v", f)

	// cluster-info
	f = rs.ok(tClusterInfo, nil)
	ci := f.m(t)
	clusters := asMap2(ci[1])
	check(t, reflect.DeepEqual(clusters["qc"], []any{"q-a", "q-b"}), "7.7: Clusters maps a cluster to its sorted groups, got %v", clusters)
	grp := asMap2(ci[2])
	qa, _ := grp["q-a"].(map[any]any)
	addrs, _ := qa[uint64(4)].(map[any]any)
	check(t, asS(qa[uint64(1)]) == "qc" && asS(addrs[uint64(0)]) == "10.2.0.1:10911", "7.5: BrokerData with integer Addrs keys, got %v", qa)

	// topics
	topicsOf := func(body map[uint64]any) []string {
		f := rs.ok(tTopics, body)
		var out []string
		for _, x := range asList(f.m(t)[1]) {
			out = append(out, asS(x))
		}
		return out
	}
	all := topicsOf(map[uint64]any{})
	check(t, contains(all, "QTopic") && contains(all, "QUnitT") && sortedUnique(all), "8.7: kind 0 lists every topic sorted, got %v", all)
	k1 := topicsOf(map[uint64]any{1: uint64(1), 2: "qc2"})
	check(t, reflect.DeepEqual(k1, []string{"QUnitBoth", "QUnitSub", "QUnitT"}), "8.7: kind 1 lists a cluster's topics, got %v", k1)
	k2 := topicsOf(map[uint64]any{1: uint64(2)})
	check(t, contains(k2, "qc") && contains(k2, "q-a") && contains(k2, "rmq_sys_x") && !contains(k2, "QTopic"), "8.7: kind 2 system topics, got %v", k2)
	k3 := topicsOf(map[uint64]any{1: uint64(3)})
	check(t, reflect.DeepEqual(k3, []string{"QUnitBoth", "QUnitT"}), "8.7: kind 3 unit topics, got %v", k3)
	k4 := topicsOf(map[uint64]any{1: uint64(4)})
	check(t, reflect.DeepEqual(k4, []string{"QUnitBoth", "QUnitSub"}), "8.7: kind 4 unit-sub topics, got %v", k4)
	k5 := topicsOf(map[uint64]any{1: uint64(5)})
	check(t, reflect.DeepEqual(k5, []string{"QUnitSub"}), "8.7: kind 5 unit-sub without unit, got %v", k5)
	rs.refused("8.7: kind 1 with an unknown cluster", tTopics, map[uint64]any{1: uint64(1), 2: "nope"}, eNotFound)
	rs.refused("8.7: kind 6", tTopics, map[uint64]any{1: uint64(6)}, eBadRequest)

	// broker-member-group
	f = rs.ok(tMemberGroup, map[uint64]any{1: "qc", 2: "q-a"})
	bd := f.m(t)
	check(t, asS(bd[2]) == "q-a" && asS(bd[1]) == "qc", "8.8: the group's BrokerData, got %v", bd)
	rs.refused("8.8: an unknown group", tMemberGroup, map[uint64]any{1: "qc", 2: "nope"}, eNotFound)
}

func asMap2(v any) map[string]any {
	out := map[string]any{}
	mm, _ := v.(map[any]any)
	for k, x := range mm {
		out[asS(k)] = x
	}
	return out
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

func sortedUnique(l []string) bool {
	for i := 1; i < len(l); i++ {
		if l[i-1] >= l[i] {
			return false
		}
	}
	return true
}

// watch is 8.9, 8.10 and 11.
func (o *outside) watch(t *testing.T) {
	bs := open(t, o.dial(pki.RoleBroker, "w-broker"))
	f := bs.ok(tRegister, registerBody("wc", "w-a", 0, "10.3.0.1:10911", 1, "WTopic"))
	epoch := asU(asMap(t, f.m(t)[1])[1])

	ws := open(t, o.dial(pki.RoleClient, "watcher"))
	id := ws.send(tWatch, topicVersions("WTopic", "WMissing"))
	var ack *frame
	var initial []result
	for ack == nil || len(initial) < 1 {
		f, err := ws.next(10 * time.Second)
		if err != nil {
			t.Fatalf("watch: %v", err)
		}
		if f.typ == tRouteEvent {
			check(t, f.id == 0, "11: pushes have id 0, got %v", f)
			initial = append(initial, eventResult(t, f))
			continue
		}
		check(t, f.typ == tWatch && f.id == id && !f.hasErr, "8.9: WatchAck, got %v", f)
		ack = &f
	}
	check(t, asU(ack.m(t)[1]) == 2, "8.9: WatchAck.Watching counts the stream's topics, got %v", ack.m(t))
	check(t, len(initial) == 1 && initial[0].topic == "WTopic" && initial[0].status == 0 && initial[0].version == routeVersion(initial[0].route),
		"11: one initial event for the held topic, none for a topic not held named with 0, got %+v", initial)

	// A change is pushed.
	bs.ok(tUpdateTopics, map[uint64]any{1: "wc", 2: "10.3.0.1:10911", 3: epoch, 4: map[uint64]any{3: uint64(2)},
		5: []any{map[uint64]any{1: "WTopic", 2: uint64(4), 3: uint64(4), 4: uint64(6)}}})
	evf := nextEventFrame(t, ws)
	ev := eventResult(t, evf)
	check(t, ev.topic == "WTopic" && ev.status == 0 && ev.version != initial[0].version && ev.version == routeVersion(ev.route), "11: a change is pushed, got %+v", ev)
	em := evf.m(t)
	groups := asList(em[2])
	check(t, len(groups) == 1 && asS(asMap(t, groups[0])[1]) == "w-a", "8.10: a push carries the freshness of its route's groups, got %v", em[2])
	check(t, asS(asMap(t, em[3])[1]) != "", "8.10: a push carries the node's state, got %v", em[3])
	// Removal is pushed as not-found.
	bs.ok(tUpdateTopics, map[uint64]any{1: "wc", 2: "10.3.0.1:10911", 3: epoch, 4: map[uint64]any{3: uint64(3)}, 6: []any{"WTopic"}})
	ev = nextEvent(t, ws)
	check(t, ev.topic == "WTopic" && ev.status == 2 && ev.version == 0 && ev.route == nil, "8.10: a gone topic is pushed as not-found, got %+v", ev)

	// Re-watch naming a version already current: no event for it.
	f = ws.ok(tUnwatch, map[uint64]any{1: []any{"WMissing", "NotWatched"}})
	check(t, asU(f.m(t)[1]) == 1, "8.9: unwatch answers how many remain, got %v", f.m(t))
	f = ws.ok(tGetRoutes, topicVersions("WTopic"))
	check(t, len(routeResults(t, f)) == 1, "11: other requests are answered on a watch stream")

	es := open(t, o.dial(pki.RoleClient, "watcher-2"))
	f = es.ok(tUnwatch, map[uint64]any{1: []any{"A"}})
	check(t, len(f.body) > 0 && asU(f.m(t)[1]) == 0, "11: unwatch on a stream watching nothing gets {1: 0}, got %v", f)
	es.refused("8.9: watch of no topics", tWatch, map[uint64]any{1: []any{}}, eBadRequest)
	es.refused("8.9: watch of an invalid name", tWatch, topicVersions("bad topic"), eBadRequest)
}

func eventResult(t *testing.T, f frame) result {
	t.Helper()
	var body map[uint64]cbor.RawMessage
	if err := strict.Unmarshal(f.body, &body); err != nil {
		t.Fatalf("RouteEvent: %v", err)
	}
	return decodeResult(t, body[1])
}

func nextEventFrame(t *testing.T, rs *rawStream) frame {
	t.Helper()
	if len(rs.early) > 0 {
		f := rs.early[0]
		rs.early = rs.early[1:]
		check(t, f.id == 0, "11: pushes have id 0")
		return f
	}
	for {
		f, err := rs.next(10 * time.Second)
		if err != nil {
			t.Fatalf("waiting for a push: %v", err)
		}
		if f.typ == tRouteEvent {
			check(t, f.id == 0, "11: pushes have id 0")
			return f
		}
	}
}

func nextEvent(t *testing.T, rs *rawStream) result {
	t.Helper()
	return eventResult(t, nextEventFrame(t, rs))
}

// operator is 8.12-8.17.
func (o *outside) operator(t *testing.T) {
	bs := open(t, o.dial(pki.RoleBroker, "op-broker"))
	bs.ok(tRegister, registerBody("oc", "o-a", 0, "10.4.0.1:10911", 1, "OTopic", "ODel"))
	rs := open(t, o.dial(pki.RoleOperator, "op"))

	f := rs.ok(tNodeInfo, nil)
	ni := f.m(t)
	check(t, asS(ni[1]) != "" && asI(ni[2]) > 0 && asI(ni[3]) >= asI(ni[2]), "8.17: NodeInfo id, start, now, got %v", ni)
	check(t, asI(ni[6]) >= 1 && asI(ni[7]) >= 2 && asI(ni[8]) >= 1, "8.17: NodeInfo counts leases, topics, connections, got %v", ni)

	f = rs.ok(tLeases, nil)
	var found bool
	for _, l := range asList(f.m(t)[1]) {
		li := asMap(t, l)
		if asS(li[2]) == "10.4.0.1:10911" {
			found = true
			check(t, asS(li[1]) == "oc" && asS(li[3]) == "o-a" && asU(li[6]) != 0 && asI(li[10]) == 120_000 &&
				asI(li[9])-asI(li[8]) == asI(li[10]), "7.8: LeaseInfo fields, got %v", li)
		}
	}
	check(t, found, "8.15: leases lists the registered broker")

	// Write permissions.
	f = rs.ok(tWipeWritePerm, map[uint64]any{1: "o-a"})
	check(t, asI(f.m(t)[1]) == 2, "8.13: wipe-write-perm changed 2 topics, got %v", f.m(t))
	f = rs.ok(tAddWritePerm, map[uint64]any{1: "o-a"})
	check(t, asI(f.m(t)[1]) == 2, "8.13: add-write-perm changed 2 topics, got %v", f.m(t))
	rs.refused("8.13: unknown group", tWipeWritePerm, map[uint64]any{1: "nope"}, eNotFound)

	// delete-topic
	f = rs.ok(tDeleteTopic, map[uint64]any{1: "ODel"})
	check(t, len(f.body) == 0, "8.12: no body")
	rs.refused("8.12: unknown topic", tDeleteTopic, map[uint64]any{1: "ODel"}, eNotFound)
	rs.refused("8.12: unknown cluster", tDeleteTopic, map[uint64]any{1: "OTopic", 2: []any{"nope"}}, eNotFound)
	// The tombstone: a full register naming it again does not bring it back.
	bs.ok(tRegister, registerBody("oc", "o-a", 0, "10.4.0.1:10911", 2, "OTopic", "ODel"))
	cs := open(t, o.dial(pki.RoleClient, "op-reader"))
	rr := routeResults(t, cs.ok(tGetRoutes, topicVersions("ODel")))
	check(t, len(rr) == 1 && rr[0].status == 2, "8.12: a tombstoned topic stays deleted, got %+v", rr)

	// KV
	kv := func(ns, key, val string) map[uint64]any {
		m := map[uint64]any{1: ns}
		if key != "" {
			m[2] = key
		}
		if val != "" {
			m[3] = val
		}
		return m
	}
	f = rs.ok(tKVPut, kv("ns", "k", "v"))
	check(t, len(f.body) == 0, "8.14: kv-put no body")
	f = rs.ok(tKVGet, kv("ns", "k", ""))
	check(t, asS(f.m(t)[1]) == "v", "8.14: kv-get value, got %v", f.m(t))
	f = rs.ok(tKVList, kv("ns", "", ""))
	check(t, reflect.DeepEqual(asMap2(f.m(t)[1]), map[string]any{"k": "v"}), "8.14: kv-list entries, got %v", f.m(t))
	rs.refused("8.14: kv-get missing key", tKVGet, kv("ns", "nope", ""), eNotFound)
	rs.refused("8.14: kv-list unknown namespace", tKVList, kv("nope", "", ""), eNotFound)
	rs.refused("8.14: kv-get empty namespace", tKVGet, kv("", "k", ""), eBadRequest)
	rs.refused("8.14: kv-list empty namespace", tKVList, kv("", "", ""), eBadRequest)
	rs.refused("8.14: kv-put empty key", tKVPut, kv("ns", "", "v"), eBadRequest)
	rs.refused("8.14: kv-delete key over 255 bytes", tKVDelete, kv("ns", strings.Repeat("k", 256), ""), eBadRequest)
	rs.refused("8.14: kv-get namespace over 255 bytes", tKVGet, kv(strings.Repeat("n", 256), "k", ""), eBadRequest)
	rs.refused("8.14: kv-put value over 64 KiB", tKVPut, kv("ns", "big", strings.Repeat("v", 64<<10+1)), eBadRequest)
	f = rs.ok(tKVPut, kv("ns", "big", strings.Repeat("v", 64<<10)))
	check(t, !f.hasErr, "8.14: a value of 64 KiB is accepted")
	f = rs.ok(tKVDelete, kv("ns", "k", ""))
	check(t, len(f.body) == 0, "8.14: kv-delete no body")
	rs.refused("8.14: kv-delete missing key", tKVDelete, kv("ns", "k", ""), eNotFound)

	// Policies.
	f = rs.ok(tPolicyList, nil)
	var hooks []string
	for _, p := range asList(f.m(t)[1]) {
		hooks = append(hooks, asS(asMap(t, p)[1]))
	}
	check(t, reflect.DeepEqual(hooks, []string{"route", "expiry", "confirm"}), "8.16: PolicyList one per hook in order, got %v", hooks)
	rs.refused("8.16: rollback without a last good module", tPolicyRollbk, map[uint64]any{1: "route"}, eNotFound)
	rs.refused("8.16: push of a module that is not WebAssembly", tPolicyPush, map[uint64]any{1: "route", 2: []byte("not wasm")}, eBadRequest)
	rs.refused("8.16: push for an unknown hook", tPolicyPush, map[uint64]any{1: "bogus", 2: []byte("\x00asm\x01\x00\x00\x00")}, eBadRequest)
	rs.refused("8.16: test of a module that is not WebAssembly", tPolicyTest, map[uint64]any{1: "route", 2: []byte("nope")}, eBadRequest)
	f = rs.ok(tPolicyRemove, map[uint64]any{1: "expiry"})
	check(t, asS(f.m(t)[1]) == "expiry", "8.16: policy-remove answers the hook's PolicyInfo, got %v", f.m(t))
}

// authorization is section 6.
func (o *outside) authorization(t *testing.T) {
	operatorOnly := []struct {
		typ  uint64
		body any
	}{
		{tNodeInfo, nil}, {tDeleteTopic, map[uint64]any{1: "X"}}, {tWipeWritePerm, map[uint64]any{1: "g"}},
		{tAddWritePerm, map[uint64]any{1: "g"}}, {tKVPut, map[uint64]any{1: "n", 2: "k", 3: "v"}},
		{tKVGet, map[uint64]any{1: "n", 2: "k"}}, {tKVDelete, map[uint64]any{1: "n", 2: "k"}},
		{tKVList, map[uint64]any{1: "n"}}, {tLeases, nil}, {tPolicyPush, map[uint64]any{1: "route", 2: []byte{0}}},
		{tPolicyList, nil}, {tPolicyRollbk, map[uint64]any{1: "route"}}, {tPolicyRemove, map[uint64]any{1: "route"}},
		{tPolicyTest, map[uint64]any{1: "route", 2: []byte{0}}},
	}
	brokerOnly := []struct {
		typ  uint64
		body any
	}{
		{tRegister, registerBody("ac", "a-g", 0, "10.5.0.1:10911", 1, "A")},
		{tUpdateTopics, map[uint64]any{1: "ac", 2: "10.5.0.1:10911", 3: uint64(1), 4: map[uint64]any{}}},
		{tHeartbeat, map[uint64]any{1: "ac", 2: "10.5.0.1:10911", 3: uint64(1), 4: map[uint64]any{}}},
		{tUnregister, map[uint64]any{1: "ac", 2: "10.5.0.1:10911", 3: uint64(1)}},
	}
	for _, role := range []pki.Role{pki.RoleClient, pki.RoleNode, pki.RoleBroker} {
		name := "auth-" + string(role)
		if role == pki.RoleNode {
			name = "auth-node.example"
		}
		rs := open(t, o.dial(role, name))
		for _, r := range operatorOnly {
			rs.refused(fmt.Sprintf("6: %s sends type %d", role, r.typ), r.typ, r.body, eNotAuthorized)
		}
		if role != pki.RoleBroker {
			for _, r := range brokerOnly {
				rs.refused(fmt.Sprintf("6: %s sends type %d", role, r.typ), r.typ, r.body, eNotAuthorized)
			}
		}
		// What it may send.
		rs.ok(tGetRoutes, topicVersions("A"))
		rs.ok(tClusterInfo, nil)
		rs.ok(tTopics, map[uint64]any{})
		rs.refused(fmt.Sprintf("6: %s member group of none", role), tMemberGroup, map[uint64]any{1: "x", 2: "y"}, eNotFound)
		rs.alive("6: after refusals")
	}
	// A broker restricted to a group: the lease of another group (6).
	other := open(t, o.dial(pki.RoleBroker, "auth-free"))
	f := other.ok(tRegister, registerBody("ac", "a-free", 0, "10.5.0.9:10911", 1, "A"))
	ep := asU(asMap(t, f.m(t)[1])[1])
	rs := open(t, o.dial(pki.RoleBroker, "auth-restricted", "a-mine"))
	rs.refused("6: heartbeat of another group's lease", tHeartbeat, map[uint64]any{1: "ac", 2: "10.5.0.9:10911", 3: ep, 4: map[uint64]any{3: uint64(1)}}, eNotAuthorized)
	rs.refused("6: unregister of another group's lease", tUnregister, map[uint64]any{1: "ac", 2: "10.5.0.9:10911", 3: ep}, eNotAuthorized)
	rs.refused("6: update-topics of another group's lease", tUpdateTopics, map[uint64]any{1: "ac", 2: "10.5.0.9:10911", 3: ep, 4: map[uint64]any{3: uint64(2)}}, eNotAuthorized)
	rs.refused("6: an invalid heartbeat is code 1 before authorization", tHeartbeat, map[uint64]any{1: "ac", 2: "10.5.0.9", 3: ep, 4: map[uint64]any{}}, eBadRequest)
	rs.refused("6: an invalid unregister is code 1 before authorization", tUnregister, map[uint64]any{1: "", 2: "10.5.0.9:10911", 3: ep}, eBadRequest)
	rs.refused("6: an invalid update-topics is code 1 before authorization", tUpdateTopics, map[uint64]any{1: "ac", 2: "10.5.0.9:10911", 3: ep, 4: map[uint64]any{}, 5: []any{topicCfg("bad name")}}, eBadRequest)
	rs.refused("6/10: moving another group's address", tRegister, registerBody("ac", "a-mine", 0, "10.5.0.9:10911", 1, "A"), eNotAuthorized)
}

// TestOutsideAnonymous is 1.1 and 6 for a node allowing anonymous clients.
func TestOutsideAnonymous(t *testing.T) {
	o := newOutside(t, func(c *node.Config) { c.AllowAnonymousClients = true })
	rs := open(t, o.dial("", ""))
	rs.ok(tPing, nil)
	rs.ok(tGetRoutes, topicVersions("A"))
	f := rs.ok(tWatch, topicVersions("A"))
	check(t, asU(f.m(t)[1]) == 1, "6: anonymous may watch, got %v", f.m(t))
	rs.ok(tUnwatch, map[uint64]any{1: []any{"A"}})
	for _, typ := range []uint64{tClusterInfo, tTopics, tMemberGroup, tRegister, tHeartbeat, tNodeInfo, tKVGet, tLeases, tPolicyList} {
		var body any
		switch typ {
		case tTopics:
			body = map[uint64]any{}
		case tMemberGroup:
			body = map[uint64]any{1: "c", 2: "g"}
		case tRegister:
			body = registerBody("c", "g", 0, "10.6.0.1:1", 1, "A")
		case tHeartbeat:
			body = map[uint64]any{1: "c", 2: "10.6.0.1:1", 3: uint64(1), 4: map[uint64]any{}}
		case tKVGet:
			body = map[uint64]any{1: "n", 2: "k"}
		}
		rs.refused(fmt.Sprintf("6: anonymous sends type %d", typ), typ, body, eNotAuthorized)
	}
	// 2.2: anonymous is a reader: 1 MiB.
	rs.write([]byte{0x00, 0x10, 0x00, 0x01})
	f = rs.read()
	check(t, f.hasErr && f.code == eTooLarge, "2.2: anonymous limit 1 MiB, got %v", f)
	// With a certificate, as usual.
	cs := open(t, o.dial(pki.RoleClient, "anon-node-client"))
	cs.ok(tClusterInfo, nil)
}

// TestOutsideLimits is 4.3 and 1.2 with small limits.
func TestOutsideLimits(t *testing.T) {
	o := newOutside(t, func(c *node.Config) {
		c.ReadTimeout = 300 * time.Millisecond
		c.IdleTimeout = 2 * time.Second
		c.MaxStreamsPerConn = 3
		c.MaxWatchesPerConn = 3
		c.MaxConnsPerHost = 10
		c.MaxConnsPerIdentity = 2
		c.MaxPolicyUploadsPerMinute = 2
	})
	qc := o.dial(pki.RoleClient, "limits")

	// Read timeout inside a frame: reset 0x20 without an error frame.
	rs := open(t, qc)
	rs.write([]byte{0, 0, 0, 9, 0xa1})
	_, err := rs.next(10 * time.Second)
	code, ok := streamCode(err)
	check(t, ok && code == 0x20, "2/4.3: a frame not finished within the read timeout is reset with 0x20, got %v", err)

	// First frame: its whole 4-byte length must arrive within the read
	// timeout (a stream is visible to the node only once it carries a
	// byte, so one byte of the length starts the clock).
	rs = open(t, qc)
	rs.write([]byte{0})
	_, err = rs.next(10 * time.Second)
	code, ok = streamCode(err)
	check(t, ok && code == 0x20, "4.3: a first frame whose length does not arrive within the read timeout is reset with 0x20, got %v", err)
	// Between frames a partial length is nothing sent: the idle timeout
	// (2 s here), not the read timeout (300 ms), applies until it is whole.
	rs = open(t, qc)
	rs.ok(tPing, nil)
	ping := request(t, tPing, 9, nil)
	rs.write(ping[:2])
	time.Sleep(700 * time.Millisecond)
	rs.write(ping[2:])
	f, err := rs.next(10 * time.Second)
	check(t, err == nil && f.id == 9, "4.3: between frames a partial length waits for the idle timeout, got %v %v", f, err)
	// A stream that only finishes is finished in turn, with no frame.
	rs = open(t, qc)
	rs.s.Close()
	_, err = rs.next(10 * time.Second)
	check(t, errors.Is(err, io.EOF), "4: a stream with no request is finished with no answer, got %v", err)

	// Idle timeout: between frames.
	rs = open(t, qc)
	rs.ok(tPing, nil)
	_, err = rs.next(10 * time.Second)
	code, ok = streamCode(err)
	check(t, ok && code == 0x20, "4.3: an idle stream is reset with 0x20, got %v", err)

	// Streams per connection: the 4th cannot be opened while 3 are open.
	sq := o.dial(pki.RoleClient, "streams")
	var held []*rawStream
	for range 3 {
		s := open(t, sq)
		s.ok(tPing, nil) // let the node see it
		held = append(held, s)
	}
	_, err = sq.OpenStream()
	var limit *quic.StreamLimitReachedError
	check(t, errors.As(err, &limit), "1.2/4.3: the 4th concurrent stream cannot be opened, got %v", err)

	// Watched topics per connection: a watch over the cap gets 12 and
	// changes nothing.
	wq := o.dial(pki.RoleClient, "watches")
	ws := open(t, wq)
	ws.ok(tWatch, topicVersions("W1", "W2"))
	ws.refused("11: a watch over the per-connection cap", tWatch, topicVersions("W3", "W4"), eOverloaded)
	f = ws.ok(tWatch, topicVersions("W3"))
	check(t, asU(f.m(t)[1]) == 3, "11: the refused watch changed nothing, got %v", f.m(t))
	f = ws.ok(tWatch, topicVersions("W1", "W1"))
	check(t, asU(f.m(t)[1]) == 3, "11: naming topics the stream watches adds nothing to the count, got %v", f.m(t))
	// The cap counts (stream, topic): the same topic on another stream of
	// the connection counts again, and an ended stream gives its back.
	ws2 := open(t, wq)
	ws2.refused("11: a topic watched on another stream counts again", tWatch, topicVersions("W1"), eOverloaded)
	ws.ok(tUnwatch, map[uint64]any{1: []any{"W3"}})
	ws2.ok(tWatch, topicVersions("W1"))
	ws.s.CancelWrite(0)
	ws.s.CancelRead(0)
	var again frame
	for range 200 { // the node notices the stream's end
		if again = ws2.call(tWatch, topicVersions("W9")); !again.hasErr {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	check(t, !again.hasErr, "11: a stream's end gives its watches back, got %v", again)

	// Connections per certificate: the third of one certificate replaces
	// its least recently active connection (0x13).
	cert := o.tlsFor(pki.RoleClient, "same-cert")
	var conns []*quic.Conn
	for i := range 3 {
		c, err := o.dialTLS(cert)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.CloseWithError(0, "") })
		s := open(t, c)
		s.ok(tPing, nil)
		conns = append(conns, c)
		_ = i
	}
	select {
	case <-conns[0].Context().Done():
		code, ok := connCode(context.Cause(conns[0].Context()))
		check(t, ok && code == 0x13, "1.2: replaced connection closed with 0x13, got %v", context.Cause(conns[0].Context()))
	case <-time.After(10 * time.Second):
		check(t, false, "1.2: the oldest connection of a certificate at its limit is replaced")
	}

	// Policy uploads: 2 a minute here; the third gets 12.
	op := open(t, o.dial(pki.RoleOperator, "uploads"))
	op.refused("8.16: an unknown hook (not counted)", tPolicyPush, map[uint64]any{1: "bogus", 2: []byte("x")}, eBadRequest)
	op.refused("8.16: upload 1 (refused module, still counted)", tPolicyPush, map[uint64]any{1: "route", 2: []byte("x")}, eBadRequest)
	op.refused("8.16: upload 2", tPolicyTest, map[uint64]any{1: "route", 2: []byte("x")}, eBadRequest)
	op.refused("8.16: a third push within the minute", tPolicyPush, map[uint64]any{1: "route", 2: []byte("x")}, eBadRequest)
	op.refused("8.16: push over the budget", tPolicyPush, map[uint64]any{1: "route", 2: []byte("x")}, eOverloaded)
	op.refused("8.16: test has a budget of its own", tPolicyTest, map[uint64]any{1: "route", 2: []byte("x")}, eBadRequest)
	for _, s := range held {
		s.s.CancelWrite(0)
	}
}

// TestOutsideConnsPerHost is 1.2: over the per-IP reader budget with other
// certificates, a connection is closed with 0x12.
func TestOutsideConnsPerHost(t *testing.T) {
	o := newOutside(t, func(c *node.Config) { c.MaxConnsPerHost = 2 })
	for i := range 2 {
		s := open(t, o.dial(pki.RoleClient, fmt.Sprintf("host-%d", i)))
		s.ok(tPing, nil)
	}
	qc, err := o.dialTLS(o.tlsFor(pki.RoleClient, "host-over"))
	if err == nil {
		t.Cleanup(func() { qc.CloseWithError(0, "") })
		select {
		case <-qc.Context().Done():
			err = context.Cause(qc.Context())
		case <-time.After(10 * time.Second):
		}
	}
	code, ok := connCode(err)
	check(t, ok && code == 0x12, "1.2: a reader over the per-IP budget is closed with 0x12, got %v", err)
	// A broker has a budget of its own.
	bs := open(t, o.dial(pki.RoleBroker, "host-broker"))
	bs.ok(tPing, nil)
}

// names is section 8's rule for every request: names (cluster, broker
// group, zone, address) are at most 255 bytes without control characters,
// addresses host:port, topic names as in 7.2, and a violation gets code 1,
// never code 5, since nothing could have been stored under it (as 8.14
// says for KV).
func (o *outside) names(t *testing.T) {
	long := strings.Repeat("n", 256)
	rs := open(t, o.dial(pki.RoleOperator, "names"))
	for _, c := range []struct {
		what string
		typ  uint64
		body map[uint64]any
	}{
		{"delete-topic of an invalid topic name", tDeleteTopic, map[uint64]any{1: "bad name"}},
		{"delete-topic of an empty topic name", tDeleteTopic, map[uint64]any{}},
		{"delete-topic of a topic name of 128 characters", tDeleteTopic, map[uint64]any{1: strings.Repeat("t", 128)}},
		{"delete-topic in a cluster of 256 bytes", tDeleteTopic, map[uint64]any{1: "T", 2: []any{long}}},
		{"delete-topic in an empty cluster name", tDeleteTopic, map[uint64]any{1: "T", 2: []any{""}}},
		{"wipe-write-perm of an empty group", tWipeWritePerm, map[uint64]any{}},
		{"add-write-perm of a group of 256 bytes", tAddWritePerm, map[uint64]any{1: long}},
		{"wipe-write-perm of a group with a control character", tWipeWritePerm, map[uint64]any{1: "g\x01"}},
		{"wipe-write-perm of a group with DEL", tWipeWritePerm, map[uint64]any{1: "g\x7f"}},
		{"add-write-perm of a group with a C1 control character (NEL)", tAddWritePerm, map[uint64]any{1: "g\u0085"}},
		{"delete-topic in a cluster with a C1 control character", tDeleteTopic, map[uint64]any{1: "T", 2: []any{"c\u009f"}}},
		{"broker-member-group of a group with a C1 control character", tMemberGroup, map[uint64]any{1: "c", 2: "g\u0080"}},
		{"broker-member-group of an empty group", tMemberGroup, map[uint64]any{1: "c"}},
		{"broker-member-group of an empty cluster", tMemberGroup, map[uint64]any{2: "g"}},
		{"broker-member-group of a group of 256 bytes", tMemberGroup, map[uint64]any{1: "c", 2: long}},
		{"topics of kind 1 with no cluster", tTopics, map[uint64]any{1: uint64(1)}},
		{"topics of kind 1 with a cluster of 256 bytes", tTopics, map[uint64]any{1: uint64(1), 2: long}},
		{"heartbeat with no body", tHeartbeat, nil},
		{"heartbeat of an address without a port", tHeartbeat, map[uint64]any{1: "c", 2: "10.0.0.1", 3: uint64(1), 4: map[uint64]any{}}},
		{"heartbeat of a cluster of 256 bytes", tHeartbeat, map[uint64]any{1: long, 2: "10.0.0.1:1", 3: uint64(1), 4: map[uint64]any{}}},
		{"unregister of an empty address", tUnregister, map[uint64]any{1: "c", 3: uint64(1)}},
		{"unregister of an empty cluster", tUnregister, map[uint64]any{2: "10.0.0.1:1", 3: uint64(1)}},
		{"update-topics of an address without a port", tUpdateTopics, map[uint64]any{1: "c", 2: "nowhere", 3: uint64(1), 4: map[uint64]any{}}},
	} {
		var body any
		if c.body != nil {
			body = c.body
		}
		rs.refused("8: "+c.what, c.typ, body, eBadRequest)
	}
}

// keyTypes is section 3: maps have unsigned integer keys. What a node does
// with a key of another type must be what the document says.
func (o *outside) keyTypes(t *testing.T) {
	rs := open(t, o.dial(pki.RoleClient, "keys"))
	ping := func(key ...byte) []byte {
		return withLen(append(append([]byte{0xa3, 0x01, 0x11, 0x02, 0x01}, key...), 0x00))
	}
	body := func(key ...byte) []byte {
		b := []byte{0xa3, 0x01, 0x0a, 0x02, 0x01, 0x03, 0xa2, 0x01, 0x81, 0xa1, 0x01, 0x61, 0x61}
		return withLen(append(append(b, key...), 0x00))
	}
	for name, c := range map[string]struct {
		frame   []byte
		refused bool
	}{
		"negative key in the Frame":    {ping(0x20), false},
		"text key in the Frame":        {ping(0x61, 0x61), false},
		"byte-string key in the Frame": {ping(0x41, 0x61), true},
		"array key in the Frame":       {ping(0x80), true},
		"float key in the Frame":       {ping(0xf9, 0x3c, 0x00), true},
		"bool key in the Frame":        {ping(0xf5), true},
		"negative key in a body":       {body(0x20), false},
		"text key in a body":           {body(0x61, 0x61), false},
		"byte-string key in a body":    {body(0x41, 0x61), true},
		"map key in a body":            {body(0xa0), true},
		"null key in a body":           {body(0xf6), true},
	} {
		rs.write(c.frame)
		f, err := rs.next(10 * time.Second)
		if c.refused {
			wantType, wantID := uint64(0), uint64(0) // a framing error (4.4)
			if strings.HasSuffix(name, "in a body") {
				wantType, wantID = tGetRoutes, 1 // a bad body
			}
			check(t, err == nil && f.hasErr && f.code == eBadRequest && f.typ == wantType && f.id == wantID,
				"3: %s is refused with code 1, type %d, id %d, got %v %v", name, wantType, wantID, f, err)
		} else {
			check(t, err == nil && !f.hasErr && f.id == 1, "3: %s is ignored as an unknown key, got %v %v", name, f, err)
		}
	}
	// 5: a body the node ignores still obeys nesting: the Frame is level 1,
	// 16 arrays in the ping body reach 17.
	deep := append([]byte{0xa3, 0x01, 0x11, 0x02, 0x01, 0x03}, append(bytes.Repeat([]byte{0x81}, 16), 0x00)...)
	rs.write(withLen(deep))
	f, err := rs.next(10 * time.Second)
	check(t, err == nil && f.hasErr && f.code == eBadRequest && f.typ == 0, "5: an ignored body nested 17 deep is a framing error, got %v %v", f, err)
	ok := append([]byte{0xa3, 0x01, 0x11, 0x02, 0x02, 0x03}, append(bytes.Repeat([]byte{0x81}, 15), 0x00)...)
	rs.write(withLen(ok))
	f, err = rs.next(10 * time.Second)
	check(t, err == nil && !f.hasErr && f.id == 2, "5: an ignored body nested 16 deep is accepted, got %v %v", f, err)
}

// TestOutsideErrorCodeTable reads section 12 as a client author does: the
// error codes are one table, 1 to 15 in order, so a renderer (and a
// reader) sees every code with its meaning and what to do.
func TestOutsideErrorCodeTable(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "wire", "PROTOCOL.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(doc), "\n## 12. Error codes\n")
	if !check(t, ok, "12: section 12 exists") {
		return
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	_, table, ok := strings.Cut(sec, "\n| code |")
	check(t, ok, "12: section 12 has a table of codes")
	var codes []int
	for _, line := range strings.Split(table, "\n")[1:] {
		if !strings.HasPrefix(line, "|") {
			break // the table ends at its first line that is not a row
		}
		var c int
		if _, err := fmt.Sscanf(line, "| %d |", &c); err == nil {
			codes = append(codes, c)
		}
	}
	want := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
	check(t, reflect.DeepEqual(codes, want), "12: the table of error codes lists %v, want %v in one table", codes, want)
}

// TestOutsideClientAttrsCaps is 7.9: a client's zone and labels go to the
// route policy, within caps; a read over them is answered by the route
// fail mode (here closed: status 4), not refused.
func TestOutsideClientAttrsCaps(t *testing.T) {
	o := newOutside(t, func(c *node.Config) {
		c.PolicyRouteFailure = wasm.FailClosed
		c.PolicyCallTimeout = 2 * time.Second // a dry run under -race on a loaded machine
	})
	module, err := os.ReadFile(filepath.Join("..", "testdata", "wasm", "fixtures", "empty-route.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	op := open(t, o.dial(pki.RoleOperator, "caps-op"))
	pi := op.ok(tPolicyPush, map[uint64]any{1: "route", 2: module, 3: int64(60_000)}).m(t)
	sum := sha256.Sum256(module)
	hash := hex.EncodeToString(sum[:])
	check(t, asS(pi[1]) == "route" && asS(pi[2]) == hash && asU(pi[3]) == uint64(len(module)) && asI(pi[4]) > 0,
		"8.16: PolicyInfo of a push: hook, SHA-256 hex, size, activation time, got %v", pi)
	ni := op.ok(tNodeInfo, nil).m(t)
	check(t, reflect.DeepEqual(asMap2(ni[9]), map[string]any{"route": hash}), "8.17: NodeInfo.Policies names the active module, got %v", ni[9])
	tr := op.ok(tPolicyTest, map[uint64]any{1: "route", 2: module, 4: int64(60_000)}).m(t)
	check(t, asS(tr[1]) == hash && tr[2] != nil, "8.16: policy-test answers the hash and the hook's output on the built-in sample, got %v", tr)
	// remove keeps the module as last good; rollback brings it back.
	rm := op.ok(tPolicyRemove, map[uint64]any{1: "route"}).m(t)
	check(t, rm[2] == nil && asS(rm[10]) == hash, "8.16: policy-remove returns to the built-in, keeping the module as last good, got %v", rm)
	rb := op.ok(tPolicyRollbk, map[uint64]any{1: "route"}).m(t)
	check(t, asS(rb[2]) == hash, "8.16: policy-rollback after a remove restores the module, got %v", rb)
	big := make([]byte, 4<<20+1)
	op.refused("8.16: a module over 4 MiB", tPolicyPush, map[uint64]any{1: "route", 2: big}, eBadRequest)
	bs := open(t, o.dial(pki.RoleBroker, "caps-broker"))
	bs.ok(tRegister, registerBody("cc", "c-a", 0, "10.8.0.1:10911", 1, "CapTopic"))

	rs := open(t, o.dial(pki.RoleClient, "caps"))
	read := func(client map[uint64]any) result {
		t.Helper()
		f := rs.ok(tGetRoutes, map[uint64]any{1: []any{map[uint64]any{1: "CapTopic"}}, 2: client})
		rr := routeResults(t, f)
		if len(rr) != 1 {
			t.Fatalf("results: %+v", rr)
		}
		return rr[0]
	}
	labels := func(n, size int) map[string]any {
		m := map[string]any{}
		for i := range n {
			k := fmt.Sprintf("k%02d", i)
			m[k] = strings.Repeat("v", size-len(k))
		}
		return m
	}
	filtered := func(r result) bool {
		var route map[uint64][]any
		strict.Unmarshal(r.route, &route)
		return r.status == 0 && len(r.route) > 0 && len(route[1]) == 0
	}
	for name, c := range map[string]struct {
		client map[uint64]any
		within bool
	}{
		"zone of 256 bytes":      {map[uint64]any{1: strings.Repeat("z", 256)}, true},
		"zone of 257 bytes":      {map[uint64]any{1: strings.Repeat("z", 257)}, false},
		"16 labels of 256 bytes": {map[uint64]any{2: labels(16, 256)}, true},
		"17 labels":              {map[uint64]any{2: labels(17, 8)}, false},
		"a label of 257 bytes":   {map[uint64]any{2: labels(1, 257)}, false},
	} {
		r := read(c.client)
		if c.within {
			check(t, filtered(r), "7.9: %s goes to the route policy, got %+v", name, r)
		} else {
			check(t, r.status == 4 && r.route == nil, "7.9: %s is answered by the fail mode (closed: status 4), got %+v", name, r)
		}
	}
}

// failedConn dials with cfg and returns how the connection failed: at the
// dial, or on its first stream.
func failedConn(t *testing.T, o *outside, cfg *tls.Config) error {
	t.Helper()
	nc, err := o.dialTLS(cfg)
	if err != nil {
		return err
	}
	defer nc.CloseWithError(0, "")
	s, err := nc.OpenStream()
	if err != nil {
		return err
	}
	s.Write(request(t, tPing, 1, nil))
	s.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = s.Read(make([]byte, 16))
	return err
}

// TestOutsideWriteTimeout is 4.3's write timeout: a peer that stops
// reading has its stream reset in both directions with 0x20, never a FIN.
func TestOutsideWriteTimeout(t *testing.T) {
	o := newOutside(t, func(c *node.Config) { c.WriteTimeout = 300 * time.Millisecond })
	bs := open(t, o.dial(pki.RoleBroker, "wt-broker"))
	for g := range 40 {
		bs.ok(tRegister, registerBody("wt", fmt.Sprintf("wt-group-with-a-long-name-%02d", g), 0, fmt.Sprintf("10.9.%d.1:10911", g), 1, "WTBig"))
	}
	rs := open(t, o.dial(pki.RoleClient, "wt-reader"))
	// Pipeline reads and take nothing: the answers outgrow the stream's
	// flow-control window, and the node's write waits.
	var werr error
	for range 400 {
		rs.nextID++
		if werr = rs.write(request(t, tGetRoutes, rs.nextID, topicVersions("WTBig"))); werr != nil {
			break
		}
	}
	if werr == nil {
		// The node stops reading too; wait for its STOP_SENDING.
		for range 1000 {
			if werr = rs.write(request(t, tPing, 0, nil)); werr != nil {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	code, ok := streamCode(werr)
	check(t, ok && code == 0x20, "4.3: after the write timeout the node stops reading with 0x20, got %v", werr)
	rerr := rs.ended(10 * time.Second)
	code, ok = streamCode(rerr)
	check(t, ok && code == 0x20, "4.3: after the write timeout the node resets its side with 0x20, never a FIN, got %v", rerr)
}

// TestOutsideWarmUp is 9 and 11 during the warm-up window.
func TestOutsideWarmUp(t *testing.T) {
	o := newOutside(t, func(c *node.Config) { c.WarmUp = time.Minute })
	rs := open(t, o.dial(pki.RoleClient, "warm"))
	p := rs.ok(tPing, nil).m(t)
	check(t, p[3] == true, "8.11: Pong.WarmingUp during warm-up, got %v", p)
	f := rs.ok(tGetRoutes, topicVersions("Unknown"))
	rr := routeResults(t, f)
	check(t, len(rr) == 1 && rr[0].status == 3 && rr[0].route == nil, "9: an unknown topic is warming-up (3) during warm-up, got %+v", rr)
	ns := asMap(t, f.m(t)[3])
	check(t, ns[3] == true, "7.13: Routes.Node.WarmingUp during warm-up, got %v", ns)
	// A topic the node holds is answered as usual.
	bs := open(t, o.dial(pki.RoleBroker, "warm-broker"))
	bs.ok(tRegister, registerBody("wu", "wu-a", 0, "10.10.0.1:10911", 1, "Held"))
	rr = routeResults(t, rs.ok(tGetRoutes, topicVersions("Held")))
	check(t, len(rr) == 1 && rr[0].status == 0, "9: a held topic is answered during warm-up, got %+v", rr)
	// 11: a watch says nothing about topics not held yet, even named with
	// a version: its only push is for the held topic.
	ws := open(t, o.dial(pki.RoleClient, "warm-watch"))
	ws.ok(tWatch, map[uint64]any{1: []any{map[uint64]any{1: "Unknown", 2: uint64(7)}, map[uint64]any{1: "Held"}}})
	ev := nextEvent(t, ws)
	check(t, ev.topic == "Held" && ev.status == 0, "11: during warm-up the first push is the held topic's, got %+v", ev)
}

// TestOutsideShutdown is 1.2's 0x10: a node shutting down closes its
// connections with 0x10.
func TestOutsideShutdown(t *testing.T) {
	o := newOutside(t, nil)
	qc := o.dial(pki.RoleClient, "shutdown")
	open(t, qc).ok(tPing, nil)
	o.tn.Stop()
	select {
	case <-qc.Context().Done():
	case <-time.After(15 * time.Second):
	}
	code, ok := connCode(context.Cause(qc.Context()))
	check(t, ok && code == 0x10, "1.2: a node shutting down closes with 0x10, got %v", context.Cause(qc.Context()))
}

// TestOutsideSessionRules is more of section 10: threshold bounds, stale
// state, the watch exception of 11 and a stream ending inside a frame (4.4).
func TestOutsideSessionRules(t *testing.T) {
	o := newOutside(t, nil)
	bs := open(t, o.dial(pki.RoleBroker, "rules-broker"))
	r := registerBody("sr", "sr-a", 0, "10.11.0.1:10911", 1, "SR")
	r[10] = uint64(500)
	lease := asMap(t, bs.ok(tRegister, r).m(t)[1])
	check(t, asU(lease[5]) == 1000, "10: a HeartbeatTimeoutMs under the node's bound is clamped to 1 s, got %v", lease)
	r = registerBody("sr", "sr-a", 0, "10.11.0.1:10911", 2, "SR")
	r[10] = uint64(time.Hour / time.Millisecond)
	lease = asMap(t, bs.ok(tRegister, r).m(t)[1])
	check(t, asU(lease[5]) == 600_000, "10: a HeartbeatTimeoutMs over the node's bound is clamped to 10 min, got %v", lease)
	check(t, asI(lease[2])-time.Now().UnixMilli() > 500_000, "10: DeadlineMs follows the threshold, got %v", lease)
	// A lower State moving broker id 0 elsewhere: code 9.
	bs.refused("10: a lower State at another address", tRegister, map[uint64]any{1: "sr", 2: "sr-a", 3: 0, 4: "10.11.0.2:10911",
		8: map[uint64]any{1: uint64(0), 3: uint64(9)}, 9: []any{}}, 9)

	// 11: a watch naming a version other than the last pushed gets the
	// current route, whatever its version.
	ws := open(t, o.dial(pki.RoleClient, "rules-watch"))
	ws.ok(tWatch, topicVersions("SR"))
	first := nextEvent(t, ws)
	ws.ok(tWatch, map[uint64]any{1: []any{map[uint64]any{1: "SR", 2: uint64(42)}}})
	again := nextEvent(t, ws)
	check(t, again.topic == "SR" && again.status == 0 && again.version == first.version, "11: re-watch naming another version pushes the current route, got %+v", again)

	// 4.4: a stream that ends inside a frame keeps earlier answers and ends
	// with a FIN.
	rs := open(t, o.dial(pki.RoleClient, "rules-partial"))
	id := rs.send(tPing, nil)
	rs.write([]byte{0, 0, 0, 9, 0xa1, 0x01})
	rs.s.Close()
	f := rs.read()
	check(t, f.id == id && !f.hasErr, "4.4: the answer before a partial frame is sent, got %v", f)
	check(t, rs.ended(10*time.Second) == nil, "4.4: a stream ending inside a frame is finished without an error frame")
}

// TestOutsideIdentity is 1.1: a certificate of the deployment's CA whose
// edgereg URI SANs do not give exactly one role, or name an empty group,
// is refused: the connection fails with 0x11.
func TestOutsideIdentity(t *testing.T) {
	o := newOutside(t, nil)
	keyPEM, err := os.ReadFile(filepath.Join(o.ca.Local().Dir, "ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(keyPEM)
	caKey, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(uris ...string) *tls.Config {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(time.Now().UnixNano()),
			Subject:      pkix.Name{CommonName: "odd"},
			NotBefore:    time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
			KeyUsage:    x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}
		for _, u := range uris {
			pu, err := url.Parse(u)
			if err != nil {
				t.Fatal(err)
			}
			tmpl.URIs = append(tmpl.URIs, pu)
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, o.ca.Local().CA, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		cfg := o.tlsFor("", "")
		cfg.Certificates = []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}
		return cfg
	}
	for name, uris := range map[string][]string{
		"no role":                    nil,
		"two roles":                  {"edgereg://role/client", "edgereg://role/broker"},
		"an unknown role":            {"edgereg://role/king"},
		"an empty group":             {"edgereg://role/broker", "edgereg://broker-group/"},
		"another edgereg host":       {"edgereg://role/client", "edgereg://group/x"},
		"an edgereg URI with a port": {"edgereg://role:1/client"},
		"the same role twice":        {"edgereg://role/client", "edgereg://role/client"},
		"a role with a query":        {"edgereg://role/operator?scope=read"},
		"a role with a fragment":     {"edgereg://role/operator#x"},
		"a role with user info":      {"edgereg://admin@role/operator"},
		"a group with a query":       {"edgereg://role/broker", "edgereg://broker-group/g?x"},
		"a group with a fragment":    {"edgereg://role/broker", "edgereg://broker-group/g#x"},
		"a group with user info":     {"edgereg://role/broker", "edgereg://u:p@broker-group/g"},
	} {
		err := failedConn(t, o, issue(uris...))
		code, ok := connCode(err)
		check(t, ok && code == 0x11, "1.1/1.2: a certificate with %s fails with 0x11, got %v", name, err)
	}
	// Case-insensitive role and host, other schemes ignored: accepted.
	rs := open(t, func() *quic.Conn {
		qc, err := o.dialTLS(issue("EDGEREG://ROLE/Client", "https://example.com/x"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { qc.CloseWithError(0, "") })
		return qc
	}())
	f := rs.call(tClusterInfo, nil)
	check(t, !f.hasErr, "1.1: role names and hosts match case-insensitively, other schemes are ignored, got %v", f)
}

// TestOutsideKeyExchange is section 1's key exchange row.
func TestOutsideKeyExchange(t *testing.T) {
	hybrid := newOutside(t, nil)
	only := newOutside(t, func(c *node.Config) { c.TLSKeyExchange = "x25519" })
	for _, c := range []struct {
		o      *outside
		what   string
		curves []tls.CurveID
		ok     bool
	}{
		{hybrid, "a default node, X25519MLKEM768 offered", []tls.CurveID{tls.X25519MLKEM768}, true},
		{hybrid, "a default node, P-256 only", []tls.CurveID{tls.CurveP256}, true},
		{hybrid, "a default node, X25519 only", []tls.CurveID{tls.X25519}, true},
		{only, "an x25519 node, X25519 offered", []tls.CurveID{tls.X25519}, true},
		{only, "an x25519 node, P-256 only", []tls.CurveID{tls.CurveP256}, false},
		{only, "an x25519 node, the hybrid only", []tls.CurveID{tls.X25519MLKEM768}, false},
	} {
		cfg := c.o.tlsFor(pki.RoleClient, "kex")
		cfg.CurvePreferences = c.curves
		qc, err := c.o.dialTLS(cfg)
		if err == nil {
			qc.CloseWithError(0, "")
		}
		check(t, (err == nil) == c.ok, "1: %s: handshake ok %v, got %v", c.what, c.ok, err)
	}
}

// TestOutsideReaderShare is 1.2: readers together hold at most 90 % of
// the connections, so a broker still gets in.
func TestOutsideReaderShare(t *testing.T) {
	o := newOutside(t, func(c *node.Config) { c.MaxConns = 10; c.MaxConnsPerHost = 100 })
	for i := range 9 {
		open(t, o.dial(pki.RoleClient, fmt.Sprintf("share-%d", i))).ok(tPing, nil)
	}
	err := failedConn(t, o, o.tlsFor(pki.RoleClient, "share-over"))
	code, ok := connCode(err)
	check(t, ok && code == 0x12, "1.2: a 10th reader of 10 connections is over the readers' 90 %% (0x12), got %v", err)
	// The refused reader's place in the total is given back when its
	// close is done, so the broker may need a second try.
	cfg := o.tlsFor(pki.RoleBroker, "share-broker")
	var bc *quic.Conn
	for range 100 {
		if bc, err = o.dialTLS(cfg); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if check(t, err == nil, "1.2: a broker finds room beside readers at their share, got %v", err) {
		defer bc.CloseWithError(0, "")
		open(t, bc).ok(tPing, nil)
	}
}

func hasNull(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case []any:
		for _, e := range x {
			if hasNull(e) {
				return true
			}
		}
	case map[any]any:
		for _, e := range x {
			if hasNull(e) {
				return true
			}
		}
	}
	return false
}

// TestOutsideGroups is 7.6 and 10: acting masters, an address moving
// between groups, and a register that changes nothing.
func TestOutsideGroups(t *testing.T) {
	o := newOutside(t, nil)
	bs := open(t, o.dial(pki.RoleBroker, "groups-broker"))
	cs := open(t, o.dial(pki.RoleClient, "groups-reader"))
	route := func(topic string) (result, map[uint64][]map[uint64]any) {
		t.Helper()
		rr := routeResults(t, cs.ok(tGetRoutes, topicVersions(topic)))
		var r map[uint64][]map[uint64]any
		if len(rr) == 1 && rr[0].route != nil {
			strict.Unmarshal(rr[0].route, &r)
		}
		return rr[0], r
	}
	// Two slaves with ActingMaster, no master: the lowest-id slave shows
	// as id 0; its topics are read-only.
	for _, id := range []int{2, 1} {
		b := registerBody("gc", "g-act", id, fmt.Sprintf("10.12.0.%d:10911", id), 1, "ActTopic")
		b[7] = true
		bs.ok(tRegister, b)
	}
	res, r := route("ActTopic")
	if check(t, res.status == 0 && len(r[2]) == 1, "7.6: the slaves' route, got %+v", res) {
		addrs, _ := r[2][0][4].(map[any]any)
		check(t, asS(addrs[uint64(0)]) == "10.12.0.1:10911", "7.6: with ActingMaster the lowest-id slave shows as id 0, got %v", addrs)
		perm := asU(r[1][0][4])
		check(t, perm&2 == 0, "10: a prime slave's topics are read-only, perm %d", perm)
	}

	// 10: registering an address held in another group moves it.
	bs.ok(tRegister, registerBody("gc", "g-old", 0, "10.12.1.1:10911", 1, "OldTopic"))
	bs.ok(tRegister, registerBody("gc", "g-new", 0, "10.12.1.1:10911", 1, "NewTopic"))
	res, _ = route("OldTopic")
	check(t, res.status == 2, "10: the address left its old group, which disappeared with its topic, got %+v", res)
	f := cs.ok(tClusterInfo, nil)
	_, old := asMap2(f.m(t)[2])["g-old"]
	check(t, !old, "10: the emptied group disappeared from cluster-info")

	// 10: a new data version with the same topics changes no route.
	res1, _ := route("NewTopic")
	bs.ok(tRegister, registerBody("gc", "g-new", 0, "10.12.1.1:10911", 2, "NewTopic"))
	res2, _ := route("NewTopic")
	check(t, res1.version == res2.version && res1.version != 0, "10: same topics under a new data version keep the route's version (%x, %x)", res1.version, res2.version)

	// 8.12: a tombstone is lifted by an update-topics upserting the topic.
	ep := asU(asMap(t, bs.ok(tRegister, registerBody("gc", "g-new", 0, "10.12.1.1:10911", 3, "NewTopic", "Tomb")).m(t)[1])[1])
	op := open(t, o.dial(pki.RoleOperator, "groups-op"))
	op.ok(tDeleteTopic, map[uint64]any{1: "Tomb"})
	bs.ok(tRegister, registerBody("gc", "g-new", 0, "10.12.1.1:10911", 4, "NewTopic", "Tomb"))
	res, _ = route("Tomb")
	check(t, res.status == 2, "8.12: a register naming a deleted topic does not bring it back, got %+v", res)
	ep = asU(asMap(t, bs.ok(tRegister, registerBody("gc", "g-new", 0, "10.12.1.1:10911", 5, "NewTopic", "Tomb")).m(t)[1])[1])
	bs.ok(tUpdateTopics, map[uint64]any{1: "gc", 2: "10.12.1.1:10911", 3: ep, 4: map[uint64]any{1: uint64(1), 3: uint64(6)}, 5: []any{topicCfg("Tomb")}})
	res, _ = route("Tomb")
	check(t, res.status == 0, "8.12: an update-topics upserting it brings it back, got %+v", res)
}

// TestOutsideDecodingRulesEveryType runs section 3.2's rules over the body
// of every request type that has one: the node has hand-written decoders
// for some (register, heartbeat, update-topics, get-routes) and a general
// one for the rest, and every one must refuse and accept the same things.
func TestOutsideDecodingRulesEveryType(t *testing.T) {
	o := newOutside(t, nil)
	rs := open(t, o.dial(pki.RoleOperator, "every-type"))
	bases := []struct {
		typ  uint64
		body map[uint64]any
		str  uint64 // a text field to corrupt
		uint uint64 // an unsigned field, or 0
	}{
		{tRegister, registerBody("et", "et-a", 0, "10.13.0.1:10911", 1, "ET"), 1, 0},
		{tUpdateTopics, map[uint64]any{1: "et", 2: "10.13.0.1:10911", 3: uint64(1), 4: map[uint64]any{3: uint64(1)}, 6: []any{"ET2"}}, 1, 3},
		{tHeartbeat, map[uint64]any{1: "et", 2: "10.13.0.1:10911", 3: uint64(1), 4: map[uint64]any{3: uint64(1)}}, 1, 3},
		{tUnregister, map[uint64]any{1: "et", 2: "10.13.0.9:10911", 3: uint64(1)}, 1, 3},
		{tGetRoutes, topicVersions("ET"), 0, 0},
		{tTopics, map[uint64]any{1: uint64(0), 2: "et"}, 2, 1},
		{tMemberGroup, map[uint64]any{1: "et", 2: "et-a"}, 1, 0},
		{tWatch, topicVersions("ET"), 0, 0},
		{tUnwatch, map[uint64]any{1: []any{"ET"}}, 0, 0},
		{tDeleteTopic, map[uint64]any{1: "Nope"}, 1, 0},
		{tWipeWritePerm, map[uint64]any{1: "nope"}, 1, 0},
		{tKVGet, map[uint64]any{1: "ns", 2: "k"}, 1, 0},
		{tKVPut, map[uint64]any{1: "ns", 2: "k", 3: "v"}, 3, 0},
		{tPolicyRollbk, map[uint64]any{1: "route"}, 1, 0},
	}
	// call sends the frame bytes and returns the answer.
	call := func(cb []byte) frame {
		t.Helper()
		rs.write(withLen(cb))
		return rs.read()
	}
	frameOf := func(typ uint64, body []byte) []byte {
		return append(enc(t, map[uint64]any{1: typ, 2: uint64(0x77)})[:0:0], append(append([]byte{0xa3, 0x01}, enc(t, typ)...), append([]byte{0x02, 0x18, 0x77, 0x03}, body...)...)...)
	}
	// plus returns body with one more pair appended (body is a map of
	// fewer than 23 pairs, so its head is one byte).
	plus := func(body []byte, pair ...byte) []byte {
		out := append([]byte{body[0] + 1}, body[1:]...)
		return append(out, pair...)
	}
	for _, b := range bases {
		body := enc(t, b.body)
		base := call(frameOf(b.typ, body))
		if !check(t, !base.hasErr || base.code != eBadRequest, "type %d: the base body is valid, got %v", b.typ, base) {
			continue
		}
		same := func(what string, f frame) {
			t.Helper()
			check(t, f.typ == b.typ && f.id == 0x77 && f.hasErr == base.hasErr && f.code == base.code,
				"3.1/3.2: type %d, %s is accepted like the base body (%v), got %v", b.typ, what, base, f)
		}
		bad := func(what string, f frame) {
			t.Helper()
			check(t, f.hasErr && f.code == eBadRequest && f.typ == b.typ && f.id == 0x77,
				"3.2: type %d, %s is a bad body (code 1, its type and id), got %v", b.typ, what, f)
		}
		framing := func(what string, f frame) {
			t.Helper()
			check(t, f.hasErr && f.code == eBadRequest && f.typ == 0 && f.id == 0,
				"4.4: type %d, %s is a framing error (code 1, type 0, id 0), got %v", b.typ, what, f)
		}
		first := enc(t, b.body[1])
		if b.typ == tGetRoutes || b.typ == tWatch || b.typ == tUnwatch {
			first = enc(t, []any{}) // any value: the key is what repeats
		}
		bad("a duplicate key 1", call(frameOf(b.typ, plus(body, append([]byte{0x01}, first...)...))))
		bad("a duplicate key 1 in a wider form", call(frameOf(b.typ, plus(body, append([]byte{0x18, 0x01}, first...)...))))
		bad("a duplicate key inside an unknown key", call(frameOf(b.typ, plus(body, 0x18, 0x63, 0xa2, 0x01, 0x00, 0x01, 0x00))))
		same("an unknown key", call(frameOf(b.typ, plus(body, 0x18, 0x63, 0x82, 0x61, 0x61, 0xa1, 0x01, 0x02))))
		same("a text key", call(frameOf(b.typ, plus(body, 0x61, 0x7a, 0x00))))
		same("a negative key", call(frameOf(b.typ, plus(body, 0x38, 0x63, 0x00))))
		bad("a byte-string key", call(frameOf(b.typ, plus(body, 0x41, 0x7a, 0x00))))
		framing("a tag inside an unknown key", call(frameOf(b.typ, plus(body, 0x18, 0x63, 0xc1, 0x00))))
		framing("an indefinite string inside an unknown key", call(frameOf(b.typ, plus(body, 0x18, 0x63, 0x7f, 0x61, 0x61, 0xff))))
		framing("reserved additional information inside an unknown key", call(frameOf(b.typ, plus(body, 0x18, 0x63, 0x1d))))
		// 3.2 validates text decoded into a field: an unknown key's is not.
		same("invalid UTF-8 in an unknown key", call(frameOf(b.typ, plus(body, 0x18, 0x63, 0x62, 0xc3, 0x28))))
		if b.str != 0 {
			m := maps.Clone(b.body)
			m[b.str] = "\uFFFD" // replaced below by invalid bytes of the same length
			cb := enc(t, m)
			i := bytes.Index(cb, []byte("\uFFFD"))
			cb[i], cb[i+1], cb[i+2] = 0xed, 0xa0, 0x80 // an encoded surrogate
			bad(fmt.Sprintf("an encoded surrogate in key %d", b.str), call(frameOf(b.typ, cb)))
			m[b.str] = []byte("et")
			bad(fmt.Sprintf("a byte string for text key %d", b.str), call(frameOf(b.typ, enc(t, m))))
			m[b.str] = nil
			f := call(frameOf(b.typ, enc(t, m)))
			check(t, f.typ == b.typ && f.id == 0x77 && !(f.hasErr && f.code == eBadRequest && strings.Contains(f.msg, "cbor")),
				"3.1: type %d, null for key %d is the zero value, not a decoding error, got %v", b.typ, b.str, f)
		}
		if b.uint != 0 {
			m := maps.Clone(b.body)
			m[b.uint] = int64(-1)
			bad(fmt.Sprintf("a negative value for uint key %d", b.uint), call(frameOf(b.typ, enc(t, m))))
			m[b.uint] = 1.0
			bad(fmt.Sprintf("a float for uint key %d", b.uint), call(frameOf(b.typ, enc(t, m))))
			m[b.uint] = true
			bad(fmt.Sprintf("a bool for uint key %d", b.uint), call(frameOf(b.typ, enc(t, m))))
		}
		deep := append([]byte{0x18, 0x63}, append(bytes.Repeat([]byte{0x81}, 15), 0x00)...)
		framing("nesting 17 inside an unknown key", call(frameOf(b.typ, plus(body, deep...))))
		framing("an array head of 2^20+1 elements", call(frameOf(b.typ, plus(body, 0x18, 0x63, 0x9a, 0x00, 0x10, 0x00, 0x01))))
		framing("a map head of 2^20+1 pairs", call(frameOf(b.typ, plus(body, 0x18, 0x63, 0xba, 0x00, 0x10, 0x00, 0x01))))
		// Receivers do not require the deterministic encoding: the body's
		// pairs in reverse order and its integers in wider forms.
		same("pairs out of order", call(frameOf(b.typ, reversed(t, body))))
	}
	rs.alive("after every type's bad bodies")
}

// reversed re-encodes a map with its pairs in reverse order, keys as wide
// (two-byte) integers: valid CBOR, not deterministic.
func reversed(t *testing.T, body []byte) []byte {
	t.Helper()
	var mm map[uint64]cbor.RawMessage
	if err := strict.Unmarshal(body, &mm); err != nil {
		t.Fatal(err)
	}
	keys := make([]uint64, 0, len(mm))
	for k := range mm {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	slices.Reverse(keys)
	out := []byte{0xa0 + byte(len(keys))}
	for _, k := range keys {
		out = append(out, 0x18, byte(k))
		out = append(out, mm[k]...)
	}
	return out
}

// TestOutsideVectors is section 15: every request frame vector is a request
// the node answers with its type and id (not a decoding error), every
// vector is core deterministic CBOR a strict decoder reads, and every
// refused vector is refused as its file says.
func TestOutsideVectors(t *testing.T) {
	o := newOutside(t, nil)
	rs := open(t, o.dial(pki.RoleOperator, "vectors"))
	files, err := filepath.Glob(filepath.Join("..", "testdata", "wire", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("vectors: %v", err)
	}
	type vector struct {
		Hex     string
		Refused string
		Rule    string
	}
	load := func(path string) []byte {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var v vector
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		h, err := hex.DecodeString(v.Hex)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return h
	}
	for _, path := range files {
		name := filepath.Base(path)
		h := load(path)
		cb := h
		if strings.HasPrefix(name, "frame-") {
			if !check(t, len(h) > 4 && int(binary.BigEndian.Uint32(h)) == len(h)-4, "15: %s: the length prefix counts the CBOR bytes", name) {
				continue
			}
			cb = h[4:]
		}
		var v any
		if !check(t, strict.Unmarshal(cb, &v) == nil, "15: %s decodes under 3.2's rules", name) {
			continue
		}
		check(t, bytes.Equal(enc(t, v), cb), "15: %s is in the deterministic encoding", name)
		if strings.HasPrefix(name, "frame-") && strings.Contains(name, "-request") {
			f := decodeFrame(t, cb)
			rs.write(h)
			got := rs.read()
			// The policy vectors carry a stub module, which the node may
			// refuse as a module (code 1 naming it), not as a request.
			moduleRefused := got.hasErr && got.code == eBadRequest && strings.HasPrefix(got.msg, "policy module refused")
			check(t, got.typ == f.typ && got.id == f.id && (moduleRefused || !(got.hasErr && (got.code == eBadRequest || got.code == eUnknownType))),
				"15: the request vector %s is answered as a request of its type, got %v", name, got)
		}
	}
	refused, _ := filepath.Glob(filepath.Join("..", "testdata", "wire", "refused", "*.json"))
	check(t, len(refused) > 0, "15: refused vectors exist")
	for _, path := range refused {
		b, _ := os.ReadFile(path)
		var v vector
		json.Unmarshal(b, &v)
		cb := load(path)
		rs.write(withLen(cb))
		got := rs.read()
		name := filepath.Base(path)
		if v.Refused == "frame" {
			check(t, got.hasErr && got.code == eBadRequest && got.typ == 0 && got.id == 0, "15: %s (%s) is a framing error, got %v", name, v.Rule, got)
		} else {
			check(t, got.hasErr && got.code == eBadRequest && got.typ != 0, "15: %s (%s) is a bad body with its type and id, got %v", name, v.Rule, got)
		}
	}
}

// TestOutsideStopSending is 1.2's 0x21: a peer that stops reading the
// node's answers has the node stop reading its requests.
func TestOutsideStopSending(t *testing.T) {
	o := newOutside(t, nil)
	rs := open(t, o.dial(pki.RoleClient, "stop"))
	rs.ok(tPing, nil)
	rs.s.CancelRead(7)
	var err error
	for range 500 {
		if err = rs.write(request(t, tPing, 1, nil)); err != nil {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	code, ok := streamCode(err)
	check(t, ok && code == 0x21, "1.2: after the peer's STOP_SENDING the node stops reading with 0x21, got %v", err)
}

// TestOutsideBrokerSessionsKept is 1.2: a broker certificate at its limit
// replaces its idle connection (0x13) but never one holding a live
// session: the newcomer is closed with 0x12 instead.
func TestOutsideBrokerSessionsKept(t *testing.T) {
	o := newOutside(t, func(c *node.Config) { c.MaxBrokerConnsPerIdentity = 1 })
	cert := o.tlsFor(pki.RoleBroker, "one-broker")
	dial := func() *quic.Conn {
		qc, err := o.dialTLS(cert)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { qc.CloseWithError(0, "") })
		return qc
	}
	waitClosed := func(qc *quic.Conn) error {
		select {
		case <-qc.Context().Done():
			return context.Cause(qc.Context())
		case <-time.After(10 * time.Second):
			return nil
		}
	}
	idle := dial()
	open(t, idle).ok(tPing, nil)
	second := dial()
	open(t, second).ok(tPing, nil)
	code, ok := connCode(waitClosed(idle))
	check(t, ok && code == 0x13, "1.2: an idle broker connection is replaced with 0x13, got %v", context.Cause(idle.Context()))

	open(t, second).ok(tRegister, registerBody("kc", "k-a", 0, "10.14.0.1:10911", 1, "K"))
	third := dial()
	code, ok = connCode(waitClosed(third))
	check(t, ok && code == 0x12, "1.2: a newcomer beside a connection holding a live session is closed with 0x12, got %v", context.Cause(third.Context()))
	check(t, second.Context().Err() == nil, "1.2: the connection holding the session stays")
}

// TestOutsideNo0RTT is 1.2: nodes of this version accept no 0-RTT data; a
// resumed connection still works.
func TestOutsideNo0RTT(t *testing.T) {
	o := newOutside(t, nil)
	cfg := o.tlsFor(pki.RoleClient, "early")
	cfg.ClientSessionCache = tls.NewLRUClientSessionCache(4)
	qc, err := o.dialTLS(cfg)
	if err != nil {
		t.Fatal(err)
	}
	open(t, qc).ok(tPing, nil) // the node's session ticket arrives after the handshake
	qc.CloseWithError(0, "")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ec, err := quic.DialAddrEarly(ctx, o.tn.Addr(), cfg, &quic.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer ec.CloseWithError(0, "")
	rs := open(t, ec)
	rs.ok(tPing, nil)
	st := ec.ConnectionState()
	check(t, !st.Used0RTT, "1.2: the node accepted no 0-RTT data")
	check(t, st.TLS.DidResume, "1.2: session resumption still works")
}

// TestOutsideSameDataVersion is 10: a register whose data version equals
// the one held is not re-applied (only the lease is renewed).
func TestOutsideSameDataVersion(t *testing.T) {
	o := newOutside(t, nil)
	bs := open(t, o.dial(pki.RoleBroker, "same-dv"))
	e1 := asU(asMap(t, bs.ok(tRegister, registerBody("dv", "dv-a", 0, "10.15.0.1:10911", 7, "DvA")).m(t)[1])[1])
	e2 := asU(asMap(t, bs.ok(tRegister, registerBody("dv", "dv-a", 0, "10.15.0.1:10911", 7, "DvA", "DvB")).m(t)[1])[1])
	check(t, e1 != e2, "10: the repeated register still gets a new epoch")
	cs := open(t, o.dial(pki.RoleClient, "same-dv-reader"))
	rr := routeResults(t, cs.ok(tGetRoutes, topicVersions("DvA", "DvB")))
	check(t, len(rr) == 2 && rr[0].status == 0 && rr[1].status == 2, "10: a register of the data version held is not re-applied, got %+v", rr)
}

// TestOutsideAddresses is section 8's "addresses are host:port": a broker
// address is what clients dial, so one without a host, or whose port is
// not a number a client can dial (1-65535), is refused with code 1 in a
// register (Addr and HAAddr) and in every request naming a lease, and
// never reaches a route.
func TestOutsideAddresses(t *testing.T) {
	o := newOutside(t, nil)
	bs := open(t, o.dial(pki.RoleBroker, "addr-broker"))
	for _, addr := range []string{":10911", "10.16.0.1:", "10.16.0.1:abc", "10.16.0.1:0", "10.16.0.1:65536",
		"10.16.0.1:-1", "10.16.0.1:+1", "10.16.0.1:1 ", "[]:10911"} {
		bs.refused(fmt.Sprintf("8: register of address %q", addr), tRegister, registerBody("ad", "ad-a", 0, addr, 1, "AdTopic"), eBadRequest)
		ha := registerBody("ad", "ad-a", 0, "10.16.0.9:10911", 1, "AdTopic")
		ha[5] = addr
		bs.refused(fmt.Sprintf("8: register of HA address %q", addr), tRegister, ha, eBadRequest)
		bs.refused(fmt.Sprintf("8: heartbeat of address %q", addr), tHeartbeat, map[uint64]any{1: "ad", 2: addr, 3: uint64(1), 4: map[uint64]any{}}, eBadRequest)
		bs.refused(fmt.Sprintf("8: update-topics of address %q", addr), tUpdateTopics, map[uint64]any{1: "ad", 2: addr, 3: uint64(1), 4: map[uint64]any{}}, eBadRequest)
		bs.refused(fmt.Sprintf("8: unregister of address %q", addr), tUnregister, map[uint64]any{1: "ad", 2: addr, 3: uint64(1)}, eBadRequest)
	}
	for i, addr := range []string{"10.16.0.2:1", "10.16.0.3:65535", "[::1]:10911", "broker-1.example:10911"} {
		bs.ok(tRegister, registerBody("ad", fmt.Sprintf("ad-ok-%d", i), 0, addr, 1, "AdTopic"))
	}
	cs := open(t, o.dial(pki.RoleClient, "addr-reader"))
	rr := routeResults(t, cs.ok(tGetRoutes, topicVersions("AdTopic")))
	var route map[uint64][]map[uint64]any
	if len(rr) == 1 {
		strict.Unmarshal(rr[0].route, &route)
	}
	check(t, len(route[2]) == 4, "8: only the four valid addresses reached the route, got %v", route[2])
}

// TestOutsideControlCharacters is section 8's "without control
// characters" for the names a register stores: the C1 controls
// (U+0080-U+009F, NEL among them) are control characters as much as the
// C0 ones and DEL, and a broker that named its group or cluster with one
// would put it in every log line and route that names the group.
func TestOutsideControlCharacters(t *testing.T) {
	o := newOutside(t, nil)
	bs := open(t, o.dial(pki.RoleBroker, "ctl-broker"))
	for name, c := range map[string]struct{ cluster, group, zone string }{
		"a C0 control in the group": {"ctl", "g\x1b", ""},
		"DEL in the cluster":        {"ctl\x7f", "g", ""},
		"NEL in the group":          {"ctl", "g\u0085", ""},
		"U+009F in the cluster":     {"ctl\u009f", "g", ""},
		"U+0080 in the zone":        {"ctl", "g", "z\u0080"},
	} {
		b := registerBody(c.cluster, c.group, 0, "10.17.0.1:10911", 1, "CtlTopic")
		if c.zone != "" {
			b[6] = c.zone
		}
		bs.refused("8: a register with "+name, tRegister, b, eBadRequest)
	}
	// Other characters beyond ASCII are names' own business.
	bs.ok(tRegister, registerBody("ctl", "gruppe-ä-\u00a0-\u200b", 0, "10.17.0.2:10911", 1, "CtlTopic"))
}

// TestOutsideTransportParameters is what sections 1, 1.2 and 4.3 say a
// node's QUIC transport parameters grant, read from the parameters it
// sends in its handshake: no unidirectional streams, 100 bidirectional
// streams (or --max-streams-per-conn), a 60 s idle timeout, 64 KiB per
// stream and 128 KiB per connection at first, for readers and brokers.
func TestOutsideTransportParameters(t *testing.T) {
	def := newOutside(t, nil)
	small := newOutside(t, func(c *node.Config) { c.MaxStreamsPerConn = 7 })
	for _, c := range []struct {
		o       *outside
		role    pki.Role
		streams int64
	}{{def, pki.RoleClient, 100}, {def, pki.RoleBroker, 100}, {small, pki.RoleClient, 7}} {
		tr := &paramsTrace{}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		qc, err := quic.DialAddr(ctx, c.o.tn.Addr(), c.o.tlsFor(c.role, "params-"+string(c.role)), &quic.Config{
			Tracer: func(context.Context, bool, quic.ConnectionID) qlogwriter.Trace { return tr },
		})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		open(t, qc).ok(tPing, nil)
		qc.CloseWithError(0, "")
		p, ok := tr.node()
		if !check(t, ok, "1: the node sent its transport parameters") {
			continue
		}
		check(t, p.InitialMaxStreamsUni == 0, "1: a node allows no unidirectional streams, got %d", p.InitialMaxStreamsUni)
		check(t, p.InitialMaxStreamsBidi == c.streams, "1.2/4.3: %d concurrent streams, got %d", c.streams, p.InitialMaxStreamsBidi)
		check(t, p.MaxIdleTimeout == time.Minute, "1.2: the QUIC idle timeout is 60 s, got %v", p.MaxIdleTimeout)
		check(t, p.InitialMaxStreamDataBidiRemote == 64<<10 && p.InitialMaxData == 128<<10,
			"4.3: %s: receive windows of 64 KiB per stream and 128 KiB per connection at first, got %d and %d",
			c.role, p.InitialMaxStreamDataBidiRemote, p.InitialMaxData)
	}
}

// paramsTrace keeps the transport parameters a QUIC peer sent.
type paramsTrace struct {
	mu     sync.Mutex
	remote []qlog.ParametersSet
}

func (tr *paramsTrace) AddProducer() qlogwriter.Recorder { return tr }
func (tr *paramsTrace) Close() error                     { return nil }
func (tr *paramsTrace) RecordEvent(ev qlogwriter.Event) {
	if p, ok := ev.(qlog.ParametersSet); ok && p.Initiator == qlog.InitiatorRemote {
		tr.mu.Lock()
		tr.remote = append(tr.remote, p)
		tr.mu.Unlock()
	}
}

func (tr *paramsTrace) node() (qlog.ParametersSet, bool) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.remote) != 1 {
		return qlog.ParametersSet{}, false
	}
	return tr.remote[0], true
}

// TestOutsideWatchSendSideFinished is section 11's last rule: a client
// that finishes its send side ends its watch. The node answers the watch,
// finishes the stream (pushes it had not written are dropped, so a
// client must keep its send side open for as long as it watches) and
// gives the stream's topics back to the connection's cap.
func TestOutsideWatchSendSideFinished(t *testing.T) {
	o := newOutside(t, func(c *node.Config) { c.MaxWatchesPerConn = 1 })
	bs := open(t, o.dial(pki.RoleBroker, "fin-broker"))
	bs.ok(tRegister, registerBody("fw", "fw-a", 0, "10.18.0.1:10911", 1, "FinTopic"))
	qc := o.dial(pki.RoleClient, "fin-watcher")
	ws := open(t, qc)
	id := ws.send(tWatch, topicVersions("FinTopic"))
	ws.s.Close()
	var acked bool
	for {
		f, err := ws.next(10 * time.Second)
		if err != nil {
			check(t, errors.Is(err, io.EOF), "11: a watch whose client finished its send side ends with the node's FIN, got %v", err)
			break
		}
		switch {
		case f.typ == tWatch:
			acked = check(t, f.id == id && !f.hasErr, "11: the watch is answered, got %v", f)
		case f.typ == tRouteEvent:
			ev := eventResult(t, f)
			check(t, ev.topic == "FinTopic" && ev.status == 0, "11: a push written before the end is the topic's route, got %+v", ev)
		default:
			check(t, false, "11: only the WatchAck and pushes, got %v", f)
		}
	}
	check(t, acked, "11: the WatchAck came before the node's FIN")
	// The ended watch gave its topic back: another stream may watch one.
	var f frame
	for range 200 {
		if f = open(t, qc).call(tWatch, topicVersions("FinTopic")); !f.hasErr {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	check(t, !f.hasErr, "11: a watch ended by the client's FIN gives its topics back, got %v", f)
}

// TestOutsideReplacedByLastRequest is 1.2's replacement rule beyond the
// per-certificate limit: a certificate on a full source IP where it has
// connections replaces its own least recently active one (by last
// request, not by age) with 0x13, and never another certificate's.
func TestOutsideReplacedByLastRequest(t *testing.T) {
	o := newOutside(t, func(c *node.Config) { c.MaxConnsPerHost = 3 })
	cert := o.tlsFor(pki.RoleClient, "lru")
	dial := func() (*quic.Conn, *rawStream) {
		qc, err := o.dialTLS(cert)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { qc.CloseWithError(0, "") })
		rs := open(t, qc)
		rs.ok(tPing, nil)
		return qc, rs
	}
	older, olderStream := dial()
	newer, _ := dial()
	other := o.dial(pki.RoleClient, "lru-other")
	open(t, other).ok(tPing, nil)
	olderStream.ok(tPing, nil) // the older connection is now the more recently active
	third, _ := dial()
	select {
	case <-newer.Context().Done():
	case <-time.After(10 * time.Second):
	}
	code, ok := connCode(context.Cause(newer.Context()))
	check(t, ok && code == 0x13, "1.2: on a full source IP, the certificate's least recently active connection is replaced with 0x13, got %v", context.Cause(newer.Context()))
	check(t, older.Context().Err() == nil && third.Context().Err() == nil && other.Context().Err() == nil,
		"1.2: the connection used last, the newcomer and another certificate's connection stay")
}

// TestOutsideWatchEvents is more of 11: what the initial events say of
// topics not held and of versions already current, and that an unwatched
// topic is pushed no more.
func TestOutsideWatchEvents(t *testing.T) {
	o := newOutside(t, nil)
	bs := open(t, o.dial(pki.RoleBroker, "we-broker"))
	epoch := asU(asMap(t, bs.ok(tRegister, registerBody("we", "we-a", 0, "10.19.0.1:10911", 1, "WeCur", "WeOld", "WeDrop")).m(t)[1])[1])
	cs := open(t, o.dial(pki.RoleClient, "we-reader"))
	cur := routeResults(t, cs.ok(tGetRoutes, topicVersions("WeCur")))[0].version
	ws := open(t, o.dial(pki.RoleClient, "we-watcher"))
	ws.ok(tWatch, map[uint64]any{1: []any{
		map[uint64]any{1: "WeCur", 2: cur},        // current: no event
		map[uint64]any{1: "WeOld", 2: uint64(5)},  // another version: the route
		map[uint64]any{1: "WeGone", 2: uint64(7)}, // not held, a version named: not-found
		map[uint64]any{1: "WeNever"},              // not held, 0 named: no event
		map[uint64]any{1: "WeDrop"},               // held, 0 named: the route
	}})
	got := map[string]result{}
	for range 3 {
		ev := nextEvent(t, ws)
		got[ev.topic] = ev
	}
	check(t, got["WeOld"].status == 0 && got["WeOld"].version == routeVersion(got["WeOld"].route), "11: a topic named with another version gets its route, got %+v", got["WeOld"])
	check(t, got["WeGone"].status == 2 && got["WeGone"].route == nil, "11: a topic not held, named with a version, gets a not-found event, got %+v", got["WeGone"])
	check(t, got["WeDrop"].status == 0, "11: a held topic named with 0 gets its route, got %+v", got["WeDrop"])
	ws.ok(tUnwatch, map[uint64]any{1: []any{"WeDrop"}})
	// Change the unwatched topic, then a watched one: the next push is the
	// watched one's (the unwatched is pushed no more, the current one was
	// never pushed).
	up := func(counter uint64, topic string) {
		bs.ok(tUpdateTopics, map[uint64]any{1: "we", 2: "10.19.0.1:10911", 3: epoch, 4: map[uint64]any{3: counter},
			5: []any{map[uint64]any{1: topic, 2: uint64(2), 3: uint64(2), 4: uint64(6)}}})
	}
	up(2, "WeDrop")
	up(3, "WeCur")
	ev := nextEvent(t, ws)
	check(t, ev.topic == "WeCur" && ev.status == 0 && ev.version != cur, "11: after an unwatch the next push is of a watched topic, got %+v", ev)
}
