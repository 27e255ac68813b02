package node

import (
	"github.com/edgereg/edgereg/node/registry"
	"github.com/edgereg/edgereg/wire"
	"github.com/edgereg/edgereg/wire/pki"
)

// Who may send what. Operators may send everything; the table lists the
// other roles. Brokers are further limited to the broker groups their
// certificate names (checked where the group is known, in dispatch).
var (
	queryTypes = []wire.Type{
		wire.TypeGetRoutes, wire.TypeClusterInfo, wire.TypeTopics, wire.TypeBrokerMemberGroup,
		wire.TypeWatch, wire.TypeUnwatch, wire.TypePing,
	}
	brokerTypes = []wire.Type{
		wire.TypeRegister, wire.TypeUpdateTopics, wire.TypeHeartbeat, wire.TypeUnregister,
	}
	anonymousTypes = []wire.Type{wire.TypeGetRoutes, wire.TypeWatch, wire.TypeUnwatch, wire.TypePing}

	allowed = map[string]map[wire.Type]bool{
		string(pki.RoleBroker): setOf(append(brokerTypes, queryTypes...)),
		string(pki.RoleClient): setOf(queryTypes),
		string(pki.RoleNode):   setOf(queryTypes),
		"anonymous":            setOf(anonymousTypes),
	}
)

func setOf(ts []wire.Type) map[wire.Type]bool {
	m := make(map[wire.Type]bool, len(ts))
	for _, t := range ts {
		m[t] = true
	}
	return m
}

// authorize refuses a request the peer's role may not send, naming both.
func authorize(p peer, t wire.Type) *wire.Error {
	if !p.anonymous && p.Role == pki.RoleOperator {
		return nil
	}
	if allowed[p.role()][t] {
		return nil
	}
	return wire.Errorf(wire.CodeNotAuthorized, "not authorized: role %s may not send %s", p.role(), t)
}

// authorizeGroup refuses a broker acting for a group its certificate does
// not name.
func authorizeGroup(p peer, group string) *wire.Error {
	if p.anonymous || p.Role != pki.RoleBroker || p.MayRegisterGroup(group) {
		return nil
	}
	return wire.Errorf(wire.CodeNotAuthorized, "not authorized: broker certificate %q may not act for broker group %q", p.Name, group)
}

// authorizeRegister refuses a registration for a group the broker's
// certificate does not name, and arranges that the registry refuses it too
// when the address holds a lease in another group the certificate does not
// name: taking an address out of a group is acting for that group.
func authorizeRegister(p peer, reg *registry.Registration) *wire.Error {
	if err := authorizeGroup(p, reg.BrokerName); err != nil {
		return err
	}
	reg.MayMove = func(from string) error {
		if err := authorizeGroup(p, from); err != nil {
			return wire.Errorf(wire.CodeNotAuthorized, "not authorized: %s holds a lease in broker group %q: %s", reg.Addr, from, err.Message)
		}
		return nil
	}
	return nil
}
