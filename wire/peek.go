package wire

// ArrayLen returns the element count that the array under key declares in
// body, a map of unsigned integer keys, without decoding anything: ok is
// false when body is not such a map or key holds no array. A node uses it
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
		if err != nil || major != 0 {
			return 0, false
		}
		if k == key {
			major, n, _, err := head(rest)
			return n, err == nil && major == 4
		}
		if b, err = (walker{}).item(rest, 1); err != nil {
			return 0, false
		}
	}
	return 0, false
}
