package node

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/edgereg/edgereg/wire/pki"
)

// QUIC application error codes for connections closed by admission.
const (
	codeTooManyConns quic.ApplicationErrorCode = 0x12
	codeReplaced     quic.ApplicationErrorCode = 0x13
)

// Reasons a connection is refused, as the refusal metric labels them.
const (
	refusedMaxConns    = "max_conns"           // the node's total, before the handshake
	refusedHandshakes  = "handshakes_per_host" // handshakes in progress from one IP
	refusedPerHost     = "conns_per_host"      // established connections of a class from one IP
	refusedClientShare = "client_share"        // clients may hold at most 90 % of MaxConns
	refusedPerIdentity = "conns_per_identity"  // a broker certificate's connections, every one holding a live session
	refusedNoIdentity  = "no_identity"         // the certificate carries no usable identity
	refusedQueue       = "handshake_queue"     // waited longer than HandshakeQueueTimeout for a handshake slot
)

// The classes of peers, each with a per-host budget of its own.
const (
	brokerClass connClass = iota // brokers and operators
	userClass                    // clients, nodes, anonymous peers
)

// connClass separates the peers whose connections keep the registry alive
// (brokers and operators) from the ones that read it (clients, nodes,
// anonymous peers), so a flood of readers never takes a broker's place.
type connClass uint8

func (c connClass) String() string {
	if c == brokerClass {
		return "broker"
	}
	return "client"
}

func classOf(p peer) connClass {
	if !p.anonymous && (p.Role == pki.RoleBroker || p.Role == pki.RoleOperator) {
		return brokerClass
	}
	return userClass
}

// admission bounds connections in three steps:
//
//  1. before the handshake (quic.Transport.ConnContext), by the node's total
//     and by handshakes in progress per source IP, so refusing is cheap;
//  2. once the certificate is known, by established connections per source
//     IP for each class (brokers and operators have a budget of their own),
//     and for readers by connections per identity (a certificate; an
//     anonymous peer has none);
//  3. an identity over its own limit, or on a full host where it already has
//     connections, replaces its least recently active connection instead of
//     being refused: a broker that restarts reconnects at once, and the dead
//     connection of its previous life does not hold a slot until the idle
//     timeout. An identity can only ever push out its own connections, and
//     a broker never one that holds a live broker session (the lease last
//     registered or renewed over it): brokers that share one certificate
//     do not push each other out.
//
// Besides, the TLS work itself is bounded node-wide (handshakeGate): a
// handshake waits for one of MaxHandshakes slots before the node spends CPU
// on it.
//
// Lock: mu guards every count; it is never held while calling into quic-go
// or logging. The gate has no lock of its own (a channel): releasing a slot
// with mu held is safe.
type admission struct {
	max, clientMax, handshakesPerHost int
	perHost                           [2]int // by class
	perIdentity                       [2]int // by class

	mu          sync.Mutex
	total       int
	handshakes  int                    // handshakes in progress, every host
	clients     int                    // established reader connections
	handshaking map[string]int         // source IP -> handshakes in progress
	hosts       [2]map[string]int      // by class: source IP -> established
	idents      map[string][]*admitted // identity -> its established connections
	anonymous   map[string][]*admitted // source IP -> its established anonymous connections

	// sessions maps each broker lease (cluster, address) to the
	// connection it was last registered or renewed over; leaseLive reports
	// whether the registry still holds a lease. A connection holding a
	// live session is never replaced (see place).
	sessions  map[sessionKey]*admitted
	leaseLive func(cluster, addr string) bool

	gate *handshakeGate

	// windows is what brokers' connection receive windows may grow by,
	// node-wide (allowWindowIncrease).
	windows windowBudget

	// Handshakes that timed out and ones that completed in the evidence
	// window that began at evidenceSince, and in the window before it.
	timeouts, prevTimeouts   int
	completed, prevCompleted int
	evidenceSince            time.Time

	onValidate func() // a new peer is asked for a Retry
	onRefuse   func(reason string, a *admitted, p *peer)
	onReplace  func(victim *admitted)
	onFailure  func(a *admitted, cause error)
}

