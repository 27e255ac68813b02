package wire

// ArrayLen returns the element count that the array under key declares in
// body, a map, without decoding anything (keys of other types than
// unsigned integers are skipped, as the decoder ignores them): ok is
// false when body is not a map or key holds no array. A node uses it
// to refuse a request naming more items than it allows before the decoder
// allocates one element per item (an empty map is one byte, a decoded
// element tens). body must be a well-formed item (Frame bodies are).
func ArrayLen(body []byte, key uint64) (n uint64, ok bool) {
	major, pairs, b, err := head(body)
	if err != nil || major != 5 {
		return 0, false
	}
	for range pairs {
		major, k, rest, err := head(b)
		if err != nil {
			return 0, false
		}
		if major == 0 && k == key {
			major, n, _, err := head(rest)
			return n, err == nil && major == 4
		}
		// A key of another type (a text or negative key, ignored like an
		// unknown key) is skipped too: key 1 may follow it.
		if major != 0 {
			if rest, err = (walker{}).item(b, 1); err != nil {
				return 0, false
			}
		}
		if b, err = (walker{}).item(rest, 1); err != nil {
			return 0, false
		}
	}
	return 0, false
}
