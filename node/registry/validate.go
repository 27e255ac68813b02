package registry

import (
	"fmt"
	"unicode/utf8"

	"github.com/edgereg/edgereg/wire"
)

// Name limits, from RocketMQ's broker config; topic names follow
// wire.ValidTopicName.
const (
	MaxNameLen = 255 // cluster, broker group, zone and address
)

// ValidTopicName reports why a topic name is invalid (see
// wire.ValidTopicName); the error wraps ErrInvalid.
func ValidTopicName(name string) error {
	if err := wire.ValidTopicName(name); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// ValidName reports why a required name (cluster, broker group) is
// invalid: empty, over MaxNameLen bytes, not UTF-8 or holding a control
// character (C0, DEL or C1: U+0000-U+001F, U+007F-U+009F). The error wraps
// ErrInvalid, so a peer gets code 1: a lookup by such a name is a bad
// request, never "not found" (PROTOCOL.md 8).
func ValidName(what, s string) error { return validName(what, s, true) }

// ValidAddr is ValidName for a required broker address, which must also be
// host:port with a host and a port of 1-65535 (wire.CheckHostPort).
func ValidAddr(what, addr string) error { return validAddr(what, addr, true) }

func validName(what, s string, required bool) error {
	switch {
	case s == "" && required:
		return wrapf(ErrInvalid, "empty %s", what)
	case len(s) > MaxNameLen:
		return wrapf(ErrInvalid, "%s of %d bytes exceeds %d", what, len(s), MaxNameLen)
	case !utf8.ValidString(s):
		return wrapf(ErrInvalid, "%s is not valid UTF-8", what)
	}
	for _, c := range s {
		if c < 0x20 || c >= 0x7f && c <= 0x9f { // unicode.IsControl: C0, DEL and C1
			return wrapf(ErrInvalid, "%s %q contains a control character", what, s)
		}
	}
	return nil
}

func validAddr(what, addr string, required bool) error {
	if err := validName(what, addr, required); err != nil || addr == "" {
		return err
	}
	if err := wire.CheckHostPort(addr); err != nil {
		return wrapf(ErrInvalid, "%s %v", what, err)
	}
	return nil
}

func validateRegistration(reg *Registration) error {
	checks := []error{
		validName("cluster name", reg.Cluster, true),
		validName("broker name", reg.BrokerName, true),
		validAddr("broker address", reg.Addr, true),
		validAddr("HA address", reg.HAAddr, false),
		validName("zone", reg.Zone, false),
	}
	for _, err := range checks {
		if err != nil {
			return err
		}
	}
	if reg.BrokerID < 0 {
		return wrapf(ErrInvalid, "negative broker id %d", reg.BrokerID)
	}
	if reg.HeartbeatTimeout < 0 {
		return wrapf(ErrInvalid, "negative heartbeat timeout %s", reg.HeartbeatTimeout)
	}
	return validTopics(reg.Topics)
}

func validTopics(topics []wire.TopicConfig) error {
	for i := range topics {
		if !quickValidTopic(topics[i].Name) {
			if err := ValidTopicName(topics[i].Name); err != nil {
				return err
			}
		}
	}
	return nil
}

// topicByte marks the bytes a topic name may hold, as wire.ValidTopicName
// decides them, so that the one rule lives there.
var topicByte = func() (ok [256]bool) {
	for c := range ok {
		ok[c] = wire.ValidTopicName(string([]byte{byte(c)})) == nil
	}
	return ok
}()

// quickValidTopic is wire.ValidTopicName's verdict without its error, by
// table: a registration names every topic of its broker, and each is
// checked on every one.
func quickValidTopic(name string) bool {
	if name == "" || len(name) > wire.TopicNameLimit(name) {
		return false
	}
	for i := 0; i < len(name); i++ {
		if !topicByte[name[i]] {
			return false
		}
	}
	return true
}

func validateTopicUpdate(u *TopicUpdate) error {
	if err := validName("cluster name", u.Cluster, true); err != nil {
		return err
	}
	if err := validAddr("broker address", u.Addr, true); err != nil {
		return err
	}
	if err := validTopics(u.Upsert); err != nil {
		return err
	}
	for _, name := range u.Remove {
		if err := ValidTopicName(name); err != nil {
			return err
		}
	}
	return nil
}

// wrapf wraps a sentinel error with a message: errors.Is(err, sentinel) holds
// and the text reads "sentinel: message".
func wrapf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: %s", sentinel, fmt.Sprintf(format, args...))
}