// admitted is one connection that passed the first step.
type admitted struct {
	host        string
	remote      string
	class       connClass
	ident       string // "" for an anonymous peer
	qc          *quic.Conn
	established bool // handshake done and seen by serveConn; guarded by admission.mu
	released    bool // the connection ended; guarded by admission.mu
	counted     bool // held in hosts and idents; guarded by admission.mu
	last        atomic.Int64
	sessions    []sessionKey // leases renewed over this connection; guarded by admission.mu
	slot        *gateSlot    // the handshake slot held; guarded by admission.mu
	keepSlot    bool         // a broker keeps its slot until it registers; guarded by admission.mu

	windowGrows bool  // its receive window may grow (a broker's); guarded by windows.mu
	windowGrown int64 // what its window grew by, from the budget; guarded by windows.mu
}

// giveBackSlot returns a's handshake slot, if it holds one. With
// admission.mu held.
func (a *admitted) giveBackSlot() {
	if a.slot != nil {
		a.slot.release()
		a.slot = nil
	}
}

// touch records activity (a request), for choosing which of an identity's
// connections to replace. Safe on nil.
func (a *admitted) touch(now time.Time) {
	if a != nil {
		a.last.Store(now.UnixNano())
	}
}

type admittedKey struct{}

// sessionKey names a broker's lease.
type sessionKey struct{ cluster, addr string }

// holdSession records that the lease of the broker at addr was just
// registered or renewed over a's connection. Safe on nil.
func (ad *admission) holdSession(a *admitted, cluster, addr string) {
	if a == nil {
		return
	}
	k := sessionKey{cluster, addr}
	ad.mu.Lock()
	defer ad.mu.Unlock()
	a.giveBackSlot() // registered: the storm's work for this broker is done
	if a.released {
		return
	}
	ad.sessions[k] = a
	if slices.Contains(a.sessions, k) {
		return
	}
	if len(a.sessions) == maxSessionsPerConn { // bounded: forget the oldest
		if ad.sessions[a.sessions[0]] == a {
			delete(ad.sessions, a.sessions[0])
		}
		a.sessions = a.sessions[1:]
	}
	a.sessions = append(a.sessions, k)
}

// maxSessionsPerConn bounds the leases one connection is remembered to
// hold (a broker agent registers one address; a proxy may carry a few).
const maxSessionsPerConn = 8

// holdsLiveSession reports, with mu held, whether a is the connection a
// live lease was last renewed over. Lock order: admission.mu, then the
// registry's lease lock (leaseLive); the registry never calls back.
func (ad *admission) holdsLiveSession(a *admitted) bool {
	for _, k := range a.sessions {
		if ad.sessions[k] == a && (ad.leaseLive == nil || ad.leaseLive(k.cluster, k.addr)) {
			return true
		}
	}
	return false
}

// dropSessions forgets the sessions of a connection that ended. With mu
// held.
func (ad *admission) dropSessions(a *admitted) {
	for _, k := range a.sessions {
		if ad.sessions[k] == a {
			delete(ad.sessions, k)
		}
	}
	a.sessions = nil
}

func newAdmission(cfg Config) *admission {
	return &admission{
		max:               cfg.MaxConns,
		clientMax:         cfg.MaxConns - cfg.MaxConns/10,
		handshakesPerHost: cfg.MaxHandshakesPerHost,
		perHost:           [2]int{brokerClass: cfg.MaxBrokerConnsPerHost, userClass: cfg.MaxConnsPerHost},
		perIdentity:       [2]int{brokerClass: cfg.MaxBrokerConnsPerIdentity, userClass: cfg.MaxConnsPerIdentity},
		handshaking:       make(map[string]int),
		hosts:             [2]map[string]int{make(map[string]int), make(map[string]int)},
		idents:            make(map[string][]*admitted),
		anonymous:         make(map[string][]*admitted),
		sessions:          make(map[sessionKey]*admitted),
		gate:              newHandshakeGate(cfg.MaxHandshakes, cfg.HandshakeQueueTimeout, handshakeSlotHold),
		windows:           windowBudget{left: int64(cfg.MaxBytesInFlight)},
	}
}

