package dedup

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// errBadIncarnation is wrapped by parseIncarnation for a headerIncarnation that
// is not a positive decimal integer. The middleware treats it as a bad
// payload (asynq.SkipRetry): guessing 1 would hand the downstream the key of
// the first incarnation, whose cached answer (a gateway's decline) a new
// incarnation exists to escape.
var errBadIncarnation = errors.New("onceq: bad incarnation header")

// maxIncarnationDigits keeps the number well inside an int on every platform.
const maxIncarnationDigits = 9

// parseIncarnation is the life of its key that a task with headers h belongs
// to, from headerIncarnation: 1 when the header is absent, else its value,
// which must be a positive decimal integer without sign, spaces or leading
// zeros.
func parseIncarnation(h map[string]string) (int, error) {
	v, ok := h[headerIncarnation]
	if !ok {
		return 1, nil
	}
	if v == "" || len(v) > maxIncarnationDigits || v[0] < '1' || v[0] > '9' ||
		strings.Trim(v, "0123456789") != "" {
		return 0, fmt.Errorf("%w: %s %.20q is not a positive integer", errBadIncarnation, headerIncarnation, v)
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("%w: %s %q: %v", errBadIncarnation, headerIncarnation, v, err)
	}
	return n, nil
}

// downstream is the key handlers pass downstream (a gateway's
// Idempotency-Key, a Message-ID) for incarnation n of k: k.String() for the
// first, "namespace/id#n" from the second on, so a new incarnation is a new
// request to the downstream and not a replay of the one that failed for
// good (payment:charge/pmt-1#2). Retries within one incarnation share it.
// An id that itself contains '#' always carries its incarnation
// ("ns/a#2#1"), so no other key and incarnation can spell the same string.
func downstream(k Key, n int) string {
	if n <= 1 && !strings.Contains(k.ID, "#") {
		return k.String()
	}
	return k.String() + "#" + strconv.Itoa(max(n, 1))
}
