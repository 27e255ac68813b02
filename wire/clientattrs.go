package wire

import "fmt"

// Caps on a client's zone and labels (PROTOCOL.md 7.9). ClientAttrs over
// them are not refused: a route policy answers such a read by its fail
// mode, without being called.
const (
	MaxClientLabels     = 16
	MaxClientLabelBytes = 256 // key plus value
	MaxClientZoneBytes  = 256
)

// overCaps reports whether c exceeds a cap of 7.9: as decoded from the
// wire (OverCapsSent), or as built.
func (c *ClientAttrs) overCaps() bool {
	if c.OverCapsSent || len(c.Zone) > MaxClientZoneBytes || len(c.Labels) > MaxClientLabels {
		return true
	}
	for k, v := range c.Labels {
		if len(k)+len(v) > MaxClientLabelBytes {
			return true
		}
	}
	return false
}

// UnmarshalCBOR decodes ClientAttrs as the struct's tags say, checking
// every label (type, UTF-8) but keeping no more than the caps: attrs over
// a cap keep neither zone nor labels, only OverCapsSent. A peer's labels
// cost what their bytes cost while they are decoded, never a map many
// times their size, and a watch that holds its request's attrs for as
// long as it lives holds nothing of theirs.
func (c *ClientAttrs) UnmarshalCBOR(b []byte) error {
	var raw struct {
		Zone   string       `cbor:"1,keyasint,omitempty"`
		Labels clientLabels `cbor:"2,keyasint,omitempty"`
	}
	if err := decMode.Unmarshal(b, &raw); err != nil {
		return err
	}
	*c = ClientAttrs{Zone: raw.Zone, Labels: raw.Labels.m, OverCapsSent: raw.Labels.over}
	if c.overCaps() {
		*c = ClientAttrs{OverCapsSent: true}
	}
	return nil
}

// clientLabels decodes ClientAttrs.Labels, keeping at most one label more
// than the cap (enough to tell it was exceeded) and none over the byte
// cap.
type clientLabels struct {
	m    map[string]string
	over bool
}

// UnmarshalCBOR reads a map of text keys and values, or null.
func (l *clientLabels) UnmarshalCBOR(b []byte) error {
	if len(b) == 1 && (b[0] == 0xf6 || b[0] == 0xf7) { // null, undefined
		return nil
	}
	major, pairs, b, err := head(b)
	if err != nil {
		return err
	}
	if major != 5 {
		return fmt.Errorf("cbor: cannot unmarshal CBOR major type %d into client labels (a map of text)", major)
	}
	for range pairs {
		var k, v string
		if b, err = decodeText(b, &k); err != nil {
			return err
		}
		if b, err = decodeText(b, &v); err != nil {
			return err
		}
		switch {
		case l.over:
		case len(l.m) == MaxClientLabels || len(k)+len(v) > MaxClientLabelBytes:
			l.m, l.over = nil, true
		default:
			if l.m == nil {
				l.m = make(map[string]string)
			}
			l.m[k] = v
		}
	}
	return nil
}

// decodeText decodes the item at the start of b into s with the
// package's rules and returns what follows it.
func decodeText(b []byte, s *string) ([]byte, error) {
	rest, ok := skipRaw(b, 0)
	if !ok {
		return nil, errMalformed
	}
	if err := decMode.Unmarshal(b[:len(b)-len(rest)], s); err != nil {
		return nil, err
	}
	return rest, nil
}