var errTooManyConns = errors.New("connection limit reached")

// admit is the first step, before the handshake.
func (ad *admission) admit(ctx context.Context, info *quic.ClientInfo) (context.Context, error) {
	a := &admitted{host: hostOfAddr(info.RemoteAddr), remote: info.RemoteAddr.String()}
	ad.mu.Lock()
	reason := ""
	switch {
	case ad.total >= ad.max:
		reason = refusedMaxConns
	case ad.handshaking[a.host] >= ad.handshakesPerHost:
		reason = refusedHandshakes
	default:
		ad.total++
		ad.handshakes++
		ad.handshaking[a.host]++
	}
	ad.mu.Unlock()
	if reason != "" {
		ad.refuse(reason, a, nil)
		return nil, errTooManyConns
	}
	context.AfterFunc(ctx, func() { ad.release(a, context.Cause(ctx)) })
	return context.WithValue(ctx, admittedKey{}, a), nil
}

// verifySource is quic.Transport.VerifySourceAddress: it decides when a
// new peer must first prove its source address with a Retry (one round
// trip more). A peer that never receives what the node sends (a spoofed
// address) cannot pass one, so it cannot take a connection slot for the
// handshake idle timeout, and a flood of Initials cannot fill MaxConns
// and lock brokers out.
//
// A Retry is not free for honest peers: quic-go queues at most 8 Retries
// to send and drops the Initials beyond them, so in a storm most peers
// lose their first Initial and wait out a retransmission timer that
// doubles each time. Peers are therefore asked for one only when
// in-progress handshakes reach half of MaxConns (spoofers can take at
// most half the slots before that), or, once handshakes have been timing
// out (spoofed), as soon as as many are in progress as one host may run
// or a quarter of MaxConns. An honest storm, whose handshakes finish once
// they get their turn, is not slowed.
func (ad *admission) verifySource(net.Addr) bool {
	ad.mu.Lock()
	ask := ad.handshakes >= ad.validationThreshold(time.Now())
	ad.mu.Unlock()
	if ask && ad.onValidate != nil {
		ad.onValidate()
	}
	return ask
}

// validationThreshold is the number of handshakes in progress from which
// a new peer must answer a Retry. With ad.mu held.
func (ad *admission) validationThreshold(now time.Time) int {
	if ad.spoofed(now) {
		return max(min(ad.handshakesPerHost, ad.max/4), 1)
	}
	return max(ad.max/2, 1)
}

// Handshakes that timed out within an evidence window or the one before
// make the node ask for Retries early (validationThreshold) when there are
// at least timeoutEvidence of them and they are at least an eighth as many
// as the handshakes that completed meanwhile. A peer that never receives
// the node's packets (a spoofed address) times out every handshake it
// starts; an honest storm almost none (0-3 of 10,000 here). Handshakes
// that merely held their slot past handshakeSlotHold are no evidence: on a
// saturated machine 108-517 of 10,000 honest ones did, and counting those
// turned Retries on for the rest of the storm (22,000-34,000 Retries asked
// per storm, one of them 28 s long with 5,847 redials). Until the evidence
// is in (a handshake idle timeout, 5-10 s), half of MaxConns bounds what
// spoofed Initials can hold.
const (
	evidenceWindow  = 30 * time.Second
	timeoutEvidence = 16
	timeoutShare    = 8 // timeouts * timeoutShare >= completed handshakes
)

// noteTimeout counts one handshake that timed out. With ad.mu held.
func (ad *admission) noteTimeout(now time.Time) {
	ad.rollEvidence(now)
	ad.timeouts++
}

// noteCompleted counts one handshake that completed. With ad.mu held.
func (ad *admission) noteCompleted(now time.Time) {
	ad.rollEvidence(now)
	ad.completed++
}

// spoofed reports whether the handshakes that timed out in this evidence
// window and the one before are evidence of spoofing (timeoutEvidence,
// timeoutShare). With ad.mu held.
func (ad *admission) spoofed(now time.Time) bool {
	ad.rollEvidence(now)
	timeouts, completed := ad.timeouts+ad.prevTimeouts, ad.completed+ad.prevCompleted
	return timeouts >= timeoutEvidence && timeouts*timeoutShare >= completed
}

func (ad *admission) rollEvidence(now time.Time) {
	switch since := now.Sub(ad.evidenceSince); {
	case since >= 2*evidenceWindow:
		ad.timeouts, ad.prevTimeouts, ad.evidenceSince = 0, 0, now
		ad.completed, ad.prevCompleted = 0, 0
	case since >= evidenceWindow:
		ad.timeouts, ad.prevTimeouts, ad.evidenceSince = 0, ad.timeouts, ad.evidenceSince.Add(evidenceWindow)
		ad.completed, ad.prevCompleted = 0, ad.completed
	}
}

// handshakeTimedOut reports whether a handshake ended by timing out: no
// packet from the peer for the handshake idle timeout.
func handshakeTimedOut(cause error) bool {
	var ht *quic.HandshakeTimeoutError
	var it *quic.IdleTimeoutError
	return errors.As(cause, &ht) || errors.As(cause, &it)
}

func hostOfAddr(addr net.Addr) string {
	if ua, ok := addr.(*net.UDPAddr); ok {
		return ua.IP.String()
	}
	return hostOf(addr.String())
}

// release runs when a connection ends, however it ends.
func (ad *admission) release(a *admitted, cause error) {
	ad.mu.Lock()
	ad.total--
	a.released = true
	a.giveBackSlot()
	failed := !a.established
	if failed {
		ad.doneHandshaking(a)
		if handshakeTimedOut(cause) {
			ad.noteTimeout(time.Now())
		}
	}
	ad.uncount(a)
	ad.dropSessions(a)
	ad.windows.giveBack(a)
	ad.mu.Unlock()
	if failed && ad.onFailure != nil {
		ad.onFailure(a, cause) // the handshake never completed
	}
}

// settle marks a connection whose handshake completed but that will not be
// established (its certificate carries no usable identity).
func (ad *admission) settle(qc *quic.Conn) {
	a, _ := qc.Context().Value(admittedKey{}).(*admitted)
	if a == nil {
		return
	}
	ad.mu.Lock()
	defer ad.mu.Unlock()
	if !a.released && !a.established {
		a.established = true
		ad.noteCompleted(time.Now())
		ad.doneHandshaking(a)
	}
}

func (ad *admission) doneHandshaking(a *admitted) {
	if !a.keepSlot {
		a.giveBackSlot()
	}
	ad.handshakes--
	if ad.handshaking[a.host]--; ad.handshaking[a.host] <= 0 {
		delete(ad.handshaking, a.host)
	}
}

// enterHandshake is tls.Config.GetConfigForClient's first step: it waits
// for a handshake slot (handshakeGate) before the node does a handshake's
// key exchange, signature and certificate checks. The slot is given back
// when the handshake ends (doneHandshaking), for a broker or operator
// when it first registers or heartbeats (holdSession), or after
// handshakeSlotHold (brokerSlotHold from the end of a broker's handshake).
// A handshake that waits longer than HandshakeQueueTimeout fails, cheaply:
// its client has most likely given up by then.
func (ad *admission) enterHandshake(ctx context.Context) error {
	a, _ := ctx.Value(admittedKey{}).(*admitted)
	slot, err := ad.gate.enter(ctx)
	if err != nil {
		if a != nil && errors.Is(err, errHandshakeQueueTimeout) {
			ad.refuse(refusedQueue, a, nil)
		}
		return err
	}
	if a == nil { // not admitted by this node's transport (cannot happen)
		slot.release()
		return nil
	}
	ad.mu.Lock()
	defer ad.mu.Unlock()
	if a.released || a.established || a.slot != nil {
		slot.release()
		return nil
	}
	a.slot = slot
	return nil
}

// establish is the second and third steps, once the peer's identity is
// known. It returns false when the connection must be refused; the caller
// closes it. A replaced connection is closed here.
func (ad *admission) establish(qc *quic.Conn, p *peer) (*admitted, bool) {
	a, _ := qc.Context().Value(admittedKey{}).(*admitted)
	if a == nil { // not admitted by this node's transport (cannot happen)
		return nil, true
	}
	class, ident := classOf(*p), identityKey(qc, p)
	a.touch(time.Now()) // wall clock, as handle's touches: only the order matters
	ad.mu.Lock()
	if a.released || a.established { // closed meanwhile; release has run
		ad.mu.Unlock()
		return a, false
	}
	a.qc, a.class, a.ident = qc, class, ident
	a.established = true
	ad.noteCompleted(time.Now())
	// A broker (or operator) keeps its handshake slot until its first
	// registration or heartbeat (holdSession), at most handshakeSlotHold:
	// in a reconnect storm the node finishes the registrations of the
	// brokers it has let in before it starts on more handshakes, so none
	// of them waits past its request timeout behind new handshakes.
	//
	// Slots kept that way count against the host's handshakes in progress
	// (MaxHandshakesPerHost): otherwise one certificate on one IP that
	// connects again and again and never registers would hold every slot
	// of the node, and no one anywhere could finish a handshake.
	a.keepSlot = class == brokerClass && a.slot != nil &&
		a.slot.keep(a.host, ad.handshakesPerHost-(ad.handshaking[a.host]-1))
	if a.keepSlot {
		a.slot.extend(brokerSlotHold)
	}
	ad.doneHandshaking(a)
	victim, reason := ad.place(a)
	if reason == "" {
		if victim != nil {
			ad.uncount(victim)
		}
		ad.countLocked(a)
		if class == brokerClass {
			ad.windows.letGrow(a)
		}
	}
	ad.mu.Unlock()
	if victim != nil {
		why := "replaced by a newer connection with the same certificate"
		if victim.ident == "" {
			why = "replaced by a peer with a certificate: anonymous peers give way to them on a full node or source IP"
		}
		victim.qc.CloseWithError(codeReplaced, why)
		if ad.onReplace != nil {
			ad.onReplace(victim)
		}
	}
	if reason != "" {
		ad.refuse(reason, a, p)
		return a, false
	}
	return a, true
}

// place decides, with mu held, whether a fits and which of its identity's
// connections it replaces. One replacement is always enough: the victim is
// of a's identity, so of its class, and on a's host when the host is full.
// Nothing is replaced for a connection that is refused anyway.
func (ad *admission) place(a *admitted) (victim *admitted, reason string) {
	mine := ad.idents[a.ident] // none for an anonymous peer
	hostFull := ad.hosts[a.class][a.host] >= ad.perHost[a.class]
	identFull := a.ident != "" && len(mine) >= ad.perIdentity[a.class]
	shareFull := a.class == userClass && ad.clients >= ad.clientMax
	switch {
	case hostFull:
		// Only a connection without a live broker session may go: brokers
		// sharing one certificate never push each other out, while the
		// dead connection of a restarted broker (its lease renewed over
		// its new connection, or ended) still frees its slot at once.
		victim = ad.oldestReplaceable(mine, a.host)
	case identFull && a.class == brokerClass:
		// As on a full host: one certificate from many IPs cannot take
		// every connection of the node, and its brokers with live
		// sessions are not pushed out by a newcomer.
		if victim = ad.oldestReplaceable(mine, ""); victim == nil {
			return nil, refusedPerIdentity
		}
	case identFull:
		victim = oldest(mine, "")
	}
	if victim == nil && (hostFull || shareFull) && a.ident != "" && !identFull && a.class == userClass {
		// Anonymous peers give way to certificates: they have no identity
		// to be limited by, so without this one anonymous peer could hold
		// every reader slot of its IP (or, from many IPs, the readers'
		// share of the node) and lock out the readers with a certificate.
		host := ""
		if hostFull {
			host = a.host
		}
		victim = ad.oldestAnonymous(host)
	}
	switch {
	case hostFull && victim == nil:
		return nil, refusedPerHost
	case shareFull && victim == nil:
		return nil, refusedClientShare
	}
	return victim, ""
}

// oldestAnonymous is the least recently active anonymous connection on
// host, or anywhere when host is "". With mu held.
func (ad *admission) oldestAnonymous(host string) *admitted {
	if host != "" {
		return oldest(ad.anonymous[host], "")
	}
	var o *admitted
	for _, list := range ad.anonymous {
		if c := oldest(list, ""); c != nil && (o == nil || c.last.Load() < o.last.Load()) {
			o = c
		}
	}
	return o
}

func (ad *admission) countLocked(a *admitted) {
	a.counted = true
	ad.hosts[a.class][a.host]++
	if a.class == userClass {
		ad.clients++
	}
	switch {
	case a.ident != "":
		ad.idents[a.ident] = append(ad.idents[a.ident], a)
	case a.class == userClass:
		ad.anonymous[a.host] = append(ad.anonymous[a.host], a)
	}
}

func (ad *admission) uncount(a *admitted) {
	if !a.counted {
		return
	}
	a.counted = false
	if ad.hosts[a.class][a.host]--; ad.hosts[a.class][a.host] <= 0 {
		delete(ad.hosts[a.class], a.host)
	}
	if a.class == userClass {
		ad.clients--
	}
	switch {
	case a.ident != "":
		removeConn(ad.idents, a.ident, a)
	case a.class == userClass:
		removeConn(ad.anonymous, a.host, a)
	}
}

// removeConn takes a out of m[key], and key out of m once it holds none.
func removeConn(m map[string][]*admitted, key string, a *admitted) {
	list := m[key]
	for i, c := range list {
		if c == a {
			list = append(list[:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(m, key)
	} else {
		m[key] = list
	}
}

// oldestReplaceable is oldest among the connections of list on host (any
// host when host is "") that hold no live broker session. With mu held.
func (ad *admission) oldestReplaceable(list []*admitted, host string) *admitted {
	var o *admitted
	for _, c := range list {
		if (host != "" && c.host != host) || (c.class == brokerClass && ad.holdsLiveSession(c)) {
			continue
		}
		if o == nil || c.last.Load() < o.last.Load() {
			o = c
		}
	}
	return o
}

// oldest returns the least recently active connection of list, on host
// when host is set.
func oldest(list []*admitted, host string) *admitted {
	var o *admitted
	for _, c := range list {
		if host != "" && c.host != host {
			continue
		}
		if o == nil || c.last.Load() < o.last.Load() {
			o = c
		}
	}
	return o
}

// identityKey names the certificate a peer presented (its SHA-256), or ""
// for an anonymous peer.
func identityKey(qc *quic.Conn, p *peer) string {
	if p.anonymous {
		return ""
	}
	chains := qc.ConnectionState().TLS.VerifiedChains
	if len(chains) == 0 || len(chains[0]) == 0 {
		return ""
	}
	sum := sha256.Sum256(chains[0][0].Raw)
	return hex.EncodeToString(sum[:16])
}

func (ad *admission) refuse(reason string, a *admitted, p *peer) {
	if ad.onRefuse != nil {
		ad.onRefuse(reason, a, p)
	}
}

// handshakeSlotHold bounds how long one handshake keeps its slot: longer
// than a handshake takes on a slow link (a few round trips and the
// client's own CPU time), short enough that peers which stall their
// handshakes cannot keep the slots from everyone else for long. The
// handshake itself may go on; it just no longer counts.
//
// Who shares the slots: every peer. One source IP has at most
// MaxHandshakesPerHost (128) handshakes in progress, and a stalled one
// stays in progress for the handshake idle timeout (10 s) while holding a
// slot for 2 s of it, so one IP that stalls every handshake holds about
// 128 x 2/10 = 26 slots on average; filling the default 512 slots takes
// some 20 such IPs (and under a flood each must first answer a Retry, so
// they are real addresses). Honest handshakes are then delayed, in
// order, not refused, until they wait HandshakeQueueTimeout.
const handshakeSlotHold = 2 * time.Second

// brokerSlotHold bounds how long an authenticated broker or operator keeps
// its slot, from the end of its handshake, waiting to register.
const brokerSlotHold = 5 * time.Second

var (
	errHandshakeQueueTimeout = errors.New("node busy: no handshake slot within the queue timeout")
	errGateClosed            = errors.New("node shutting down")
)

// handshakeGate bounds the handshakes the node works on at once. Without
// it, a storm of reconnecting brokers shares the CPU among every
// handshake in progress, so each one takes as long as all of them: past
// the clients' dial timeout, every one fails, the clients redial and the
// node's work is lost. With the gate, handshakes complete first come,
// first served at the node's full rate, and those waiting cost nothing but
// a parked goroutine (their Initial retransmissions queue in quic-go).
// Waiters are served in arrival order (a channel's queue of senders is
// FIFO).
type handshakeGate struct {
	slots     chan struct{}
	wait      time.Duration // longest a handshake waits for a slot
	hold      time.Duration // longest a handshake keeps its slot
	closed    chan struct{}
	closeOnce sync.Once
	waiting   atomic.Int64 // handshakes waiting for a slot now

	keepMu  sync.Mutex     // a leaf lock: admission.mu may be held
	keeping map[string]int // source IP -> slots kept past handshakes (gateSlot.keep); guarded by keepMu
}

func newHandshakeGate(slots int, wait, hold time.Duration) *handshakeGate {
	return &handshakeGate{slots: make(chan struct{}, slots), wait: wait, hold: hold, closed: make(chan struct{}),
		keeping: make(map[string]int)}
}

// enter takes a slot, waiting at most g.wait. The slot is given back by
// its release, or by the hold timer.
func (g *handshakeGate) enter(ctx context.Context) (*gateSlot, error) {
	select {
	case g.slots <- struct{}{}:
	default:
		g.waiting.Add(1)
		defer g.waiting.Add(-1)
		t := time.NewTimer(g.wait)
		defer t.Stop()
		select {
		case g.slots <- struct{}{}:
		case <-t.C:
			return nil, errHandshakeQueueTimeout
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-g.closed:
			return nil, errGateClosed
		}
	}
	s := &gateSlot{g: g}
	s.hold = time.AfterFunc(g.hold, s.free)
	return s, nil
}

// gateSlot is one handshake's slot in the gate.
type gateSlot struct {
	g    *handshakeGate
	once sync.Once
	hold *time.Timer

	keptBy string // the host it is kept for (keep); guarded by g.keepMu
	freed  bool   // guarded by g.keepMu
}

func (s *gateSlot) free() {
	s.once.Do(func() {
		<-s.g.slots
		s.g.keepMu.Lock()
		s.freed = true
		if h := s.keptBy; h != "" {
			if s.g.keeping[h]--; s.g.keeping[h] <= 0 {
				delete(s.g.keeping, h)
			}
		}
		s.g.keepMu.Unlock()
	})
}

// keep counts the slot among those host keeps past their handshakes,
// unless host already keeps limit or more; it reports whether it did. A
// slot already free is not kept.
func (s *gateSlot) keep(host string, limit int) bool {
	s.g.keepMu.Lock()
	defer s.g.keepMu.Unlock()
	if s.freed || s.keptBy != "" || s.g.keeping[host] >= limit {
		return false
	}
	s.keptBy = host
	s.g.keeping[host]++
	return true
}

// release gives the slot back; safe to call more than once.
func (s *gateSlot) release() {
	s.hold.Stop()
	s.free()
}

// extend lets the slot be held for d from now instead (a no-op once the
// slot is free).
func (s *gateSlot) extend(d time.Duration) { s.hold.Reset(d) }

// close wakes every waiting handshake, which fails: quic-go's listener
// waits for handshakes in progress when it closes.
func (g *handshakeGate) close() { g.closeOnce.Do(func() { close(g.closed) }) }

// Connection receive windows. Data a peer has sent and the node has not
// read yet sits in quic-go's buffers, outside the byte budgets of
// conn.go, up to the connection's receive window; quic-go grows a window
// that is read fast (auto-tuning) up to quic.Config's
// MaxConnectionReceiveWindow. quic-go's defaults (15 MiB a connection)
// let one peer that sends fast, then into streams the node is not reading
// (their answers unread, or waiting for a byte budget), make the node
// hold 15 MiB per connection, 960 MiB from one IP's 64 reader
// connections. The initial windows are one setting for every connection,
// but each increase is asked of allowWindowIncrease with the connection:
//
//   - a reader's requests are small, so its window never grows past
//     connWindow: one IP's readers hold at most 64 x 128 KiB = 8 MiB
//     unread;
//   - a broker's or operator's window grows, for large registrations, up
//     to maxConnWindow, and all of their growth together comes from one
//     node-wide budget of MaxBytesInFlight, given back as connections end.
const (
	// streamWindow is a stream's initial receive window: a request, a
	// registration of a few hundred topics.
	streamWindow = 64 << 10
	// connWindow is a connection's initial receive window, and a
	// reader's for good.
	connWindow = 128 << 10
	// maxStreamWindow and maxConnWindow bound a broker's windows
	// (quic-go's defaults, 6 and 15 MiB, rounded up to a broker frame).
	maxStreamWindow = 8 << 20
	maxConnWindow   = 16 << 20
)

// windowBudget is what brokers' connection windows may grow by, over the
// whole node.
type windowBudget struct {
	// mu is a leaf lock: quic-go holds its flow controller's lock when it
	// asks allowWindowIncrease, and admission.mu may be held around
	// letGrow and giveBack.
	mu   sync.Mutex
	left int64
}

// letGrow lets a's window grow (a broker's or operator's connection,
// once established).
func (w *windowBudget) letGrow(a *admitted) {
	w.mu.Lock()
	a.windowGrows = true
	w.mu.Unlock()
}

// giveBack returns what a's window grew by, once its connection ended.
func (w *windowBudget) giveBack(a *admitted) {
	w.mu.Lock()
	a.windowGrows = false
	w.left += a.windowGrown
	a.windowGrown = 0
	w.mu.Unlock()
}

// allowWindowIncrease is quic.Config.AllowConnectionWindowIncrease: a
// reader's window never grows, a broker's by delta if the node-wide
// budget has it. It runs inside quic-go (with its flow controller locked)
// and so calls nothing on the connection but its Context.
func (ad *admission) allowWindowIncrease(qc *quic.Conn, delta uint64) bool {
	a, _ := qc.Context().Value(admittedKey{}).(*admitted)
	if a == nil {
		return false
	}
	w := &ad.windows
	w.mu.Lock()
	defer w.mu.Unlock()
	if !a.windowGrows || delta > uint64(w.left) {
		return false
	}
	w.left -= int64(delta)
	a.windowGrown += int64(delta)
	return true
}
